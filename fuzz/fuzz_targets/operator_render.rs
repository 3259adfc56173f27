//! libFuzzer entry point of [`sigx_fuzz::operator_render`] (`make fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sigx_fuzz::operator_render(data));
