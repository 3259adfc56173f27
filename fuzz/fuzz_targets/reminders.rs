//! libFuzzer entry point of [`sigx_fuzz::reminders`] (`make fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sigx_fuzz::reminders(data));
