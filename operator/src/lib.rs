#![forbid(unsafe_code)]

pub mod render;
