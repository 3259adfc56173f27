use super::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    frame_header(&mut b, payload.len(), kind, flags, stream_id);
    b.extend_from_slice(payload);
    b.to_vec()
}

/// A literal with incremental indexing whose name is static index `name_index`: the form gRPC's
/// C core uses for `:authority`, so the next request can refer to it by dynamic index 62.
fn indexed_literal(name_index: u8, value: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    encode_integer(&mut b, name_index as usize, 6, 0x40);
    encode_string(&mut b, value);
    b.to_vec()
}

/// `:method POST` (static 3), `:scheme http` (static 6), `:path` (static name 4) as a literal.
fn request_head(path: &[u8]) -> Vec<u8> {
    let mut b = vec![0x83, 0x86];
    let mut p = BytesMut::new();
    encode_integer(&mut p, 4, 4, 0x00);
    encode_string(&mut p, path);
    b.extend_from_slice(&p);
    b
}

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// Splits the rewriter's output into frames and decodes every header block with a fresh
/// decoder, as the server would: (stream id, flags of the first frame, headers).
fn server_view(bytes: &[u8]) -> Vec<(u32, u8, Fields)> {
    assert_eq!(&bytes[..PREFACE_LEN], PREFACE, "the preface passes first");
    let mut rest = &bytes[PREFACE_LEN..];
    let mut decoder = loona_hpack::Decoder::new();
    let mut blocks = Vec::new();
    let mut open: Option<(u32, u8, Vec<u8>)> = None;
    while !rest.is_empty() {
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        assert!(
            len <= MAX_FRAME,
            "frame of {len} bytes exceeds the default max frame size"
        );
        let (kind, flags) = (rest[3], rest[4]);
        let sid = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]);
        let payload = &rest[FRAME_HEADER_LEN..FRAME_HEADER_LEN + len];
        rest = &rest[FRAME_HEADER_LEN + len..];
        match kind {
            HEADERS => {
                let (_, fragment) = headers_fragment(flags, payload).unwrap();
                open = Some((sid, flags, fragment.to_vec()));
            }
            CONTINUATION => open.as_mut().unwrap().2.extend_from_slice(payload),
            _ => continue,
        }
        if flags & END_HEADERS != 0 {
            let (sid, first_flags, block) = open.take().unwrap();
            blocks.push((sid, first_flags, decoder.decode(&block).unwrap()));
        }
    }
    blocks
}

fn authority_of(headers: &[(Vec<u8>, Vec<u8>)]) -> &[u8] {
    &headers.iter().find(|(n, _)| n == b":authority").unwrap().1
}

#[test]
fn a_valid_authority_passes_byte_for_byte() {
    let mut input = PREFACE.to_vec();
    input.extend(frame(0x4, 0, 0, &[])); // SETTINGS
    let mut block = request_head(b"/sigx.actors.v1.ActorHost/Status");
    block.extend(indexed_literal(1, b"localhost"));
    input.extend(frame(HEADERS, END_HEADERS, 1, &block));
    input.extend(frame(0x0, END_STREAM, 1, &[0, 0, 0, 0, 0]));
    let mut rw = Rewriter::default();
    rw.push(&input);
    assert_eq!(rw.output.as_ref(), input.as_slice());
    assert!(!rw.reencode);
}

#[test]
fn a_percent_encoded_socket_path_reads_as_localhost_also_through_the_dynamic_table() {
    let mut input = PREFACE.to_vec();
    let mut first = request_head(b"/sigx.actors.v1.ActorHost/Status");
    first.extend(indexed_literal(1, b"tmp%2Fsxp.ab%2Fs.sock"));
    first.extend(indexed_literal(58, b"grpc-python/1.85.1")); // user-agent
    input.extend(frame(HEADERS, END_HEADERS, 1, &first));
    input.extend(frame(0x0, END_STREAM, 1, &[0, 0, 0, 0, 0]));
    // The second request refers to both inserted entries by dynamic index (62 newest, 63).
    let mut second = request_head(b"/sigx.actors.v1.ActorHost/Call");
    second.extend([0x80 | 63, 0x80 | 62]);
    input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &second));

    let mut rw = Rewriter::default();
    rw.push(&input);
    assert!(rw.reencode);
    let blocks = server_view(&rw.output);
    assert_eq!(blocks.len(), 2);
    for (_, _, headers) in &blocks {
        assert_eq!(authority_of(headers), b"localhost");
        assert!(
            http::uri::Authority::try_from(authority_of(headers)).is_ok(),
            "the server accepts it"
        );
        let ua = headers.iter().find(|(n, _)| n == b"user-agent").unwrap();
        assert_eq!(ua.1, b"grpc-python/1.85.1");
    }
    assert_eq!(blocks[0].0, 1);
    assert_eq!(blocks[0].1 & END_STREAM, 0);
    assert_eq!(blocks[1].0, 3);
    assert_eq!(blocks[1].1 & END_STREAM, END_STREAM, "END_STREAM is kept");
    assert_eq!(
        blocks[1].2[2],
        (
            b":path".to_vec(),
            b"/sigx.actors.v1.ActorHost/Call".to_vec()
        )
    );
}

#[test]
fn input_split_anywhere_gives_the_same_output() {
    let mut input = PREFACE.to_vec();
    let mut block = request_head(b"/x/y");
    block.extend(indexed_literal(1, b"a%2Fb"));
    // Padded and with priority, split over a CONTINUATION.
    let (a, b) = block.split_at(3);
    let mut payload = vec![2];
    payload.extend([0, 0, 0, 0, 16]);
    payload.extend(a);
    payload.extend([0, 0]);
    input.extend(frame(HEADERS, PADDED | PRIORITY, 5, &payload));
    input.extend(frame(CONTINUATION, END_HEADERS, 5, b));
    input.extend(frame(0x0, END_STREAM, 5, b"hello"));

    let mut whole = Rewriter::default();
    whole.push(&input);
    let mut bytewise = Rewriter::default();
    for byte in &input {
        bytewise.push(std::slice::from_ref(byte));
    }
    assert_eq!(whole.output, bytewise.output);
    let blocks = server_view(&whole.output);
    assert_eq!(authority_of(&blocks[0].2), b"localhost");
    assert_eq!(blocks[0].1 & PRIORITY, PRIORITY, "the priority is kept");
    assert!(whole.output.ends_with(&frame(0x0, END_STREAM, 5, b"hello")));
}

#[test]
fn a_large_rewritten_block_is_split_into_frames_the_server_accepts() {
    let mut input = PREFACE.to_vec();
    let mut block = request_head(b"/x/y");
    block.extend(indexed_literal(1, b"big%2Fsock"));
    let big = vec![b'v'; 40_000];
    let mut lit = BytesMut::new();
    encode_literal(&mut lit, b"x-big", &big);
    block.extend_from_slice(&lit);
    let (a, rest) = block.split_at(MAX_FRAME);
    let (b, c) = rest.split_at(MAX_FRAME);
    input.extend(frame(HEADERS, 0, 1, a));
    input.extend(frame(CONTINUATION, 0, 1, b));
    input.extend(frame(CONTINUATION, END_HEADERS, 1, c));
    let mut rw = Rewriter::default();
    rw.push(&input);
    let blocks = server_view(&rw.output);
    assert_eq!(authority_of(&blocks[0].2), b"localhost");
    assert_eq!(blocks[0].2.last().unwrap().1, big);
}

#[test]
fn an_undecodable_block_is_forwarded_unchanged_and_the_layer_steps_aside() {
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS, 1, &[0x80 | 70])); // index 70: not in any table
    let mut block = request_head(b"/x/y");
    block.extend(indexed_literal(1, b"a%2Fb"));
    input.extend(frame(HEADERS, END_HEADERS, 3, &block));
    let mut rw = Rewriter::default();
    rw.push(&input);
    assert_eq!(rw.output.as_ref(), input.as_slice());
    assert_eq!(rw.stage, Stage::Transparent);
}

/// A block over [`MAX_HEADER_BLOCK`] once blocks are re-encoded cannot be forwarded as is: the
/// server's HPACK table lacks what the re-encoded blocks inserted on the client's side, so that
/// block and every later one would decode to other headers there (here `:authority` would
/// read as the earlier `x-tenant` entry). The connection fails instead, with what was complete
/// before it passed on.
#[test]
fn an_oversized_block_after_a_rewrite_fails_the_connection_instead_of_desyncing_hpack() {
    let mut input = PREFACE.to_vec();
    // Stream 1: a valid authority and `x-tenant: alice`, both inserted (62 = x-tenant).
    let mut first = request_head(b"/x/a");
    first.extend(indexed_literal(1, b"localhost"));
    let mut tenant = BytesMut::new();
    tenant.put_u8(0x40);
    encode_string(&mut tenant, b"x-tenant");
    encode_string(&mut tenant, b"alice");
    first.extend_from_slice(&tenant);
    input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &first));
    // Stream 3: the C core's authority, inserted on the client's side only (re-encoded).
    let mut second = request_head(b"/x/b");
    second.extend(indexed_literal(1, b"tmp%2Fs.sock"));
    input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &second));
    // Stream 5: a block over the limit.
    let mut big = request_head(b"/x/c");
    let mut lit = BytesMut::new();
    encode_literal(&mut lit, b"x-big", &vec![b'v'; MAX_HEADER_BLOCK]);
    big.extend_from_slice(&lit);
    let mut chunks = big.chunks(MAX_FRAME).peekable();
    input.extend(frame(HEADERS, END_STREAM, 5, chunks.next().unwrap()));
    while let Some(c) = chunks.next() {
        let flags = if chunks.peek().is_none() {
            END_HEADERS
        } else {
            0
        };
        input.extend(frame(CONTINUATION, flags, 5, c));
    }
    // Stream 7 refers to the client's newest entry (62: the socket path authority).
    let mut fourth = request_head(b"/x/d");
    fourth.push(0x80 | 62);
    input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 7, &fourth));

    let mut rw = Rewriter::default();
    rw.push(&input);
    assert_eq!(
        rw.stage,
        Stage::Failed,
        "the layer must not step aside here"
    );
    let blocks = server_view(&rw.output);
    assert_eq!(
        blocks.len(),
        2,
        "only the blocks before the oversized one pass"
    );
    assert_eq!(authority_of(&blocks[1].2), b"localhost");

    // Through the connection: what passed is read, then the read fails, naming the cause.
    let mut conn = AnyAuthority::new(input.as_slice());
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut read = Vec::new();
    let err = loop {
        let mut buf = vec![0u8; 64 * 1024];
        let mut rb = ReadBuf::new(&mut buf);
        match Pin::new(&mut conn).poll_read(&mut cx, &mut rb) {
            Poll::Ready(Ok(())) if rb.filled().is_empty() => panic!("the connection ended cleanly"),
            Poll::Ready(Ok(())) => read.extend_from_slice(rb.filled()),
            Poll::Ready(Err(e)) => break e,
            Poll::Pending => unreachable!("a slice never pends"),
        }
    };
    assert_eq!(read, rw.output.as_ref());
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    assert!(err.to_string().contains("header block over"), "{err}");
}
