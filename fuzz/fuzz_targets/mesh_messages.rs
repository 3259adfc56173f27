//! libFuzzer entry point of [`sigx_fuzz::mesh_messages`] (`make fuzz`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sigx_fuzz::mesh_messages(data));
