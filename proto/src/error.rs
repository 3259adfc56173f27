//! The one error type of the wire contract: an [`ActorError`] with a stable [`ErrorKind`],
//! carried in gRPC statuses in the standard rich error model — `grpc-status-details-bin` holds a
//! `google.rpc.Status` whose `details` are one [`v1::ErrorDetail`] packed as `Any` — plus a
//! `sigx-error-kind` metadata entry, so that every language's stock status helper
//! (`grpc_status.rpc_status` in Python, `status.FromError` in Go, ...) finds the kind.

use crate::v1;
use prost::Message;
use std::fmt;
use std::time::Duration;

/// The metadata key that names the error kind in ASCII (`fenced`, `wrong-host`, ...).
pub const ERROR_KIND_METADATA: &str = "sigx-error-kind";

/// The `Any` type URL of a packed [`v1::ErrorDetail`].
pub const ERROR_DETAIL_TYPE_URL: &str = "type.googleapis.com/sigx.actors.v1.ErrorDetail";

/// What went wrong, as a stable kind (DESIGN.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// This host fenced itself: it can no longer prove its membership. Terminal for the host.
    Fenced,
    /// No active host registers the actor's type.
    Unplaceable,
    /// The target host could not be reached; the call never ran.
    Unreachable,
    /// The target host does not hold or accept this actor; the call never ran.
    WrongHost,
    /// The call's deadline passed.
    Timeout,
    /// The actor's own error, passed through.
    App,
    /// Routing retries were spent; `cause` holds the last answer.
    Activation,
    /// Bad input: unknown type or method, oversize payload, malformed request.
    Invalid,
    /// A mesh peer failed authentication.
    Unauthenticated,
    /// The connection died with the call in flight: it may or may not have run. Never retried.
    OutcomeUnknown,
    /// The turn ran on an activation a newer one had superseded: the state store refused its
    /// writes (none is stored) and the activation was dropped. Never retried by sigx.
    StaleEpoch,
}

impl ErrorKind {
    /// Every kind, in wire order.
    pub const ALL: [ErrorKind; 11] = [
        ErrorKind::Fenced,
        ErrorKind::Unplaceable,
        ErrorKind::Unreachable,
        ErrorKind::WrongHost,
        ErrorKind::Timeout,
        ErrorKind::App,
        ErrorKind::Activation,
        ErrorKind::Invalid,
        ErrorKind::Unauthenticated,
        ErrorKind::OutcomeUnknown,
        ErrorKind::StaleEpoch,
    ];

    /// The kind's stable short name, as in DESIGN.md and the `sigx-error-kind` metadata.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Fenced => "fenced",
            ErrorKind::Unplaceable => "unplaceable",
            ErrorKind::Unreachable => "unreachable",
            ErrorKind::WrongHost => "wrong-host",
            ErrorKind::Timeout => "timeout",
            ErrorKind::App => "app",
            ErrorKind::Activation => "activation",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Unauthenticated => "unauthenticated",
            ErrorKind::OutcomeUnknown => "outcome-unknown",
            ErrorKind::StaleEpoch => "stale-epoch",
        }
    }

    /// The gRPC code the kind travels under (a coarse hint; the kind is in the details).
    ///
    /// Generic gRPC retry policies (service configs, Envoy, meshes) retry `UNAVAILABLE`, so
    /// only answers worth an immediate blind retry travel under it. `activation` does not: sigx
    /// has already re-routed the call as often as it may within the deadline, and its commonest
    /// cause, a type no host registers (an unknown type, `unplaceable`), fails the same way
    /// however often it is retried; a client retry would only multiply the work. It travels
    /// under `FAILED_PRECONDITION`, which gRPC defines as "do not retry until the system state
    /// changes" and no default policy retries, like `unplaceable` and `wrong-host`; clients
    /// that want to retry branch on the kind (and its cause), which the details carry.
    pub fn code(self) -> tonic::Code {
        match self {
            ErrorKind::Fenced | ErrorKind::Unreachable => tonic::Code::Unavailable,
            ErrorKind::Unplaceable | ErrorKind::WrongHost | ErrorKind::Activation => {
                tonic::Code::FailedPrecondition
            }
            ErrorKind::Timeout => tonic::Code::DeadlineExceeded,
            ErrorKind::App => tonic::Code::Unknown,
            ErrorKind::Invalid => tonic::Code::InvalidArgument,
            ErrorKind::Unauthenticated => tonic::Code::Unauthenticated,
            ErrorKind::OutcomeUnknown | ErrorKind::StaleEpoch => tonic::Code::Aborted,
        }
    }

    /// The protobuf enum value.
    pub fn to_proto(self) -> v1::ErrorKind {
        match self {
            ErrorKind::Fenced => v1::ErrorKind::Fenced,
            ErrorKind::Unplaceable => v1::ErrorKind::Unplaceable,
            ErrorKind::Unreachable => v1::ErrorKind::Unreachable,
            ErrorKind::WrongHost => v1::ErrorKind::WrongHost,
            ErrorKind::Timeout => v1::ErrorKind::Timeout,
            ErrorKind::App => v1::ErrorKind::App,
            ErrorKind::Activation => v1::ErrorKind::Activation,
            ErrorKind::Invalid => v1::ErrorKind::Invalid,
            ErrorKind::Unauthenticated => v1::ErrorKind::Unauthenticated,
            ErrorKind::OutcomeUnknown => v1::ErrorKind::OutcomeUnknown,
            ErrorKind::StaleEpoch => v1::ErrorKind::StaleEpoch,
        }
    }

    /// From the protobuf enum value; unknown or unspecified values read as `OutcomeUnknown`,
    /// the only safe reading of an answer we cannot interpret.
    pub fn from_proto(value: i32) -> ErrorKind {
        match v1::ErrorKind::try_from(value) {
            Ok(v1::ErrorKind::Fenced) => ErrorKind::Fenced,
            Ok(v1::ErrorKind::Unplaceable) => ErrorKind::Unplaceable,
            Ok(v1::ErrorKind::Unreachable) => ErrorKind::Unreachable,
            Ok(v1::ErrorKind::WrongHost) => ErrorKind::WrongHost,
            Ok(v1::ErrorKind::Timeout) => ErrorKind::Timeout,
            Ok(v1::ErrorKind::App) => ErrorKind::App,
            Ok(v1::ErrorKind::Activation) => ErrorKind::Activation,
            Ok(v1::ErrorKind::Invalid) => ErrorKind::Invalid,
            Ok(v1::ErrorKind::Unauthenticated) => ErrorKind::Unauthenticated,
            Ok(v1::ErrorKind::StaleEpoch) => ErrorKind::StaleEpoch,
            _ => ErrorKind::OutcomeUnknown,
        }
    }

    /// True for the three answers that prove a call never ran, and so may be re-routed
    /// (DESIGN.md §5).
    pub fn is_retryable_route(self) -> bool {
        matches!(
            self,
            ErrorKind::Unreachable | ErrorKind::WrongHost | ErrorKind::Unplaceable
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error of the actor runtime, as every layer and every client sees it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ActorError {
    /// The stable kind.
    pub kind: ErrorKind,
    /// What was wrong and what to do about it.
    pub message: String,
    /// For `WrongHost`: the owning host, when known.
    pub owner_hint: Option<String>,
    /// A transient answer: retry after this long, within the call's deadline.
    pub retry_after: Option<Duration>,
    /// For `Activation`: the last answer before the retries ran out.
    pub cause: Option<Box<ActorError>>,
}

impl fmt::Display for ActorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)?;
        if let Some(cause) = &self.cause {
            write!(f, " (last answer: {cause})")?;
        }
        Ok(())
    }
}

impl ActorError {
    /// An error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ActorError {
            kind,
            message: message.into(),
            owner_hint: None,
            retry_after: None,
            cause: None,
        }
    }

    /// `fenced`.
    pub fn fenced(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Fenced, message)
    }
    /// `unplaceable`.
    pub fn unplaceable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unplaceable, message)
    }
    /// `unreachable`.
    pub fn unreachable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unreachable, message)
    }
    /// `wrong-host`.
    pub fn wrong_host(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::WrongHost, message)
    }
    /// `timeout`.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Timeout, message)
    }
    /// `app`.
    pub fn app(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::App, message)
    }
    /// `invalid`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, message)
    }
    /// `unauthenticated`.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unauthenticated, message)
    }
    /// `outcome-unknown`.
    pub fn outcome_unknown(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::OutcomeUnknown, message)
    }
    /// `stale-epoch`.
    pub fn stale_epoch(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::StaleEpoch, message)
    }
    /// `activation`, wrapping the last answer.
    pub fn activation(message: impl Into<String>, cause: ActorError) -> Self {
        let mut e = Self::new(ErrorKind::Activation, message);
        e.cause = Some(Box::new(cause));
        e
    }

    /// Sets the owner hint.
    pub fn with_owner_hint(mut self, owner: impl Into<String>) -> Self {
        self.owner_hint = Some(owner.into());
        self
    }

    /// Marks the answer transient: retry after `after`.
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// The protobuf form.
    pub fn to_detail(&self) -> v1::ErrorDetail {
        v1::ErrorDetail {
            kind: self.kind.to_proto() as i32,
            message: self.message.clone(),
            owner_hint: self.owner_hint.clone().unwrap_or_default(),
            retry_after_ms: self
                .retry_after
                .map(|d| d.as_millis().min(u64::MAX as u128) as u64)
                .unwrap_or(0),
            cause: self.cause.as_ref().map(|c| Box::new(c.to_detail())),
        }
    }

    /// From the protobuf form.
    pub fn from_detail(detail: &v1::ErrorDetail) -> Self {
        ActorError {
            kind: ErrorKind::from_proto(detail.kind),
            message: detail.message.clone(),
            owner_hint: (!detail.owner_hint.is_empty()).then(|| detail.owner_hint.clone()),
            retry_after: (detail.retry_after_ms > 0)
                .then(|| Duration::from_millis(detail.retry_after_ms)),
            cause: detail
                .cause
                .as_ref()
                .map(|c| Box::new(ActorError::from_detail(c))),
        }
    }

    /// The gRPC status: the kind's code, the message, a `google.rpc.Status` (same code and
    /// message, the detail packed as `Any`) as its details, and the kind metadata.
    pub fn to_status(&self) -> tonic::Status {
        let code = self.kind.code();
        let message = self.to_string();
        let details = crate::google::rpc::Status {
            code: code as i32,
            message: message.clone(),
            details: vec![prost_types::Any {
                type_url: ERROR_DETAIL_TYPE_URL.to_string(),
                value: self.to_detail().encode_to_vec(),
            }],
        }
        .encode_to_vec();
        let mut metadata = tonic::metadata::MetadataMap::new();
        metadata.insert(
            ERROR_KIND_METADATA,
            tonic::metadata::MetadataValue::from_static(self.kind.as_str()),
        );
        tonic::Status::with_details_and_metadata(code, message, details.into(), metadata)
    }

    /// The sigx detail a status carries: packed in a `google.rpc.Status`, or (from sidecars
    /// before the rich error model) bare.
    pub fn detail_of(status: &tonic::Status) -> Option<v1::ErrorDetail> {
        let bytes = status.details();
        if bytes.is_empty() {
            return None;
        }
        let packed = crate::google::rpc::Status::decode(bytes)
            .ok()
            .and_then(|rich| {
                rich.details
                    .into_iter()
                    .find(|any| any.type_url == ERROR_DETAIL_TYPE_URL)
            })
            .and_then(|any| v1::ErrorDetail::decode(any.value.as_slice()).ok());
        packed
            .or_else(|| v1::ErrorDetail::decode(bytes).ok())
            .filter(|d| d.kind != v1::ErrorKind::Unspecified as i32)
    }

    /// Reads a gRPC status. A status that carries a sigx detail is decoded exactly; any other
    /// status (a proxy, a transport failure) is classified by its code alone:
    /// `Unauthenticated` and `InvalidArgument` keep their meaning, `DeadlineExceeded` and
    /// `Cancelled` read as `timeout`, and everything else as `outcome-unknown`, because nothing
    /// proves the call did not run.
    pub fn from_status(status: &tonic::Status) -> Self {
        if let Some(detail) = ActorError::detail_of(status) {
            return ActorError::from_detail(&detail);
        }
        let kind = match status.code() {
            tonic::Code::Unauthenticated => ErrorKind::Unauthenticated,
            tonic::Code::InvalidArgument => ErrorKind::Invalid,
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => ErrorKind::Timeout,
            _ => ErrorKind::OutcomeUnknown,
        };
        ActorError::new(kind, format!("{} ({:?})", status.message(), status.code()))
    }
}

impl From<ActorError> for tonic::Status {
    fn from(e: ActorError) -> Self {
        e.to_status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_a_status() {
        for kind in ErrorKind::ALL {
            let err = ActorError::new(kind, "boom")
                .with_owner_hint("host-b")
                .with_retry_after(Duration::from_millis(40));
            let status = err.to_status();
            assert_eq!(status.code(), kind.code());
            assert_eq!(
                status.metadata().get(ERROR_KIND_METADATA).unwrap(),
                kind.as_str()
            );
            assert_eq!(ActorError::from_status(&status), err);
        }
    }

    #[test]
    fn the_details_are_a_google_rpc_status_with_the_detail_packed_as_any() {
        let err = ActorError::wrong_host("not here").with_owner_hint("host-b");
        let status = err.to_status();
        let rich = crate::google::rpc::Status::decode(status.details()).unwrap();
        assert_eq!(rich.code, status.code() as i32);
        assert_eq!(rich.message, status.message());
        assert_eq!(rich.details.len(), 1);
        assert_eq!(
            rich.details[0].type_url,
            "type.googleapis.com/sigx.actors.v1.ErrorDetail"
        );
        let detail = v1::ErrorDetail::decode(rich.details[0].value.as_slice()).unwrap();
        assert_eq!(detail, err.to_detail());
    }

    #[test]
    fn the_bare_detail_of_older_sidecars_still_decodes() {
        let err = ActorError::wrong_host("not here").with_owner_hint("host-b");
        let status = tonic::Status::with_details(
            err.kind.code(),
            err.to_string(),
            err.to_detail().encode_to_vec().into(),
        );
        assert_eq!(ActorError::from_status(&status), err);
    }

    #[test]
    fn activation_keeps_its_cause() {
        let err = ActorError::activation("retries spent", ActorError::unplaceable("nobody"));
        let back = ActorError::from_status(&err.to_status());
        assert_eq!(back.kind, ErrorKind::Activation);
        assert_eq!(back.cause.unwrap().kind, ErrorKind::Unplaceable);
    }

    #[test]
    fn answers_a_retry_cannot_fix_travel_under_a_code_generic_policies_do_not_retry() {
        let err = ActorError::activation("retries spent", ActorError::unplaceable("no host"));
        let status = err.to_status();
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert_eq!(
            status.metadata().get(ERROR_KIND_METADATA).unwrap(),
            "activation"
        );
        for kind in ErrorKind::ALL {
            if kind.code() == tonic::Code::Unavailable {
                assert!(
                    matches!(kind, ErrorKind::Unreachable | ErrorKind::Fenced),
                    "{kind} must not travel under UNAVAILABLE"
                );
            }
        }
    }

    #[test]
    fn a_foreign_status_is_never_mistaken_for_a_retryable_answer() {
        let status = tonic::Status::unavailable("connection reset");
        let err = ActorError::from_status(&status);
        assert_eq!(err.kind, ErrorKind::OutcomeUnknown);
        assert!(!err.kind.is_retryable_route());
    }
}
