//! libFuzzer entry point of [`sigx_fuzz::app_authority`] (`make fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sigx_fuzz::app_authority(data));
