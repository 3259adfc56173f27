//! The client's reading of a sidecar that is not there: real Unix sockets, no server.

use sigx_sdk::{Client, ErrorKind, MemberFilter};
use std::path::PathBuf;

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sigx-sdk-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn a_socket_that_does_not_exist_is_unreachable_and_named() {
    let dir = scratch("missing");
    let socket = dir.join("nobody.sock");
    let client = Client::lazy(&socket);
    let e = client.call("Counter", "a", "get", "").await.unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::Unreachable,
        "the request never left: {e}"
    );
    assert!(e.message.contains(socket.to_str().unwrap()), "{e}");
    let e = client.members(&MemberFilter::active()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");

    let e = Client::connect(&socket).await.unwrap_err();
    assert!(e.to_string().contains(socket.to_str().unwrap()), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_socket_file_nobody_listens_on_is_unreachable() {
    let dir = scratch("stale");
    let socket = dir.join("stale.sock");
    // Bind and drop: the file stays, nobody listens (what a crashed sidecar leaves behind).
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let e = Client::lazy(&socket)
        .call("Counter", "a", "get", "")
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
