//! Small blocking probes the multi-process tests share.

use std::net::SocketAddr;
use std::time::Duration;

/// The HTTP status of `GET path` at `addr` (a sidecar's health port), or 0 when nothing
/// answers: a test polls it while a process starts or stops.
pub fn http_status(addr: SocketAddr, path: &str) -> u16 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}
