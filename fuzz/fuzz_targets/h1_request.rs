//! The lean HTTP/1.1 server's parser (`fulcrum_proxy::h1::parse`) on any
//! bytes: a request head, then a chunked body. Never a panic, and the
//! framing invariants hold:
//! - a parsed head is no longer than the input and no longer than the
//!   limit, and one byte less of it is an incomplete head, not a different one;
//! - its framing agrees with its fields: chunked exactly when
//!   `Transfer-Encoding` is there, and then no `Content-Length`; otherwise
//!   the one `Content-Length` value (or 0), and never `Transfer-Encoding`
//!   in HTTP/1.0;
//! - a chunked body decodes to the same data and the same end whether it
//!   arrives whole or split at any point (here: at a point the input picks),
//!   and never yields more data than it was given.
#![no_main]

use bytes::BytesMut;
use fulcrum_proxy::h1::parse::{parse_request, Chunk, Chunked, Framing, Malformed};
use http::header;
use libfuzzer_sys::fuzz_target;

const MAX_BYTES: usize = 8192;
const MAX_HEADERS: usize = 20;

/// Decode `parts` fed in order: the data, and whether the body ended or broke.
fn decode(parts: &[&[u8]]) -> (Vec<u8>, Result<bool, Malformed>) {
    let mut state = Chunked::default();
    let mut read = BytesMut::new();
    let mut data = Vec::new();
    for part in parts {
        read.extend_from_slice(part);
        loop {
            match state.step(&mut read) {
                Ok(Some(d)) => {
                    assert!(!d.is_empty(), "an empty data frame");
                    data.extend_from_slice(&d);
                }
                Ok(None) if state.at == Chunk::Done => return (data, Ok(true)),
                Ok(None) => break,
                Err(e) => return (data, Err(e)),
            }
        }
    }
    (data, Ok(false))
}

fuzz_target!(|input: &[u8]| {
    let Some((&split, data)) = input.split_first() else { return };
    match parse_request(data, MAX_BYTES, MAX_HEADERS) {
        Ok(Some(head)) => {
            assert!(head.len <= data.len() && head.len <= MAX_BYTES);
            assert!(matches!(parse_request(&data[..head.len - 1], MAX_BYTES, MAX_HEADERS), Ok(None)));
            let te = head.headers.contains_key(header::TRANSFER_ENCODING);
            let lengths: Vec<_> = head.headers.get_all(header::CONTENT_LENGTH).iter().collect();
            match head.framing {
                Framing::Chunked => assert!(te && lengths.is_empty() && head.version == http::Version::HTTP_11),
                Framing::Length(n) => {
                    assert!(!te && lengths.len() <= 1);
                    let announced = lengths.first().map_or(0, |v| v.to_str().unwrap().parse::<u64>().unwrap());
                    assert_eq!(n, announced);
                }
            }
            let body = &data[head.len..];
            let whole = decode(&[body]);
            let at = usize::from(split) % (body.len() + 1);
            let (a, b) = body.split_at(at);
            let bytewise: Vec<&[u8]> = body.chunks(1).collect();
            assert!(whole.0.len() <= body.len());
            // Split input can only decode the same, or stop at the same
            // error; whole and split must agree on data and outcome.
            assert_eq!(decode(&[a, b]), whole);
            assert_eq!(decode(&bytewise), whole);
        }
        Ok(None) => assert!(data.len() < MAX_BYTES),
        Err(_) => {}
    }
});
