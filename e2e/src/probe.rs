//! Small blocking probes the multi-process tests share.

use std::net::SocketAddr;
use std::time::Duration;

/// The HTTP status of `GET path` at `addr` (a sidecar's health port), or 0 when nothing
/// answers: a test polls it while a process starts or stops.
pub fn http_status(addr: SocketAddr, path: &str) -> u16 {
    http_status_with(addr, path, &[], Duration::from_secs(2))
}

/// Like [`http_status`], with request headers and how long to wait for the answer (a kubelet's
/// probe or preStop hook: the drain hook answers only once the sidecar has drained).
pub fn http_status_with(
    addr: SocketAddr,
    path: &str,
    headers: &[(String, String)],
    wait: Duration,
) -> u16 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(wait));
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return 0;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}
