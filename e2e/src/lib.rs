#![forbid(unsafe_code)]
pub mod kube_double;
