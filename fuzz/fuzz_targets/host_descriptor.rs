//! libFuzzer entry point of [`sigx_fuzz::host_descriptor`] (`make fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sigx_fuzz::host_descriptor(data));
