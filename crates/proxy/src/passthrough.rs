//! TLS passthrough: a TCP listener that routes each connection by the
//! server name (SNI) of its TLS ClientHello, without terminating TLS.
//!
//! [`client_hello`] reads the ClientHello from the bytes a client sent
//! first (pure and bounded: the handshake message may span several TLS
//! records, and the records several TCP segments); [`read_hello`] gathers
//! those bytes from the socket within a time limit, keeping them so that
//! they are sent to the chosen endpoint before the rest of the connection
//! is spliced. [`route`] chooses the cluster: an exact name, then a `*.`
//! wildcard covering one label, then the listener's default cluster (with
//! none, the connection is closed); a route that lists ALPN protocols
//! matches only a hello that offers one of them.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Most bytes read while looking for the ClientHello (records included).
pub const MAX_HELLO_BYTES: usize = 64 * 1024;

/// Why no server name could be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotHello {
    /// The bytes are not a TLS handshake record or not a ClientHello.
    #[error("not a TLS ClientHello")]
    NotTls,
    /// A ClientHello whose fields overrun their lengths.
    #[error("malformed TLS ClientHello")]
    Malformed,
    /// More than [`MAX_HELLO_BYTES`] without a complete ClientHello.
    #[error("TLS ClientHello over {MAX_HELLO_BYTES} bytes")]
    TooLong,
}

/// What a ClientHello says that routes read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hello {
    /// Its `host_name` server name, lower case, without a trailing dot.
    pub server_name: Option<String>,
    /// The ALPN protocols it offers, in its order.
    pub alpn: Vec<String>,
}

/// What the ClientHello at the start of `input` says: `Ok(None)` when more
/// bytes are needed, `Ok(Some(hello))` once it is complete.
pub fn client_hello(input: &[u8]) -> Result<Option<Hello>, NotHello> {
    // Gather the handshake layer: the fragments of consecutive handshake records.
    let mut message = Vec::new();
    let mut at = 0;
    loop {
        let Some(header) = input.get(at..at + 5) else { return incomplete(input) };
        if header[0] != 22 || header[1] != 3 {
            return Err(NotHello::NotTls);
        }
        let length = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if length == 0 || length > 16384 + 2048 {
            return Err(NotHello::NotTls);
        }
        let Some(fragment) = input.get(at + 5..at + 5 + length) else { return incomplete(input) };
        message.extend_from_slice(fragment);
        at += 5 + length;
        if message.len() >= 4 {
            if message[0] != 1 {
                return Err(NotHello::NotTls);
            }
            let body = usize::from(message[1]) << 16 | usize::from(message[2]) << 8 | usize::from(message[3]);
            if body + 4 > MAX_HELLO_BYTES {
                return Err(NotHello::TooLong);
            }
            if message.len() >= body + 4 {
                return hello_fields(&message[4..body + 4]).map(Some);
            }
        }
    }
}

fn incomplete(input: &[u8]) -> Result<Option<Hello>, NotHello> {
    if input.len() >= MAX_HELLO_BYTES {
        Err(NotHello::TooLong)
    } else {
        Ok(None)
    }
}

/// A cursor over a ClientHello's fields; running past the end is `Malformed`.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], NotHello> {
        if n > self.0.len() {
            return Err(NotHello::Malformed);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8_vec(&mut self) -> Result<&'a [u8], NotHello> {
        let n = self.take(1)?[0];
        self.take(usize::from(n))
    }

    fn u16_vec(&mut self) -> Result<&'a [u8], NotHello> {
        let n = self.take(2)?;
        self.take(usize::from(u16::from_be_bytes([n[0], n[1]])))
    }
}

/// The `host_name` of the `server_name` extension and the protocols of the
/// `application_layer_protocol_negotiation` one, from a ClientHello body.
fn hello_fields(body: &[u8]) -> Result<Hello, NotHello> {
    let mut r = Reader(body);
    r.take(2 + 32)?; // legacy_version, random
    r.u8_vec()?; // legacy_session_id
    r.u16_vec()?; // cipher_suites
    r.u8_vec()?; // legacy_compression_methods
    let mut hello = Hello::default();
    if r.0.is_empty() {
        return Ok(hello); // no extensions at all
    }
    let mut extensions = Reader(r.u16_vec()?);
    while !extensions.0.is_empty() {
        let kind = extensions.take(2)?;
        let data = extensions.u16_vec()?;
        match kind {
            [0, 0] if hello.server_name.is_none() => {
                let mut names = Reader(Reader(data).u16_vec()?);
                while !names.0.is_empty() && hello.server_name.is_none() {
                    let name_type = names.take(1)?[0];
                    let name = names.u16_vec()?;
                    if name_type == 0 {
                        hello.server_name = Some(host_name(name)?);
                    }
                }
            }
            [0, 16] => {
                let mut protocols = Reader(Reader(data).u16_vec()?);
                while !protocols.0.is_empty() {
                    let protocol = protocols.u8_vec()?;
                    if protocol.is_empty() {
                        return Err(NotHello::Malformed);
                    }
                    hello.alpn.push(String::from_utf8_lossy(protocol).into_owned());
                }
            }
            _ => {}
        }
    }
    Ok(hello)
}

/// A DNS name as sent: letters, digits, `-`, `_` and dots, lower-cased.
fn host_name(name: &[u8]) -> Result<String, NotHello> {
    let name = name.strip_suffix(b".").unwrap_or(name);
    let ok = !name.is_empty() && name.len() <= 253;
    if !ok || !name.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')) {
        return Err(NotHello::Malformed);
    }
    Ok(String::from_utf8_lossy(name).to_ascii_lowercase())
}

/// Why a passthrough connection was not routed.
#[derive(Debug, thiserror::Error)]
pub enum HelloError {
    /// Not a ClientHello, or a malformed one.
    #[error(transparent)]
    Bad(#[from] NotHello),
    /// No complete ClientHello within the time limit.
    #[error("no complete TLS ClientHello in time")]
    Timeout,
    /// The client closed or reset the connection.
    #[error("connection closed before its ClientHello")]
    Closed,
}

/// Read from `stream` until the ClientHello is complete (within `timeout`):
/// the bytes read, to be sent on first, and what the hello says.
pub async fn read_hello(stream: &mut TcpStream, timeout: Duration) -> Result<(Vec<u8>, Hello), HelloError> {
    let mut buf = Vec::with_capacity(2048);
    let reading = async {
        loop {
            let mut chunk = [0u8; 4096];
            let room = (MAX_HELLO_BYTES - buf.len()).min(chunk.len());
            let n = stream.read(&mut chunk[..room]).await.map_err(|_| HelloError::Closed)?;
            if n == 0 {
                return Err(HelloError::Closed);
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(hello) = client_hello(&buf)? {
                return Ok(hello);
            }
        }
    };
    let hello = tokio::time::timeout(timeout, reading).await.map_err(|_| HelloError::Timeout)??;
    Ok((buf, hello))
}

/// A passthrough listener's route: a server name (lower case, exact or
/// `*.suffix`) and, if any, the ALPN protocols one of which the client must offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SniRoute {
    /// The name matched.
    pub server_name: String,
    /// Protocols any one of which matches; empty, any hello.
    pub alpn: Vec<String>,
    /// Where the connection goes.
    pub cluster: usize,
}

/// The cluster for `hello` among `routes`: the first route with its exact
/// server name, then the first with a wildcard `*.example.com` (one label:
/// `a.example.com`, not `a.b.example.com` nor `example.com`), counting only
/// routes whose ALPN list is empty or names a protocol the hello offers;
/// then `default`. `None` refuses the connection.
pub fn route(routes: &[SniRoute], default: Option<usize>, hello: &Hello) -> Option<usize> {
    let Some(name) = hello.server_name.as_deref() else { return default };
    let offered = |r: &&SniRoute| r.alpn.is_empty() || r.alpn.iter().any(|p| hello.alpn.contains(p));
    let exact = routes.iter().filter(offered).find(|r| r.server_name == name);
    let wildcard = || {
        let (_, parent) = name.split_once('.')?;
        routes.iter().filter(offered).find(|r| r.server_name.strip_prefix("*.") == Some(parent))
    };
    exact.or_else(wildcard).map(|r| r.cluster).or(default)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello record (TLS 1.2 layout) with `extensions`.
    fn hello_with(extensions: &[u8]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
        body.extend_from_slice(&[1, 0]); // null compression
        body.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
        body.extend_from_slice(extensions);
        let mut msg = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
        msg.extend_from_slice(&body);
        let mut rec = vec![22, 3, 1, (msg.len() >> 8) as u8, msg.len() as u8];
        rec.extend_from_slice(&msg);
        rec
    }

    fn sni(name: &str) -> Vec<u8> {
        let n = name.len() as u16;
        let mut ext = vec![0, 0];
        ext.extend_from_slice(&(n + 5).to_be_bytes());
        ext.extend_from_slice(&(n + 3).to_be_bytes());
        ext.push(0);
        ext.extend_from_slice(&n.to_be_bytes());
        ext.extend_from_slice(name.as_bytes());
        ext
    }

    fn named(name: &str) -> Hello {
        Hello { server_name: Some(name.into()), alpn: Vec::new() }
    }

    fn alpn(protocols: &[&str]) -> Vec<u8> {
        let list: Vec<u8> = protocols.iter().flat_map(|p| [&[p.len() as u8], p.as_bytes()].concat()).collect();
        let mut ext = vec![0, 16];
        ext.extend_from_slice(&(list.len() as u16 + 2).to_be_bytes());
        ext.extend_from_slice(&(list.len() as u16).to_be_bytes());
        ext.extend_from_slice(&list);
        ext
    }

    #[test]
    fn alpn_protocols_are_read_before_or_after_the_name() {
        let want = Hello { server_name: Some("a.example.com".into()), alpn: vec!["h2".into(), "http/1.1".into()] };
        let (name, protocols) = (sni("a.example.com"), alpn(&["h2", "http/1.1"]));
        assert_eq!(client_hello(&hello_with(&[&name[..], &protocols].concat())), Ok(Some(want.clone())));
        assert_eq!(client_hello(&hello_with(&[&protocols[..], &name].concat())), Ok(Some(want)));
        let mut empty = alpn(&["h2", "x"]);
        let at = empty.len() - 2; // the length of "x"
        empty[at] = 0;
        empty.pop();
        empty[3] -= 1;
        empty[5] -= 1;
        assert_eq!(client_hello(&hello_with(&empty)), Err(NotHello::Malformed));
    }

    #[test]
    fn server_name_is_read_whole_and_from_every_prefix() {
        let grease = [0x0a, 0x0a, 0, 1, 0];
        let rec = hello_with(&[&grease[..], &sni("API.Example.com.")].concat());
        assert_eq!(client_hello(&rec), Ok(Some(named("api.example.com"))));
        for n in 0..rec.len() {
            assert_eq!(client_hello(&rec[..n]), Ok(None), "{n} bytes");
        }
        assert_eq!(client_hello(&hello_with(&grease)), Ok(Some(Hello::default())));
    }

    #[test]
    fn hellos_from_a_real_tls_stack() {
        // Python's ssl module (OpenSSL), from the fuzz corpus.
        let corpus =
            |name| std::fs::read(format!("{}/../../fuzz/corpus/client_hello/{name}", env!("CARGO_MANIFEST_DIR")));
        // Each file's first byte is the fuzz target's cut point, not TLS.
        let read = |name| client_hello(&corpus(name).unwrap()[1..]);
        assert_eq!(read("python-sni"), Ok(Some(named("a.example.com"))));
        assert_eq!(read("split-records"), Ok(Some(named("a.example.com"))));
        let hello = read("python-sni-alpn").unwrap().unwrap();
        assert_eq!(hello.server_name.as_deref(), Some("www.example.org"));
        assert!(!hello.alpn.is_empty(), "{hello:?}");
        assert_eq!(read("python-no-sni"), Ok(Some(Hello::default())));
        assert_eq!(read("truncated"), Ok(None));
    }

    #[test]
    fn a_hello_split_across_records_is_reassembled() {
        let rec = hello_with(&sni("b.example.com"));
        let msg = &rec[5..];
        let mut split = Vec::new();
        for part in msg.chunks(10) {
            split.extend_from_slice(&[22, 3, 1, 0, part.len() as u8]);
            split.extend_from_slice(part);
        }
        assert_eq!(client_hello(&split), Ok(Some(named("b.example.com"))));
    }

    #[test]
    fn bad_input_is_refused() {
        assert_eq!(client_hello(b"GET / HTTP/1.1\r\n"), Err(NotHello::NotTls));
        let mut not_hello = hello_with(&sni("a"));
        not_hello[5] = 2; // ServerHello
        assert_eq!(client_hello(&not_hello), Err(NotHello::NotTls));
        let mut overrun = hello_with(&sni("a.example"));
        let at = overrun.len() - 9 - 2; // the name's length
        overrun[at] = 0xff;
        assert_eq!(client_hello(&overrun), Err(NotHello::Malformed));
        assert_eq!(client_hello(&hello_with(&sni("bad name"))), Err(NotHello::Malformed));
        let huge = [22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff];
        assert_eq!(client_hello(&huge), Err(NotHello::TooLong));
    }

    #[test]
    fn routes_prefer_exact_then_one_label_wildcards_then_the_default() {
        let r = |name: &str, alpn: &[&str], cluster| SniRoute {
            server_name: name.into(),
            alpn: alpn.iter().map(|p| p.to_string()).collect(),
            cluster,
        };
        let routes = vec![r("*.example.com", &[], 1), r("a.example.com", &["h2", "h3"], 2), r("a.example.com", &[], 0)];
        let hello = |name: Option<&str>, alpn: &[&str]| Hello {
            server_name: name.map(Into::into),
            alpn: alpn.iter().map(|p| p.to_string()).collect(),
        };
        let pick = |name, alpn| route(&routes, Some(9), &hello(name, alpn));
        assert_eq!(pick(Some("a.example.com"), &[]), Some(0));
        assert_eq!(pick(Some("a.example.com"), &["http/1.1", "h2"]), Some(2));
        assert_eq!(pick(Some("a.example.com"), &["http/1.1"]), Some(0));
        assert_eq!(pick(Some("b.example.com"), &["h2"]), Some(1));
        assert_eq!(pick(Some("x.b.example.com"), &[]), Some(9));
        assert_eq!(pick(Some("example.com"), &[]), Some(9));
        assert_eq!(pick(None, &["h2"]), Some(9));
        assert_eq!(route(&routes, None, &hello(Some("other.org"), &[])), None);
        // Only ALPN routes for a name: a hello offering none of theirs falls through.
        let only_alpn = vec![r("a.example.com", &["acme-tls/1"], 3), r("*.example.com", &[], 1)];
        assert_eq!(route(&only_alpn, None, &hello(Some("a.example.com"), &["acme-tls/1"])), Some(3));
        assert_eq!(route(&only_alpn, None, &hello(Some("a.example.com"), &["h2"])), Some(1));
    }
}
