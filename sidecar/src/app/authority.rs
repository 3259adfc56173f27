//! Accepts any HTTP/2 `:authority` on the app socket.
//!
//! On a Unix socket the authority names nothing, and stock gRPC clients fill it differently:
//! gRPC's C core (Python, Ruby, PHP, C++) sends the percent-encoded socket path
//! (`tmp%2Fdir%2Fs.sock`), which is not a valid URI authority, so the HTTP/2 server under tonic
//! (`h2`) resets every such stream with PROTOCOL_ERROR before the service sees it. `h2` has no
//! switch for that, so [`AnyAuthority`] sits between the accepted socket and the server: it
//! reads the client's frames, decodes each header block with its own HPACK decoder, and while
//! every `:authority` parses it forwards the original bytes untouched. From the first block with
//! an authority the server would refuse, it re-encodes every later block of that connection with
//! the authority read as `localhost`.
//!
//! Re-encoded blocks use only literals without indexing, so they never add to or refer to the
//! server's dynamic table: the table the server built from the forwarded blocks simply stops
//! being used, and the two sides can never disagree about it. Anything this layer cannot parse
//! (a malformed frame, an HPACK error, a header block over [`MAX_HEADER_BLOCK`]) is forwarded
//! as is, and the layer steps aside for the rest of the connection: the server then answers the
//! protocol error itself, exactly as without this layer. Writes pass straight through.
//!
//! Except once blocks are re-encoded: the server's table then lacks what the client's later
//! blocks inserted, so a block forwarded as is would decode to other headers there, and so
//! would every block after it. A block too large to inspect (over [`MAX_HEADER_BLOCK`], or
//! decoding to more than [`MAX_HEADER_LIST`]) then fails the connection: the server reads what
//! was complete before it, then a read error that names the cause. (An HPACK error or a
//! malformed frame still steps aside: the server's decoder fails on it too.)

use bytes::{Buf, BufMut, BytesMut};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The authority a refused one is read as.
pub const LOCAL_AUTHORITY: &[u8] = b"localhost";

/// A header block larger than this is forwarded without inspection.
pub const MAX_HEADER_BLOCK: usize = 1 << 20;

/// A header block decoding to a list larger than this (RFC 7541 §4.1 sizes: name, value and 32
/// bytes per field) is forwarded without inspection. A block refers to table entries of up to
/// 4 KiB with one byte each, so without it a 1 MiB block could decode to gigabytes.
pub const MAX_HEADER_LIST: usize = 1 << 20;

/// Why a connection whose blocks are re-encoded fails (see the module docs).
pub const TOO_LARGE_AFTER_REWRITE: &str = "app socket: a header block over 1 MiB (or decoding to \
    more) arrived after this connection's :authority was rewritten; it cannot be passed on \
    without the server's HPACK table going out of step with the client's, so the connection \
    is closed (send smaller metadata)";

const PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// Every HTTP/2 peer accepts frames this large (the protocol's minimum SETTINGS_MAX_FRAME_SIZE).
const MAX_FRAME: usize = 16_384;
const READ_CHUNK: usize = 16 * 1024;

/// An accepted app-socket connection whose refused `:authority` values read as `localhost`.
pub struct AnyAuthority<S> {
    inner: S,
    rewriter: Rewriter,
    scratch: Box<[u8]>,
    eof: bool,
}

impl<S> AnyAuthority<S> {
    /// Wraps an accepted connection (the client side speaks first: preface, then frames).
    pub fn new(inner: S) -> Self {
        AnyAuthority {
            inner,
            rewriter: Rewriter::default(),
            scratch: vec![0; READ_CHUNK].into_boxed_slice(),
            eof: false,
        }
    }

    /// Whether this connection's header blocks are being re-encoded (a client sent an authority
    /// the server would refuse).
    pub fn rewriting(&self) -> bool {
        self.rewriter.reencode
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Preface,
    Frames,
    /// Stepped aside: bytes pass unchanged.
    Transparent,
    /// Re-encoding and handed a block it cannot pass on consistently: reads fail.
    Failed,
}

/// A header block being collected (HEADERS, then CONTINUATION until END_HEADERS).
struct Block {
    raw: BytesMut,
    fragment: BytesMut,
    stream_id: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
}

/// The byte-level state machine, separate from the I/O so it can be tested on buffers.
struct Rewriter {
    stage: Stage,
    decoder: loona_hpack::Decoder<'static>,
    input: BytesMut,
    output: BytesMut,
    block: Option<Block>,
    reencode: bool,
}

impl Default for Rewriter {
    fn default() -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        // The server advertises no other SETTINGS_HEADER_TABLE_SIZE than the protocol default.
        decoder.set_max_allowed_table_size(4096);
        Rewriter {
            stage: Stage::Preface,
            decoder,
            input: BytesMut::new(),
            output: BytesMut::new(),
            block: None,
            reencode: false,
        }
    }
}

impl Rewriter {
    /// Takes bytes from the client and moves everything complete to `output`.
    fn push(&mut self, bytes: &[u8]) {
        self.input.extend_from_slice(bytes);
        self.process();
    }

    /// The client closed its side: whatever is pending goes on unchanged.
    fn finish(&mut self) {
        if self.stage == Stage::Failed {
            return;
        }
        if let Some(block) = self.block.take() {
            self.output.extend_from_slice(&block.raw);
        }
        let rest = self.input.split();
        self.output.extend_from_slice(&rest);
    }

    fn step_aside(&mut self) {
        if let Some(block) = self.block.take() {
            self.output.extend_from_slice(&block.raw);
        }
        self.stage = Stage::Transparent;
    }

    /// A block too large to inspect: forwarded as is, unless blocks are re-encoded.
    fn too_large(&mut self) {
        if !self.reencode {
            self.step_aside();
            return;
        }
        tracing::warn!("{TOO_LARGE_AFTER_REWRITE}");
        self.block = None;
        self.input.clear();
        self.stage = Stage::Failed;
    }

    fn process(&mut self) {
        loop {
            match self.stage {
                Stage::Failed => {
                    self.input.clear();
                    return;
                }
                Stage::Transparent => {
                    let rest = self.input.split();
                    self.output.extend_from_slice(&rest);
                    return;
                }
                Stage::Preface => {
                    if self.input.len() < PREFACE_LEN {
                        return;
                    }
                    let preface = self.input.split_to(PREFACE_LEN);
                    self.output.extend_from_slice(&preface);
                    self.stage = Stage::Frames;
                }
                Stage::Frames => {
                    if self.input.len() < FRAME_HEADER_LEN {
                        return;
                    }
                    let len = u32::from_be_bytes([0, self.input[0], self.input[1], self.input[2]])
                        as usize;
                    if self.input.len() < FRAME_HEADER_LEN + len {
                        return;
                    }
                    let frame = self.input.split_to(FRAME_HEADER_LEN + len);
                    self.frame(frame);
                }
            }
        }
    }

    fn frame(&mut self, frame: BytesMut) {
        let (kind, flags) = (frame[3], frame[4]);
        let stream_id = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        let payload = &frame[FRAME_HEADER_LEN..];
        if let Some(block) = &mut self.block {
            if kind != CONTINUATION || stream_id != block.stream_id {
                // A protocol error the server will name; not ours to judge.
                self.step_aside();
                self.output.extend_from_slice(&frame);
                return;
            }
            block.fragment.extend_from_slice(payload);
            block.raw.extend_from_slice(&frame);
            if block.fragment.len() > MAX_HEADER_BLOCK {
                self.too_large();
            } else if flags & END_HEADERS != 0 {
                self.end_block();
            }
            return;
        }
        if kind != HEADERS {
            self.output.extend_from_slice(&frame);
            return;
        }
        let Some((priority, fragment)) = headers_fragment(flags, payload) else {
            self.output.extend_from_slice(&frame);
            self.stage = Stage::Transparent;
            return;
        };
        self.block = Some(Block {
            fragment: BytesMut::from(fragment),
            raw: frame,
            stream_id,
            end_stream: flags & END_STREAM != 0,
            priority,
        });
        if flags & END_HEADERS != 0 {
            self.end_block();
        }
    }

    fn end_block(&mut self) {
        let block = self.block.take().expect("a block in progress");
        let mut headers = Vec::new();
        let mut size = 0usize;
        // Decoded in full even past the limit: the table must follow every insertion.
        let decoded = self.decoder.decode_with_cb(&block.fragment, |name, value| {
            size = size.saturating_add(name.len() + value.len() + 32);
            if size <= MAX_HEADER_LIST {
                headers.push((name.into_owned(), value.into_owned()));
            }
        });
        if let Err(e) = decoded {
            tracing::debug!(error = %e, "app socket: undecodable header block; forwarding it as is");
            self.block = Some(block);
            self.step_aside();
            return;
        }
        if block.fragment.len() > MAX_HEADER_BLOCK || size > MAX_HEADER_LIST {
            if self.reencode {
                self.too_large();
            } else {
                // Both tables saw the same bytes and still agree: forward it, keep going.
                self.output.extend_from_slice(&block.raw);
            }
            return;
        }
        let mut refused = false;
        for (name, value) in &mut headers {
            if name == b":authority" && http::uri::Authority::try_from(value.as_slice()).is_err() {
                if !self.reencode {
                    tracing::debug!(
                        authority = %String::from_utf8_lossy(value),
                        "app socket: a client sent an :authority HTTP/2 servers refuse (gRPC's C \
                         core sends the socket path); reading it as localhost on this connection"
                    );
                }
                *value = LOCAL_AUTHORITY.to_vec();
                refused = true;
            }
        }
        self.reencode |= refused;
        if !self.reencode {
            self.output.extend_from_slice(&block.raw);
            return;
        }
        let mut encoded = BytesMut::new();
        for (name, value) in &headers {
            encode_literal(&mut encoded, name, value);
        }
        write_block(
            &mut self.output,
            block.stream_id,
            block.end_stream,
            block.priority,
            encoded,
        );
    }
}

/// The header block fragment of a HEADERS payload (padding and priority removed), or `None`
/// when the payload is too short for its own flags.
fn headers_fragment(flags: u8, payload: &[u8]) -> Option<(Option<[u8; 5]>, &[u8])> {
    let mut body = payload;
    let mut pad = 0usize;
    if flags & PADDED != 0 {
        pad = *body.first()? as usize;
        body = &body[1..];
    }
    let mut priority = None;
    if flags & PRIORITY != 0 {
        priority = Some(<[u8; 5]>::try_from(body.get(..5)?).ok()?);
        body = &body[5..];
    }
    let end = body.len().checked_sub(pad)?;
    Some((priority, &body[..end]))
}

/// One header as a literal without indexing with a literal name, no Huffman (RFC 7541 §6.2.2).
fn encode_literal(dst: &mut BytesMut, name: &[u8], value: &[u8]) {
    dst.put_u8(0x00);
    encode_string(dst, name);
    encode_string(dst, value);
}

fn encode_string(dst: &mut BytesMut, s: &[u8]) {
    encode_integer(dst, s.len(), 7, 0x00);
    dst.extend_from_slice(s);
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541 §5.1).
fn encode_integer(dst: &mut BytesMut, mut value: usize, n: u8, first: u8) {
    let max = (1usize << n) - 1;
    if value < max {
        dst.put_u8(first | value as u8);
        return;
    }
    dst.put_u8(first | max as u8);
    value -= max;
    while value >= 128 {
        dst.put_u8((value % 128 + 128) as u8);
        value /= 128;
    }
    dst.put_u8(value as u8);
}

/// Writes a header block as one HEADERS frame and as many CONTINUATION frames as it needs.
fn write_block(
    dst: &mut BytesMut,
    stream_id: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    mut block: BytesMut,
) {
    let prefix = priority.map_or(0, |_| 5);
    let first_len = block.len().min(MAX_FRAME - prefix);
    let first = block.split_to(first_len);
    let mut flags = 0;
    if end_stream {
        flags |= END_STREAM;
    }
    if priority.is_some() {
        flags |= PRIORITY;
    }
    if block.is_empty() {
        flags |= END_HEADERS;
    }
    frame_header(dst, prefix + first.len(), HEADERS, flags, stream_id);
    if let Some(p) = priority {
        dst.extend_from_slice(&p);
    }
    dst.extend_from_slice(&first);
    while block.has_remaining() {
        let chunk = block.split_to(block.len().min(MAX_FRAME));
        let flags = if block.is_empty() { END_HEADERS } else { 0 };
        frame_header(dst, chunk.len(), CONTINUATION, flags, stream_id);
        dst.extend_from_slice(&chunk);
    }
}

fn frame_header(dst: &mut BytesMut, len: usize, kind: u8, flags: u8, stream_id: u32) {
    dst.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    dst.put_u8(kind);
    dst.put_u8(flags);
    dst.put_u32(stream_id & 0x7fff_ffff);
}

impl<S: AsyncRead + Unpin> AsyncRead for AnyAuthority<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let out = &mut this.rewriter.output;
            if !out.is_empty() {
                let n = out.len().min(buf.remaining());
                buf.put_slice(&out.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if this.rewriter.stage == Stage::Failed {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    TOO_LARGE_AFTER_REWRITE,
                )));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            if this.rewriter.stage == Stage::Transparent && this.rewriter.input.is_empty() {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            let mut chunk = ReadBuf::new(&mut this.scratch);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut chunk))?;
            if chunk.filled().is_empty() {
                this.eof = true;
                this.rewriter.finish();
            } else {
                this.rewriter.push(chunk.filled());
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AnyAuthority<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for AnyAuthority<tokio::net::UnixStream> {
    type ConnectInfo = tonic::transport::server::UdsConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
#[path = "authority_tests.rs"]
mod tests;
