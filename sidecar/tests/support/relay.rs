//! A mesh dialer whose answers can be held: a peer gets our requests, we get nothing back while
//! the gate is closed (a peer whose replies are stuck, a grant kept in flight).

use async_trait::async_trait;
use sigx_sidecar::mesh::{BoxedIo, Connector};

/// Dials over TCP; answers (server to client bytes) from `held` — every address when `None` —
/// wait while `open` is false.
pub struct HoldAnswers {
    pub held: Option<String>,
    pub open: tokio::sync::watch::Receiver<bool>,
}

#[async_trait]
impl Connector for HoldAnswers {
    async fn connect(&self, addr: &str) -> std::io::Result<BoxedIo> {
        let upstream = tokio::net::TcpStream::connect(addr).await?;
        upstream.set_nodelay(true)?;
        if self.held.as_deref().is_some_and(|h| h != addr) {
            return Ok(Box::new(upstream));
        }
        let (mine, theirs) = tokio::io::duplex(256 * 1024);
        let (mut up_r, mut up_w) = upstream.into_split();
        let (mut th_r, mut th_w) = tokio::io::split(theirs);
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut th_r, &mut up_w).await;
        });
        let mut open = self.open.clone();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match up_r.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if open.wait_for(|o| *o).await.is_err() {
                    return;
                }
                if th_w.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        });
        Ok(Box::new(mine))
    }
}
