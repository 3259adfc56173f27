//! The sigx wire contract, generated from `proto/sigx/actors/v1/*.proto`.
//!
//! * [`v1::actor_host_server`] / [`v1::actor_host_client`]: the app API the sidecar serves on its
//!   Unix socket.
//! * [`v1::mesh_server`] / [`v1::mesh_client`]: the host-to-host mesh.
//! * [`error`]: the error kinds and their mapping onto gRPC statuses.
//! * [`FILE_DESCRIPTOR_SET`]: the encoded descriptors, for gRPC server reflection.
#![forbid(unsafe_code)]

pub mod error;

/// Package `sigx.actors.v1`.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("sigx.actors.v1");
}

/// Package `google.rpc`: the standard rich error model ([`google::rpc::Status`]), vendored in
/// `proto/google/rpc/status.proto`.
pub mod google {
    /// Package `google.rpc`.
    pub mod rpc {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("google.rpc");
    }
}

/// The encoded `FileDescriptorSet` of every sigx proto file (with imports and source info).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/sigx_descriptor.bin"));

pub use error::{ActorError, ErrorKind};
