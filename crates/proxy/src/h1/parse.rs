//! HTTP/1.1 message framing shared by the lean server ([`h1::server`](crate::h1::server))
//! and the lean client ([`h1`](crate::h1)): the request head, parsed once
//! and checked against RFC 9112, and the chunked transfer coding (§7.1),
//! decoded from a connection's read buffer.
//!
//! A request head is parsed with `httparse`, whose request grammar already
//! refuses obs-fold (§5.2), whitespace between a field name and its colon
//! (§5.1), bare CR, NUL and other control octets, and more than one space
//! between the parts of the request line. On top of it, [`parse_request`]
//! decides the body's framing (§6) and refuses with 400:
//!
//! - `Transfer-Encoding` that is anything but the single coding `chunked`
//!   (over all its field lines): a coding the proxy would have to undo
//!   (`gzip, chunked`), `chunked` applied twice, or `chunked` not last —
//!   the last would leave the body's length to the connection's close,
//!   which a request cannot use (§6.3);
//! - `Transfer-Encoding` in an HTTP/1.0 request (§6.1: 1.0 has no chunking);
//! - `Transfer-Encoding` together with `Content-Length`. RFC 9112 §6.1 lets
//!   a server either refuse it or let the transfer coding win and close the
//!   connection after the response; hyper does the latter. The lean path
//!   refuses: the pair is the signature of a request-smuggling attempt
//!   (CL.TE, TE.CL), no client that means well sends it, and refusing means
//!   no component in front of or behind the proxy can read a different
//!   request boundary than the proxy did;
//! - a `Content-Length` that is not all digits, overflows, or disagrees
//!   with another `Content-Length` line (a repeated identical value is one
//!   length, as in hyper; a comma list is refused, as hyper does);
//! - a request target in none of the forms of §3.2: origin form (`/path`),
//!   absolute form (`http://host/path`), authority form only for CONNECT,
//!   asterisk form only for OPTIONS.
//!
//! A head larger than the listener's `max_header_bytes` or with more than
//! `max_headers` fields is refused with 431. A missing or repeated `Host` is
//! left to the shared request path, which refuses it for both server paths.
//!
//! Chunked coding ([`Chunked`]): a chunk size is 1 to 16 hex digits that
//! fit a `u64`, optionally followed by whitespace and extensions of visible
//! characters; a size line is at most 4 KiB, extensions over a whole body
//! at most 16 KiB, trailers at most 16 KiB (hyper's limits), and every
//! line ends in CRLF. Anything else is malformed, so the body fails.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Uri, Version};

/// A chunk-size or trailer line longer than this is malformed.
pub const MAX_LINE: usize = 4 * 1024;
/// Chunk extensions over a whole body beyond this are malformed.
const MAX_EXTENSIONS: usize = 16 * 1024;
/// Trailer fields over a whole body beyond this are malformed.
const MAX_TRAILERS: usize = 16 * 1024;
/// Header slots tried first: most heads have few fields, and 16 slots are
/// cheaper to set up than the hundred allowed.
const FEW_HEADERS: usize = 16;

/// How a request's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// This many bytes (0: no body).
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
}

/// A parsed request head.
#[derive(Debug)]
pub struct RequestHead {
    /// Its length in the buffer.
    pub len: usize,
    /// The method.
    pub method: Method,
    /// The request target.
    pub uri: Uri,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// The header fields, `Content-Length` once if repeated.
    pub headers: HeaderMap,
    /// How the body is delimited.
    pub framing: Framing,
    /// Whether the connection may carry another request after this one.
    pub keep_alive: bool,
    /// `Expect: 100-continue`.
    pub expect_continue: bool,
}

/// Why a request head is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// 400, with the reason.
    Bad(&'static str),
    /// 431: over `max_header_bytes` or `max_headers`.
    TooLarge,
}

/// A complete request head at the start of `buf`; `Ok(None)` if more is
/// needed. `max_bytes` and `max_headers` are the listener's limits.
pub fn parse_request(buf: &[u8], max_bytes: usize, max_headers: usize) -> Result<Option<RequestHead>, HeadError> {
    let mut few = [httparse::EMPTY_HEADER; FEW_HEADERS];
    let parsed = match parse_into(buf, &mut few[..FEW_HEADERS.min(max_headers)], max_bytes) {
        // Too many fields for the few slots (or a head over the limit,
        // which the second parse finds again): parse with all of them.
        Err(HeadError::TooLarge) if max_headers > FEW_HEADERS => {
            parse_into(buf, &mut vec![httparse::EMPTY_HEADER; max_headers], max_bytes)
        }
        parsed => parsed,
    }?;
    if parsed.is_none() && buf.len() >= max_bytes {
        return Err(HeadError::TooLarge);
    }
    Ok(parsed)
}

fn parse_into<'b>(
    buf: &'b [u8],
    slots: &mut [httparse::Header<'b>],
    max_bytes: usize,
) -> Result<Option<RequestHead>, HeadError> {
    let mut req = httparse::Request::new(slots);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Partial) => return Ok(None),
        Ok(httparse::Status::Complete(len)) => len,
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(_) => return Err(HeadError::Bad("malformed request head")),
    };
    if len > max_bytes {
        return Err(HeadError::TooLarge);
    }
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(HeadError::Bad("malformed request line"));
    };
    let method = Method::from_bytes(method.as_bytes()).map_err(|_| HeadError::Bad("malformed method"))?;
    let version = if minor == 1 { Version::HTTP_11 } else { Version::HTTP_10 };
    let uri = target_of(&method, target)?;
    let mut fields = Fields::new(version);
    let mut headers = HeaderMap::with_capacity(req.headers.len() + 3);
    for h in req.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| HeadError::Bad("malformed field name"))?;
        let value = HeaderValue::from_bytes(h.value).map_err(|_| HeadError::Bad("malformed field value"))?;
        if fields.note(&name, h.value)? {
            headers.append(name, value);
        }
    }
    let framing = fields.framing()?;
    let keep_alive = fields.keep_alive();
    Ok(Some(RequestHead { len, method, uri, version, headers, framing, keep_alive, expect_continue: fields.expect }))
}

/// The request target, in the form RFC 9112 §3.2 allows for `method`.
fn target_of(method: &Method, target: &str) -> Result<Uri, HeadError> {
    let bad = HeadError::Bad("malformed request target");
    if target.starts_with('/') && method != Method::CONNECT {
        return target.parse::<Uri>().map_err(|_| bad);
    }
    if target == "*" {
        return if method == Method::OPTIONS { target.parse().map_err(|_| bad) } else { Err(bad) };
    }
    let uri = target.parse::<Uri>().map_err(|_| bad)?;
    let absolute = uri.scheme().is_some() && uri.authority().is_some();
    let authority_form = uri.scheme().is_none() && uri.authority().is_some() && uri.path_and_query().is_none();
    match (method == Method::CONNECT, absolute, authority_form) {
        (false, true, _) | (true, _, true) => Ok(uri),
        _ => Err(bad),
    }
}

/// What a head's fields say about its body and connection, noted as they
/// are read.
struct Fields {
    version: Version,
    length: Option<u64>,
    /// `Transfer-Encoding` was seen; `chunked_ok` whether all of it, over
    /// every line, was exactly the one coding `chunked`.
    te: bool,
    chunked_ok: bool,
    close: bool,
    keep_alive: bool,
    expect: bool,
}

impl Fields {
    fn new(version: Version) -> Self {
        Fields { version, length: None, te: false, chunked_ok: false, close: false, keep_alive: false, expect: false }
    }

    /// Note one field; whether it goes into the header map (a repeated
    /// identical `Content-Length` does not).
    fn note(&mut self, name: &HeaderName, value: &[u8]) -> Result<bool, HeadError> {
        let tokens = || value.split(|&b| b == b',').map(<[u8]>::trim_ascii);
        if *name == header::CONTENT_LENGTH {
            let n = digits(value).ok_or(HeadError::Bad("malformed Content-Length"))?;
            return match self.length.replace(n) {
                None => Ok(true),
                Some(seen) if seen == n => Ok(false),
                Some(_) => Err(HeadError::Bad("conflicting Content-Length")),
            };
        }
        if *name == header::TRANSFER_ENCODING {
            if self.version == Version::HTTP_10 {
                return Err(HeadError::Bad("Transfer-Encoding in an HTTP/1.0 request"));
            }
            // The first line may say exactly `chunked`; any other coding,
            // or a second line, makes it not exactly one `chunked`.
            let mut codings = tokens();
            let only_chunked =
                matches!((codings.next(), codings.next()), (Some(c), None) if c.eq_ignore_ascii_case(b"chunked"));
            self.chunked_ok = !self.te && only_chunked;
            self.te = true;
        } else if *name == header::CONNECTION {
            for t in tokens() {
                self.close |= t.eq_ignore_ascii_case(b"close");
                self.keep_alive |= t.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if *name == header::EXPECT {
            self.expect = value.eq_ignore_ascii_case(b"100-continue");
        }
        Ok(true)
    }

    fn framing(&self) -> Result<Framing, HeadError> {
        match (self.te, self.length) {
            (true, Some(_)) => Err(HeadError::Bad("both Transfer-Encoding and Content-Length")),
            (true, None) if self.chunked_ok => Ok(Framing::Chunked),
            (true, None) => Err(HeadError::Bad("Transfer-Encoding other than chunked")),
            (false, length) => Ok(Framing::Length(length.unwrap_or(0))),
        }
    }

    /// HTTP/1.1 keeps the connection unless told to close; 1.0 closes it
    /// unless told to keep it (RFC 9112 §9.3).
    fn keep_alive(&self) -> bool {
        !self.close && (self.version == Version::HTTP_11 || self.keep_alive)
    }
}

/// A decimal length: digits only (no sign, no spaces), within `u64`.
fn digits(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| match b {
        b'0'..=b'9' => n.checked_mul(10)?.checked_add(u64::from(b - b'0')),
        _ => None,
    })
}

/// Where a chunked body stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunk {
    /// A chunk-size line is next.
    Size,
    /// This many bytes of chunk data are still to come.
    Data(u64),
    /// The CRLF after a chunk's data is next.
    DataEnd,
    /// Trailer lines, up to an empty one, are next.
    Trailers,
    /// The body has ended.
    Done,
}

/// A chunked body's decoder: where it stands and what its extensions and
/// trailers have used of their limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunked {
    /// Where the body stands.
    pub at: Chunk,
    extensions: usize,
    trailers: usize,
}

/// The chunked coding is malformed or over a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

impl Default for Chunked {
    fn default() -> Self {
        Chunked { at: Chunk::Size, extensions: 0, trailers: 0 }
    }
}

impl Chunked {
    /// Advance over what `read` holds: `Some(data)` for chunk data (never
    /// empty), `None` with `at == Done` at the end, `None` otherwise when
    /// more must be read first. Trailers are read and dropped.
    pub fn step(&mut self, read: &mut BytesMut) -> Result<Option<Bytes>, Malformed> {
        loop {
            self.at = match self.at {
                Chunk::Done => return Ok(None),
                Chunk::Size => {
                    let Some(line) = take_line(read)? else { return Ok(None) };
                    let (size, ext) = chunk_size(&line).ok_or(Malformed)?;
                    self.extensions += ext;
                    if self.extensions > MAX_EXTENSIONS {
                        return Err(Malformed);
                    }
                    if size == 0 {
                        Chunk::Trailers
                    } else {
                        Chunk::Data(size)
                    }
                }
                Chunk::Data(left) => {
                    if read.is_empty() {
                        return Ok(None);
                    }
                    let n = read.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let left = left - n as u64;
                    self.at = if left == 0 { Chunk::DataEnd } else { Chunk::Data(left) };
                    return Ok(Some(read.split_to(n).freeze()));
                }
                Chunk::DataEnd => match take_line(read)? {
                    None => return Ok(None),
                    Some(line) if line.is_empty() => Chunk::Size,
                    Some(_) => return Err(Malformed),
                },
                Chunk::Trailers => match take_line(read)? {
                    None => return Ok(None),
                    Some(line) if line.is_empty() => Chunk::Done,
                    Some(line) => {
                        self.trailers += line.len() + 2;
                        if self.trailers > MAX_TRAILERS || !field_line(&line) {
                            return Err(Malformed);
                        }
                        Chunk::Trailers
                    }
                },
            };
        }
    }
}

/// One line without its CRLF from the front of `read`, if a whole one is
/// there. A bare CR or LF, or a line over [`MAX_LINE`], is malformed.
fn take_line(read: &mut BytesMut) -> Result<Option<BytesMut>, Malformed> {
    match read.iter().position(|&b| b == b'\n' || b == b'\r') {
        Some(end) if end > MAX_LINE => Err(Malformed),
        Some(end) => match read.get(end..end + 2) {
            Some(b"\r\n") => {
                let line = read.split_to(end);
                read.advance(2);
                Ok(Some(line))
            }
            // A CR at the end of what was read so far: its LF may follow.
            None if read[end] == b'\r' => Ok(None),
            _ => Err(Malformed),
        },
        None if read.len() > MAX_LINE => Err(Malformed),
        None => Ok(None),
    }
}

/// A chunk-size line's size and the length of its extensions:
/// `1*16HEXDIG [BWS] *( ";" ext )`, extensions being visible characters,
/// spaces and tabs.
fn chunk_size(line: &[u8]) -> Option<(u64, usize)> {
    let hex = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if hex == 0 || hex > 16 {
        return None;
    }
    let size = u64::from_str_radix(std::str::from_utf8(&line[..hex]).ok()?, 16).ok()?;
    let rest = &line[hex..];
    let ext = rest.trim_ascii_start();
    if ext.is_empty() && rest.is_empty() {
        return Some((size, 0));
    }
    if ext.first() != Some(&b';') || !ext.iter().all(|&b| field_octet(b)) {
        return None;
    }
    Some((size, ext.len()))
}

/// A trailer field line: a token, a colon, and a value of field octets
/// (so no obs-fold, no whitespace before the colon).
fn field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else { return false };
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    colon > 0 && line[..colon].iter().all(token) && line[colon + 1..].iter().all(|&b| field_octet(b))
}

/// A visible octet, space or tab: what a field line or extension may hold.
fn field_octet(b: u8) -> bool {
    b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Result<Option<RequestHead>, HeadError> {
        parse_request(text.as_bytes(), 64 * 1024, 100)
    }

    fn framing(fields: &str) -> Result<Framing, HeadError> {
        head(&format!("POST / HTTP/1.1\r\nHost: a\r\n{fields}\r\n")).map(|h| h.unwrap().framing)
    }

    #[test]
    fn framing_follows_rfc_9112_section_6() {
        assert_eq!(framing(""), Ok(Framing::Length(0)));
        assert_eq!(framing("Content-Length: 5\r\n"), Ok(Framing::Length(5)));
        assert_eq!(framing("Content-Length: 5\r\ncontent-length: 5\r\n"), Ok(Framing::Length(5)));
        assert_eq!(framing("Transfer-Encoding: Chunked\r\n"), Ok(Framing::Chunked));
        for bad in [
            "Content-Length: 5\r\nContent-Length: 6\r\n",
            "Content-Length: 5, 5\r\n",
            "Content-Length: +5\r\n",
            "Content-Length: 99999999999999999999\r\n",
            "Content-Length:\r\n",
            "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
            "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
            "Transfer-Encoding: gzip, chunked\r\n",
            "Transfer-Encoding: chunked, chunked\r\n",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
            "Transfer-Encoding: chunked, gzip\r\n",
            "Transfer-Encoding: identity\r\n",
            "Transfer-Encoding: chunked,\r\n",
            "Transfer-Encoding: xchunked\r\n",
        ] {
            assert!(matches!(framing(bad), Err(HeadError::Bad(_))), "{bad:?}");
        }
        let old = head("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert!(matches!(old, Err(HeadError::Bad(_))));
    }

    #[test]
    fn heads_with_forbidden_octets_or_forms_are_refused() {
        for bad in [
            "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n folded\r\n\r\n",
            "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\rX: 1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\0\r\n\r\n",
            "GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET / HTTP/1.2\r\nHost: a\r\n\r\n",
            "GET * HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET example.com:80 HTTP/1.1\r\nHost: a\r\n\r\n",
            "CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n",
        ] {
            assert!(matches!(head(bad), Err(HeadError::Bad(_))), "{bad:?}");
        }
        for good in [
            "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
            "CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
            "GET http://a.test/x?y HTTP/1.1\r\nHost: a.test\r\n\r\n",
        ] {
            assert!(head(good).unwrap().is_some(), "{good:?}");
        }
    }

    #[test]
    fn limits_give_431_and_partial_heads_wait() {
        let lines = |n: usize| (0..n).map(|i| format!("x-{i}: 1\r\n")).collect::<String>();
        let at =
            |n: usize, max: usize| parse_request(format!("GET / HTTP/1.1\r\n{}\r\n", lines(n)).as_bytes(), 8192, max);
        assert_eq!(at(20, 20).unwrap().unwrap().headers.len(), 20);
        assert_eq!(at(21, 20).unwrap_err(), HeadError::TooLarge);
        assert_eq!(at(6, 5).unwrap_err(), HeadError::TooLarge);
        assert!(head("GET / HTTP/1.1\r\nHost: a\r\n").unwrap().is_none());
        assert_eq!(parse_request(&[b'a'; 100], 100, 100).unwrap_err(), HeadError::TooLarge);
    }

    #[test]
    fn keep_alive_follows_the_version_and_connection() {
        let ka = |text: &str| head(text).unwrap().unwrap().keep_alive;
        assert!(ka("GET / HTTP/1.1\r\n\r\n"));
        assert!(!ka("GET / HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n"));
        assert!(!ka("GET / HTTP/1.0\r\n\r\n"));
        assert!(ka("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    }

    /// The data of a whole chunked body, or `Malformed`.
    fn dechunk(body: &[u8]) -> Result<Vec<u8>, Malformed> {
        let mut read = BytesMut::from(body);
        let mut state = Chunked::default();
        let mut data = Vec::new();
        while let Some(d) = state.step(&mut read)? {
            data.extend_from_slice(&d);
        }
        assert_eq!(state.at, Chunk::Done, "incomplete: {:?}", String::from_utf8_lossy(body));
        Ok(data)
    }

    #[test]
    fn chunked_bodies_decode_strictly() {
        assert_eq!(dechunk(b"4\r\nWiki\r\n5;a=b\r\npedia\r\n0\r\nX-T: 1\r\n\r\n").unwrap(), b"Wikipedia");
        assert_eq!(dechunk(b"4 ;x\r\nWiki\r\n0\r\n\r\n").unwrap(), b"Wiki");
        assert_eq!(dechunk(b"0000000000000004\r\nWiki\r\n0\r\n\r\n").unwrap(), b"Wiki");
        for bad in [
            &b"10000000000000000\r\n"[..],
            b"ffffffffffffffffff\r\n",
            b" 4\r\nWiki\r\n0\r\n\r\n",
            b"4\nWiki\r\n0\r\n\r\n",
            b"4\r\nWikiX\r\n0\r\n\r\n",
            b"4;\0\r\nWiki\r\n0\r\n\r\n",
            b"-4\r\n",
            b"0x4\r\n",
            b"4\rX\r\n",
            b"0\r\nX: a\rb\r\n\r\n",
            b"0\r\nX: 1\r\n 2\r\n\r\n",
            b"0\r\nX : 1\r\n\r\n",
        ] {
            let mut read = BytesMut::from(bad);
            let mut state = Chunked::default();
            let result = loop {
                match state.step(&mut read) {
                    Ok(Some(_)) => continue,
                    other => break other,
                }
            };
            assert_eq!(result, Err(Malformed), "{:?}", String::from_utf8_lossy(bad));
        }
        // Extensions past 16 KiB over a body are abuse.
        let line = format!("1;{}\r\nx\r\n", "e".repeat(1000));
        let many = format!("{}0\r\n\r\n", line.repeat(20));
        assert_eq!(dechunk(many.as_bytes()), Err(Malformed));
        let long = format!("1;{}\r\n", "e".repeat(MAX_LINE + 1));
        assert_eq!(Chunked::default().step(&mut BytesMut::from(long.as_bytes())), Err(Malformed));
    }
}
