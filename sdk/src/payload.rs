//! Typed payload helpers. The sidecar carries payloads as opaque bytes; these encode and decode
//! them as serde JSON or as protobuf messages, so both sides agree on one format per method.

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sigx_proto::ActorError;

/// Encodes `value` as a JSON payload.
pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Bytes, ActorError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| ActorError::invalid(format!("cannot encode the payload as JSON: {e}")))
}

/// Decodes a JSON payload. An empty payload reads as JSON `null`, so `Option<T>` and `()` accept
/// a call made with no payload at all.
pub fn from_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        serde_json::from_slice(b"null")
    } else {
        serde_json::from_slice(bytes)
    }
}

/// Encodes a protobuf message as a payload.
pub fn proto<M: prost::Message>(message: &M) -> Bytes {
    Bytes::from(message.encode_to_vec())
}

/// Decodes a protobuf payload.
pub fn from_proto<M: prost::Message + Default>(bytes: &[u8]) -> Result<M, prost::DecodeError> {
    M::decode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_payload_reads_as_null() {
        assert_eq!(from_json::<Option<i64>>(b"").unwrap(), None);
        assert_eq!(from_json::<Option<i64>>(b" \n").unwrap(), None);
        assert_eq!(from_json::<Option<i64>>(b"7").unwrap(), Some(7));
        from_json::<()>(b"").unwrap();
        assert!(
            from_json::<i64>(b"").is_err(),
            "a required value stays required"
        );
    }

    #[test]
    fn json_and_proto_round_trip() {
        let b = json(&vec![1, 2, 3]).unwrap();
        assert_eq!(from_json::<Vec<i32>>(&b).unwrap(), vec![1, 2, 3]);
        let msg = sigx_proto::v1::ActorRef {
            actor_type: "Counter".into(),
            key: "k".into(),
        };
        let back: sigx_proto::v1::ActorRef = from_proto(&proto(&msg)).unwrap();
        assert_eq!(back, msg);
    }
}
