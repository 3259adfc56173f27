//! `app_authority`: the app socket's `:authority` rewriter (`sidecar/src/app/authority.rs`),
//! driven through its public [`AnyAuthority`] over an in-memory connection.
//!
//! Byte 0 is the size of the chunks the client's bytes arrive in (0: all at once); the rest
//! follows the 24-byte HTTP/2 preface. Invariants:
//! - a connection whose blocks are not re-encoded comes out byte for byte as it went in;
//! - a re-encoded one carries, up to the first thing the layer cannot parse, the same frames
//!   in the same order: every non-header frame unchanged, and every header block, decoded by
//!   an HPACK decoder of its own as the server would, equal to the client's block with each
//!   `:authority` a server refuses read as `localhost` (same stream, END_STREAM and priority).

use sigx_sidecar::app::authority::{AnyAuthority, LOCAL_AUTHORITY, MAX_HEADER_BLOCK};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, ReadBuf};

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// A client that hands over its bytes `chunk` at a time.
struct Client {
    data: Vec<u8>,
    at: usize,
    chunk: usize,
}

impl AsyncRead for Client {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let n = (this.data.len() - this.at)
            .min(this.chunk)
            .min(buf.remaining());
        buf.put_slice(&this.data[this.at..this.at + n]);
        this.at += n;
        Poll::Ready(Ok(()))
    }
}

/// What the server reads through the layer, and whether the layer re-encoded.
fn through_layer(input: &[u8], chunk: usize) -> (Vec<u8>, bool, Option<io::Error>) {
    let mut conn = AnyAuthority::new(Client {
        data: input.to_vec(),
        at: 0,
        chunk,
    });
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    let mut buf = vec![0u8; 8192];
    loop {
        let mut rb = ReadBuf::new(&mut buf);
        match Pin::new(&mut conn).poll_read(&mut cx, &mut rb) {
            Poll::Ready(Ok(())) if rb.filled().is_empty() => return (out, conn.rewriting(), None),
            Poll::Ready(Ok(())) => out.extend_from_slice(rb.filled()),
            Poll::Ready(Err(e)) => return (out, conn.rewriting(), Some(e)),
            Poll::Pending => panic!("an in-memory client never pends"),
        }
    }
}

/// The fuzz target.
pub fn app_authority(data: &[u8]) {
    let Some((&chunk, frames)) = data.split_first() else {
        return;
    };
    let chunk = if chunk == 0 { usize::MAX } else { chunk.into() };
    let mut input = PREFACE.to_vec();
    input.extend_from_slice(frames);
    let (out, rewriting, err) = through_layer(&input, chunk);
    if !rewriting {
        assert!(err.is_none(), "failed without rewriting: {err:?}");
        assert!(
            out == input,
            "the bytes changed although no block was re-encoded"
        );
        return;
    }
    let sent = events(&input, true);
    let got = events(&out, false);
    for (i, want) in sent.iter().enumerate() {
        let Event::Parsed(want) = want else {
            // The layer steps aside here; what follows is the server's to judge.
            return;
        };
        match got.get(i) {
            Some(Event::Parsed(have)) => assert!(
                have == want,
                "frame {i} differs after the layer:\n sent {want:?}\n read {have:?}"
            ),
            other => {
                // Only a connection the layer failed may end before the client's frames do.
                assert!(
                    err.is_some(),
                    "frame {i} is missing after the layer: {other:?}"
                );
                return;
            }
        }
    }
}

#[derive(Debug, PartialEq)]
enum Frame {
    /// Any frame but HEADERS and CONTINUATION, raw.
    Other(Vec<u8>),
    /// A header block: stream, END_STREAM, priority, the decoded headers.
    Block(u32, bool, Option<Vec<u8>>, Vec<(Vec<u8>, Vec<u8>)>),
}

/// A header block being collected: stream, END_STREAM, priority, the fragment so far.
type Pending = (u32, bool, Option<Vec<u8>>, Vec<u8>);

#[derive(Debug)]
enum Event {
    Parsed(Frame),
    /// Something the layer does not parse (or a frame left incomplete): it steps aside here.
    Opaque,
}

/// The frames after the preface. `client`: the bytes as sent, where the `:authority` values a
/// server refuses are replaced by `localhost` to compare with what the layer passes on.
fn events(bytes: &[u8], client: bool) -> Vec<Event> {
    let mut decoder = loona_hpack::Decoder::new();
    decoder.set_max_allowed_table_size(4096);
    let mut out = Vec::new();
    let mut rest = &bytes[PREFACE.len().min(bytes.len())..];
    let mut block: Option<Pending> = None;
    while rest.len() >= 9 {
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        if rest.len() < 9 + len {
            break;
        }
        let (kind, flags) = (rest[3], rest[4]);
        let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]) & 0x7fff_ffff;
        let (frame, tail) = rest.split_at(9 + len);
        rest = tail;
        let payload = &frame[9..];
        let done = match (&mut block, kind) {
            (Some((s, ..)), CONTINUATION) if *s == stream => {
                let b = block.as_mut().unwrap();
                b.3.extend_from_slice(payload);
                if b.3.len() > MAX_HEADER_BLOCK {
                    out.push(Event::Opaque);
                    return out;
                }
                flags & END_HEADERS != 0
            }
            (Some(_), _) => {
                out.push(Event::Opaque);
                return out;
            }
            (None, HEADERS) => {
                let Some((priority, fragment)) = fragment(flags, payload) else {
                    out.push(Event::Opaque);
                    return out;
                };
                block = Some((stream, flags & END_STREAM != 0, priority, fragment.to_vec()));
                flags & END_HEADERS != 0
            }
            (None, _) => {
                out.push(Event::Parsed(Frame::Other(frame.to_vec())));
                false
            }
        };
        if done {
            let (stream, end_stream, priority, fragment) = block.take().unwrap();
            let mut headers = Vec::new();
            let decoded = decoder.decode_with_cb(&fragment, |n, v| {
                headers.push((n.into_owned(), v.into_owned()))
            });
            if decoded.is_err() {
                out.push(Event::Opaque);
                return out;
            }
            if client {
                for (n, v) in &mut headers {
                    if n == b":authority" && http::uri::Authority::try_from(v.as_slice()).is_err() {
                        *v = LOCAL_AUTHORITY.to_vec();
                    }
                }
            }
            out.push(Event::Parsed(Frame::Block(
                stream, end_stream, priority, headers,
            )));
        }
    }
    if block.is_some() || !rest.is_empty() {
        out.push(Event::Opaque);
    }
    out
}

fn fragment(flags: u8, payload: &[u8]) -> Option<(Option<Vec<u8>>, &[u8])> {
    let mut body = payload;
    let mut pad = 0;
    if flags & PADDED != 0 {
        pad = usize::from(*body.first()?);
        body = &body[1..];
    }
    let mut priority = None;
    if flags & PRIORITY != 0 {
        priority = Some(body.get(..5)?.to_vec());
        body = &body[5..];
    }
    let end = body.len().checked_sub(pad)?;
    Some((priority, &body[..end]))
}
