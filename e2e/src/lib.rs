#![forbid(unsafe_code)]
pub mod apiserver_metrics;
pub mod chaos;
pub mod controlplane;
pub mod kube_double;
pub mod kubelet;
pub mod lease_fleet;
pub mod otelcol;
pub mod probe;
pub mod real_operator;
pub mod sim;
pub mod single_host;
