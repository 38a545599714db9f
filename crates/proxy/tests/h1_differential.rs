//! Differential test of the lean HTTP/1.1 server against hyper's: every
//! request of a corpus (the table built by [`corpus`], over 200 requests
//! well-formed and malformed, the request-smuggling variants among them) is
//! sent to two proxies that differ only in `http1_server`, each in front of
//! its own recording upstream. The two must give the client the same
//! statuses and the upstream the same requests (method, target, header
//! fields, decoded body) — except for the cases in [`DIFFERENCES`], where
//! the lean server is deliberately stricter: there it must refuse with 400
//! and forward nothing, and hyper must not have refused.
//!
//! Each case is followed on the same connection by a sentinel request
//! (`GET /sentinel` with `Connection: close`), so that a server that reads
//! a request boundary differently shows it: the sentinel would be swallowed
//! into a body, or a smuggled request would reach the upstream.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use fulcrum_proxy::config::Http1Server;
use fulcrum_proxy::h1::parse::{parse_request, Chunk, Chunked, Framing};
use fulcrum_proxy::{Config, Proxy};

const SENTINEL: &[u8] = b"GET /sentinel HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n";

/// What the upstream received: one line per request.
type Records = Arc<Mutex<Vec<String>>>;

/// An upstream that records each request it gets and answers 200 with its target.
fn recording_upstream() -> (SocketAddr, Records) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let records: Records = Arc::default();
    let shared = records.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let records = shared.clone();
            std::thread::spawn(move || serve_upstream(stream, records));
        }
    });
    (addr, records)
}

fn serve_upstream(mut stream: TcpStream, records: Records) {
    let mut read = BytesMut::new();
    let mut buf = [0u8; 16 * 1024];
    let mut more = |read: &mut BytesMut, stream: &mut TcpStream| match stream.read(&mut buf) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            read.extend_from_slice(&buf[..n]);
            true
        }
    };
    loop {
        let head = loop {
            match parse_request(&read, 1 << 20, 200) {
                Ok(Some(head)) => break head,
                Ok(None) if more(&mut read, &mut stream) => {}
                _ => return,
            }
        };
        let _ = read.split_to(head.len);
        let mut body = Vec::new();
        match head.framing {
            Framing::Length(n) => {
                while (read.len() as u64) < n {
                    if !more(&mut read, &mut stream) {
                        return;
                    }
                }
                body.extend_from_slice(&read.split_to(n as usize));
            }
            Framing::Chunked => {
                let mut chunked = Chunked::default();
                while chunked.at != Chunk::Done {
                    match chunked.step(&mut read) {
                        Ok(Some(data)) => body.extend_from_slice(&data),
                        Ok(None) if chunked.at == Chunk::Done => {}
                        Ok(None) if more(&mut read, &mut stream) => {}
                        _ => return,
                    }
                }
            }
        }
        let headers: Vec<String> =
            head.headers.iter().map(|(n, v)| format!("{n}: {}", String::from_utf8_lossy(v.as_bytes()))).collect();
        records.lock().unwrap().push(format!(
            "{} {} {:?} [{}] {:?}",
            head.method,
            head.uri,
            head.version,
            headers.join("; "),
            String::from_utf8_lossy(&body)
        ));
        // The body names the request, so that order can be checked.
        let target = head.uri.to_string();
        let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{target}", target.len());
        if stream.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// A proxy with `server` in front of a fresh recording upstream.
fn proxy(server: Http1Server) -> (Proxy, Records) {
    proxy_with(server, |_| {})
}

/// [`proxy`], its listener's limits changed by `limits`.
fn proxy_with(server: Http1Server, limits: impl FnOnce(&mut fulcrum_proxy::config::Limits)) -> (Proxy, Records) {
    let (upstream, records) = recording_upstream();
    let mut config = Config::quick(
        "127.0.0.1:0".parse().unwrap(),
        &[upstream.to_string()],
        fulcrum_balance::AlgorithmKind::ROUND_ROBIN,
    )
    .unwrap();
    config.workers = 1;
    config.listeners[0].http1_server = server;
    limits(&mut config.listeners[0].limits);
    (Proxy::start(config).unwrap(), records)
}

/// The statuses the client got for `request` followed by the sentinel.
fn statuses(addr: SocketAddr, request: &[u8]) -> Vec<u16> {
    let got = exchange(addr, request);
    got.windows(13)
        .filter(|w| {
            (w.starts_with(b"HTTP/1.1 ") || w.starts_with(b"HTTP/1.0 ")) && w[9..12].iter().all(u8::is_ascii_digit)
        })
        .map(|w| std::str::from_utf8(&w[9..12]).unwrap().parse().unwrap())
        .collect()
}

/// Everything the client got for `request` followed by the sentinel.
fn exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut wire = request.to_vec();
    wire.extend_from_slice(SENTINEL);
    let _ = stream.write_all(&wire);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    got
}

/// One server's answer to one case.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    statuses: Vec<u16>,
    forwarded: Vec<String>,
}

fn run(addr: SocketAddr, records: &Records, request: &[u8]) -> Outcome {
    let statuses = statuses(addr, request);
    // The upstream has what it was sent before the proxy answered.
    let forwarded = std::mem::take(&mut *records.lock().unwrap());
    Outcome { statuses, forwarded }
}

/// Cases where the lean server refuses (400, nothing forwarded) what
/// hyper's lets through, each with its reason.
const DIFFERENCES: &[(&str, &str)] = &[
    // Transfer-Encoding with Content-Length: hyper lets the transfer coding
    // win and closes the connection after the response (RFC 9112 §6.1
    // allows that); the lean server refuses the pair, the signature of a
    // smuggling attempt, so no hop can read another boundary than it did.
    ("cl.te", TE_AND_CL),
    ("te.cl", TE_AND_CL),
    ("cl.te zero", TE_AND_CL),
    ("te.cl matching", TE_AND_CL),
    (r#"te+cl "Transfer-Encoding: x\r\nTransfer-Encoding: chunked""#, TE_AND_CL),
    (r#"te+cl "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked""#, TE_AND_CL),
    (r#"te+cl "Transfer-Encoding: chunked, chunked""#, TE_AND_CL),
    (r#"te+cl "Transfer-Encoding: gzip, chunked""#, TE_AND_CL),
    (r#"te+cl "Transfer-Encoding: identity, chunked""#, TE_AND_CL),
    (r#"te+cl "Transfer-Encoding: ,chunked""#, TE_AND_CL),
    (r#"te+cl "Transfer-Encoding: \tchunked""#, TE_AND_CL),
    // hyper judges each Transfer-Encoding line by its last coding alone.
    (
        r#"te "Transfer-Encoding: x\r\nTransfer-Encoding: chunked""#,
        "codings over several lines form one list (RFC 9110 §5.3): x, chunked has a coding the proxy cannot undo",
    ),
    (
        r#"te "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked""#,
        "chunked applied twice, which RFC 9112 §6.1 forbids",
    ),
    (r#"te "Transfer-Encoding: chunked, chunked""#, "chunked applied twice, which RFC 9112 §6.1 forbids"),
    (
        r#"te "Transfer-Encoding: gzip, chunked""#,
        "hyper removes the chunked coding and forwards the gzip-coded bytes without saying they are coded: \
         the coding is lost; the lean server only accepts chunked alone",
    ),
    (r#"te "Transfer-Encoding: identity, chunked""#, "identity is no transfer coding (RFC 9112 dropped it)"),
    (r#"te "Transfer-Encoding: ,chunked""#, "an empty list element in a framing field is refused, not guessed around"),
    // Request-target forms (RFC 9112 §3.2).
    ("target asterisk with GET", "the asterisk form is for OPTIONS only (§3.2.4); hyper routes it and answers 404"),
    ("target authority with GET", "the authority form is for CONNECT only (§3.2.3); hyper answers 404"),
    ("target origin with CONNECT", "CONNECT takes the authority form only (§3.2.3); hyper tries the upstream, 502"),
    // Chunked framing.
    (
        "chunk end bare LF",
        "every line of the chunked coding ends in CRLF (§7.1); hyper takes a bare LF after the last chunk",
    ),
    ("chunk extension NUL", "an extension is tokens and quoted strings (§7.1.1); hyper passes a NUL through"),
    (
        "chunk extension over a line",
        "a chunk-size line is at most 4 KiB with its extensions; hyper only limits a body's extensions to 16 KiB",
    ),
];

const TE_AND_CL: &str = "Transfer-Encoding with Content-Length is refused (see h1::parse)";

/// A request with `fields` (CRLF-terminated lines) and `body`.
fn req(method: &str, target: &str, fields: &str, body: &str) -> Vec<u8> {
    format!("{method} {target} HTTP/1.1\r\nHost: app.test\r\n{fields}\r\n{body}").into_bytes()
}

/// The corpus: (name, bytes). Names are unique and say what the case tests.
fn corpus() -> Vec<(String, Vec<u8>)> {
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |name: String, bytes: Vec<u8>| cases.push((name, bytes));

    // Well-formed requests: methods, targets, fields.
    for method in ["GET", "HEAD", "DELETE", "OPTIONS", "TRACE"] {
        for target in ["/", "/a/b?c=d&e", "/%20x", "/very/long/".repeat(20).as_str()] {
            add(format!("ok {method} {}", &target[..target.len().min(16)]), req(method, target, "", ""));
        }
    }
    for fields in [
        "X-A: 1\r\n",
        "X-A: 1\r\nX-A: 2\r\n",
        "X-A: 1, 2\r\n",
        "X-Empty:\r\n",
        "X-Tab:\tv\r\n",
        "X-Obs-Text: caf\u{e9}\r\n",
        "Accept: */*\r\nUser-Agent: t\r\nCookie: a=1; b=2\r\n",
        "Connection: keep-alive\r\n",
        "Connection: x-secret\r\nX-Secret: 1\r\n",
        "Keep-Alive: timeout=5\r\n",
        "X-Forwarded-For: 10.0.0.1\r\n",
        "Upgrade: websocket\r\n",
        "TE: trailers\r\n",
        "Proxy-Connection: keep-alive\r\n",
        "x-lower: 1\r\nX-UPPER: 2\r\n",
        "X-Trailing-Space: v  \r\n",
        "X-Leading-Space:    v\r\n",
    ] {
        add(format!("ok fields {fields:?}"), req("GET", "/", fields, ""));
    }
    add("ok absolute form".into(), req("GET", "http://app.test/x", "", ""));
    add("ok absolute form with port".into(), req("GET", "http://app.test:8080/x?y", "", ""));
    add("ok OPTIONS *".into(), req("OPTIONS", "*", "", ""));
    add("ok HTTP/1.0 without Host".into(), b"GET / HTTP/1.0\r\n\r\n".to_vec());
    add("ok HTTP/1.0 keep-alive".into(), b"GET / HTTP/1.0\r\nConnection: keep-alive\r\nHost: a\r\n\r\n".to_vec());
    add("ok leading empty line".into(), [&b"\r\n"[..], &req("GET", "/", "", "")].concat());
    add("ok bare LF line endings".into(), b"GET / HTTP/1.1\nHost: app.test\n\n".to_vec());
    add("ok mixed line endings".into(), b"GET / HTTP/1.1\r\nHost: app.test\n\r\n".to_vec());

    // Bodies with Content-Length.
    for n in [0usize, 1, 10, 100, 5000] {
        let body = "b".repeat(n);
        add(format!("ok POST cl {n}"), req("POST", "/", &format!("Content-Length: {n}\r\n"), &body));
        add(format!("ok PUT cl {n}"), req("PUT", "/p", &format!("Content-Length: {n}\r\n"), &body));
    }
    add("ok cl repeated identical".into(), req("POST", "/", "Content-Length: 3\r\nContent-Length: 3\r\n", "abc"));
    add("ok cl leading zeros".into(), req("POST", "/", "Content-Length: 003\r\n", "abc"));
    add("ok expect 100-continue".into(), req("POST", "/", "Expect: 100-continue\r\nContent-Length: 3\r\n", "abc"));

    // Chunked bodies.
    for (name, body) in [
        ("one chunk", "3\r\nabc\r\n0\r\n\r\n"),
        ("two chunks", "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"),
        ("upper hex", "A\r\n0123456789\r\n0\r\n\r\n"),
        ("lower hex", "a\r\n0123456789\r\n0\r\n\r\n"),
        ("leading zeros", "0003\r\nabc\r\n0\r\n\r\n"),
        ("extension", "3;name=value\r\nabc\r\n0\r\n\r\n"),
        ("quoted extension", "3;name=\"v;x\"\r\nabc\r\n0\r\n\r\n"),
        ("bare extension", "3;flag\r\nabc\r\n0;last\r\n\r\n"),
        ("space before extension", "3 ;x=1\r\nabc\r\n0\r\n\r\n"),
        ("trailer", "3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n"),
        ("two trailers", "3\r\nabc\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n"),
        ("empty", "0\r\n\r\n"),
    ] {
        add(format!("ok chunked {name}"), req("POST", "/", "Transfer-Encoding: chunked\r\n", body));
    }
    add("ok chunked case".into(), req("POST", "/", "Transfer-Encoding: CHUNKED\r\n", "3\r\nabc\r\n0\r\n\r\n"));
    add("ok chunked ows".into(), req("POST", "/", "Transfer-Encoding:   chunked  \r\n", "3\r\nabc\r\n0\r\n\r\n"));

    // Pipelines.
    let get = req("GET", "/1", "", "");
    let post = req("POST", "/2", "Content-Length: 3\r\n", "abc");
    let chunked = req("POST", "/3", "Transfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\r\n\r\n");
    add("ok pipeline get get".into(), [&get[..], &get].concat());
    add("ok pipeline post get".into(), [&post[..], &get].concat());
    add("ok pipeline chunked get".into(), [&chunked[..], &get].concat());
    add("ok pipeline three".into(), [&get[..], &post, &chunked].concat());
    add("ok pipeline head get".into(), [&req("HEAD", "/", "", "")[..], &get].concat());

    // Request smuggling: CL.TE and TE.CL.
    let smuggled = "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: app.test\r\n\r\n";
    add(
        "cl.te".into(),
        req("POST", "/", &format!("Content-Length: {}\r\nTransfer-Encoding: chunked\r\n", smuggled.len()), smuggled),
    );
    add(
        "te.cl".into(),
        req(
            "POST",
            "/",
            "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",
            "5c\r\nGPOST / HTTP/1.1\r\n\r\n0\r\n\r\n",
        ),
    );
    add("cl.te zero".into(), req("POST", "/", "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"));
    add(
        "te.cl matching".into(),
        req("POST", "/", "Transfer-Encoding: chunked\r\nContent-Length: 10\r\n", "3\r\nabc\r\n0\r\n\r\n"),
    );

    // TE obfuscations (TE.TE).
    for te in [
        "Transfer-Encoding: xchunked",
        "Transfer-Encoding: chunkedx",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: x",
        "Transfer-Encoding: x\r\nTransfer-Encoding: chunked",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
        "Transfer-Encoding: chunked, chunked",
        "Transfer-Encoding: gzip, chunked",
        "Transfer-Encoding: chunked, gzip",
        "Transfer-Encoding: identity",
        "Transfer-Encoding: identity, chunked",
        "Transfer-Encoding: chunked,",
        "Transfer-Encoding: ,chunked",
        "Transfer-Encoding: \"chunked\"",
        "Transfer-Encoding: chunk",
        "Transfer-Encoding:",
        "Transfer-Encoding: \tchunked",
        "Transfer-Encoding : chunked",
        "Transfer-Encoding\t: chunked",
        " Transfer-Encoding: chunked",
        "X: 1\r\n Transfer-Encoding: chunked",
        "Transfer-Encoding:\r\n chunked",
        "Transfer-Encoding: chunked\r\n ,gzip",
        "Transfer_Encoding: chunked",
        "Transfer-Encoding\0: chunked",
        "Transfer-Encoding: ch\0unked",
        "Transfer-Encoding: chunked\rX: 1",
        "Transfer-Encoding: ch\u{fc}nked",
    ] {
        let body = "3\r\nabc\r\n0\r\n\r\n";
        add(format!("te {te:?}"), req("POST", "/", &format!("{te}\r\n"), body));
        add(format!("te+cl {te:?}"), req("POST", "/", &format!("{te}\r\nContent-Length: {}\r\n", body.len()), body));
    }
    add(
        "te in HTTP/1.0".into(),
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec(),
    );

    // Content-Length variants.
    for cl in [
        "Content-Length: 3\r\nContent-Length: 4",
        "Content-Length: 4\r\nContent-Length: 3",
        "Content-Length: 3, 3",
        "Content-Length: 3,4",
        "Content-Length: +3",
        "Content-Length: -3",
        "Content-Length: 0x3",
        "Content-Length: 3 3",
        "Content-Length: 3a",
        "Content-Length: ",
        "Content-Length: 99999999999999999999999",
        "Content-Length: 18446744073709551616",
        "Content-Length : 3",
        "Content-Length:\r\n 3",
        "Content-Length: 3\0",
        "Content-Length: \u{663}",
        " Content-Length: 3",
        "Content_Length: 3",
    ] {
        add(format!("cl {cl:?}"), req("POST", "/", &format!("{cl}\r\n"), "abc"));
    }

    // Line-ending and octet tricks.
    for (name, bytes) in [
        ("bare CR in request line", &b"GET /\r HTTP/1.1\r\nHost: app.test\r\n\r\n"[..]),
        ("bare CR ending the request line", b"GET / HTTP/1.1\rHost: app.test\r\n\r\n"),
        ("bare CR in value", b"GET / HTTP/1.1\r\nHost: app.test\r\nX: a\rb\r\n\r\n"),
        ("CR CR LF", b"GET / HTTP/1.1\r\r\nHost: app.test\r\n\r\n"),
        ("NUL in value", b"GET / HTTP/1.1\r\nHost: app.test\r\nX: a\0b\r\n\r\n"),
        ("NUL in name", b"GET / HTTP/1.1\r\nHost: app.test\r\nX\0: a\r\n\r\n"),
        ("NUL in target", b"GET /\0 HTTP/1.1\r\nHost: app.test\r\n\r\n"),
        ("DEL in value", b"GET / HTTP/1.1\r\nHost: app.test\r\nX: a\x7fb\r\n\r\n"),
        ("control in value", b"GET / HTTP/1.1\r\nHost: app.test\r\nX: a\x01b\r\n\r\n"),
        ("ESC in value", b"GET / HTTP/1.1\r\nHost: app.test\r\nX: a\x1bb\r\n\r\n"),
        ("space in name", b"GET / HTTP/1.1\r\nHost: app.test\r\nX Y: 1\r\n\r\n"),
        ("empty name", b"GET / HTTP/1.1\r\nHost: app.test\r\n: 1\r\n\r\n"),
        ("no colon", b"GET / HTTP/1.1\r\nHost: app.test\r\nNoColon\r\n\r\n"),
        ("obs-fold", b"GET / HTTP/1.1\r\nHost: app.test\r\nX: a\r\n b\r\n\r\n"),
        ("obs-fold tab", b"GET / HTTP/1.1\r\nHost: app.test\r\nX: a\r\n\tb\r\n\r\n"),
        ("space before first field", b"GET / HTTP/1.1\r\n Host: app.test\r\n\r\n"),
        ("whitespace before colon", b"GET / HTTP/1.1\r\nHost : app.test\r\n\r\n"),
        ("tab before colon", b"GET / HTTP/1.1\r\nHost\t: app.test\r\n\r\n"),
        ("8-bit in name", b"GET / HTTP/1.1\r\nHost: app.test\r\nX\xe9: 1\r\n\r\n"),
        ("8-bit in target", b"GET /\xe9 HTTP/1.1\r\nHost: app.test\r\n\r\n"),
        ("space in target", b"GET /a b HTTP/1.1\r\nHost: app.test\r\n\r\n"),
        ("tab separators", b"GET\t/\tHTTP/1.1\r\nHost: app.test\r\n\r\n"),
        ("two spaces", b"GET  / HTTP/1.1\r\nHost: app.test\r\n\r\n"),
        ("trailing space after version", b"GET / HTTP/1.1 \r\nHost: app.test\r\n\r\n"),
        ("lowercase version", b"GET / http/1.1\r\nHost: app.test\r\n\r\n"),
        ("HTTP/1.2", b"GET / HTTP/1.2\r\nHost: app.test\r\n\r\n"),
        ("HTTP/2.0 without preface", b"GET / HTTP/2.0\r\nHost: app.test\r\n\r\n"),
        ("HTTP/0.9", b"GET /\r\n\r\n"),
        ("HTTP/1.10", b"GET / HTTP/1.10\r\nHost: app.test\r\n\r\n"),
        ("no target", b"GET HTTP/1.1\r\nHost: app.test\r\n\r\n"),
        ("garbage", b"GARBAGE\r\n\r\n"),
        ("binary", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n"),
        ("lowercase method", b"get / HTTP/1.1\r\nHost: app.test\r\n\r\n"),
        ("odd method token", b"M-SEARCH / HTTP/1.1\r\nHost: app.test\r\n\r\n"),
        ("method with slash", b"GE/T / HTTP/1.1\r\nHost: app.test\r\n\r\n"),
        ("LF CR LF end", b"GET / HTTP/1.1\r\nHost: app.test\n\r\n"),
        ("only LF", b"\n\nGET / HTTP/1.1\nHost: app.test\n\n"),
    ] {
        add(format!("octets {name}"), bytes.to_vec());
    }

    // Host rules.
    add("host missing".into(), b"GET / HTTP/1.1\r\n\r\n".to_vec());
    add("host twice".into(), b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".to_vec());
    add("host empty".into(), b"GET / HTTP/1.1\r\nHost:\r\n\r\n".to_vec());
    add("host absolute mismatch".into(), b"GET http://b.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n".to_vec());
    add("host absolute without Host".into(), b"GET http://b.test/ HTTP/1.1\r\n\r\n".to_vec());
    add("host with port".into(), b"GET / HTTP/1.1\r\nHost: app.test:80\r\n\r\n".to_vec());
    add("host ipv6".into(), b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n".to_vec());

    // Request-target forms.
    for (name, method, target) in [
        ("asterisk with GET", "GET", "*"),
        ("authority with GET", "GET", "app.test:80"),
        ("authority with CONNECT", "CONNECT", "app.test:443"),
        ("origin with CONNECT", "CONNECT", "/"),
        ("relative", "GET", "a/b"),
        ("double slash", "GET", "//a/b"),
        ("https absolute", "GET", "https://app.test/"),
        ("absolute without path", "GET", "http://app.test"),
        ("fragment", "GET", "/a#frag"),
        ("ftp scheme", "GET", "ftp://app.test/"),
        ("query only", "GET", "/?"),
        ("percent bad", "GET", "/%zz"),
        ("brackets", "GET", "/[x]"),
        ("braces", "GET", "/{x}"),
        ("backslash", "GET", "/a\\b"),
        ("quote", "GET", "/\"x\""),
    ] {
        add(format!("target {name}"), req(method, target, "", ""));
    }

    // Chunked framing abuse.
    for (name, body) in [
        ("size overflow", "10000000000000000\r\nx\r\n0\r\n\r\n"),
        ("size huge", "ffffffffffffffffffff\r\nx\r\n0\r\n\r\n"),
        ("size negative", "-3\r\nabc\r\n0\r\n\r\n"),
        ("size 0x", "0x3\r\nabc\r\n0\r\n\r\n"),
        ("size leading space", " 3\r\nabc\r\n0\r\n\r\n"),
        ("size missing", "\r\nabc\r\n0\r\n\r\n"),
        ("size not hex", "g\r\nabc\r\n0\r\n\r\n"),
        ("size bare LF", "3\nabc\r\n0\r\n\r\n"),
        ("size bare CR", "3\rabc\r\n0\r\n\r\n"),
        ("data too long", "3\r\nabcd\r\n0\r\n\r\n"),
        ("data too short", "3\r\nab\r\n0\r\n\r\n"),
        ("data bare LF end", "3\r\nabc\n0\r\n\r\n"),
        ("last chunk bare LF", "3\r\nabc\r\n0\n\r\n"),
        ("end bare LF", "3\r\nabc\r\n0\r\n\n"),
        ("extension NUL", "3;a\0\r\nabc\r\n0\r\n\r\n"),
        ("extension CR", "3;a\rb\r\nabc\r\n0\r\n\r\n"),
        ("extension without semicolon", "3 x\r\nabc\r\n0\r\n\r\n"),
        ("trailer NUL", "3\r\nabc\r\n0\r\nX: \0\r\n\r\n"),
        ("trailer obs-fold", "3\r\nabc\r\n0\r\nX: 1\r\n 2\r\n\r\n"),
    ] {
        add(format!("chunk {name}"), req("POST", "/", "Transfer-Encoding: chunked\r\n", body));
    }
    let long_ext = format!("3;{}\r\nabc\r\n0\r\n\r\n", "e".repeat(5000));
    add("chunk extension over a line".into(), req("POST", "/", "Transfer-Encoding: chunked\r\n", &long_ext));
    let many_ext = format!("{}0\r\n\r\n", format!("1;{}\r\nx\r\n", "e".repeat(3000)).repeat(8));
    add("chunk extensions over a body".into(), req("POST", "/", "Transfer-Encoding: chunked\r\n", &many_ext));
    let big_trailer = format!("0\r\n{}\r\n", format!("X-T: {}\r\n", "t".repeat(1000)).repeat(20));
    add("chunk trailers over the limit".into(), req("POST", "/", "Transfer-Encoding: chunked\r\n", &big_trailer));

    // Limits: 431 past 100 fields or 64 KiB.
    let fields = |n: usize| (0..n).map(|i| format!("X-{i}: 1\r\n")).collect::<String>();
    add("limit 100 fields".into(), req("GET", "/", &fields(99), ""));
    add("limit 101 fields".into(), req("GET", "/", &fields(101), ""));
    add("limit huge field".into(), req("GET", "/", &format!("X-Big: {}\r\n", "v".repeat(70_000)), ""));
    add("limit huge target".into(), req("GET", &format!("/{}", "p".repeat(70_000)), "", ""));
    cases
}

#[test]
fn the_lean_server_and_hyper_agree_on_the_corpus() {
    let (lean, lean_records) = proxy(Http1Server::Lean);
    let (hyper, hyper_records) = proxy(Http1Server::Hyper);
    let cases = corpus();
    assert!(cases.len() >= 200, "{} cases", cases.len());
    let mut disagreements = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (name, bytes) in &cases {
        assert!(seen.insert(name.clone()), "two cases named {name}");
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| run(lean.listen_addrs()[0], &lean_records, bytes));
            let b = s.spawn(|| run(hyper.listen_addrs()[0], &hyper_records, bytes));
            (a.join().unwrap(), b.join().unwrap())
        });
        let deliberate = DIFFERENCES.iter().any(|(n, _)| n == name);
        if deliberate {
            let refused = a.statuses == [400] && a.forwarded.is_empty();
            if !refused || b.statuses.first() == Some(&400) {
                disagreements.push(format!("{name}: listed as a difference, but lean {a:?}, hyper {b:?}"));
            }
        } else if a != b {
            disagreements.push(format!("{name}:\n  lean  {a:?}\n  hyper {b:?}"));
        }
    }
    for (name, _) in DIFFERENCES {
        assert!(seen.contains(*name), "difference {name} names no case");
    }
    println!("{} cases, {} deliberate differences", cases.len(), DIFFERENCES.len());
    assert!(disagreements.is_empty(), "{} disagreements:\n{}", disagreements.len(), disagreements.join("\n"));
    lean.shutdown(Duration::from_secs(1));
    hyper.shutdown(Duration::from_secs(1));
}

#[test]
fn pipelined_requests_are_answered_in_order_on_both_servers() {
    for server in [Http1Server::Lean, Http1Server::Hyper] {
        let (proxy, _records) = proxy(server);
        let post = req("POST", "/2", "Transfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\r\n\r\n");
        let pipeline = [&req("GET", "/1", "", "")[..], &post, &req("HEAD", "/3", "", ""), &req("GET", "/4", "", "")];
        let got = String::from_utf8(exchange(proxy.listen_addrs()[0], &pipeline.concat())).unwrap();
        let order: Vec<usize> = ["\r\n\r\n/1", "\r\n\r\n/2", "\r\n\r\n/4", "\r\n\r\n/sentinel"]
            .iter()
            .map(|body| got.find(body).unwrap_or_else(|| panic!("{server:?}: no {body:?} in {got:?}")))
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{server:?}: {got:?}");
        // The HEAD answer has its length but no body.
        assert_eq!(got.matches("HTTP/1.1 200 OK").count(), 5, "{server:?}: {got:?}");
        assert_eq!(got.matches("\r\n\r\nHTTP/1.1").count(), 1, "{server:?}: {got:?}");
        assert_eq!(got.matches("date: ").count(), 5, "{server:?}: {got:?}");
        proxy.shutdown(Duration::from_secs(1));
    }
}

/// Whether the proxy closes `stream` within 10 s (the limits under test are
/// far shorter; the margin is for a loaded machine).
fn closed_within_10s(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn idle_and_header_read_timeouts_hold_on_both_servers() {
    for server in [Http1Server::Lean, Http1Server::Hyper] {
        let (proxy, _records) = proxy_with(server, |limits| {
            limits.idle_timeout = Duration::from_millis(300);
            limits.header_read_timeout = Duration::from_millis(300);
        });
        let addr = proxy.listen_addrs()[0];
        // Idle after an answered request.
        let mut idle = TcpStream::connect(addr).unwrap();
        idle.write_all(&req("GET", "/", "", "")).unwrap();
        assert!(closed_within_10s(&mut idle), "{server:?}: an idle connection stayed open");
        // Half a head.
        let mut slow = TcpStream::connect(addr).unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nHost: app.test\r\nX-Slow: ").unwrap();
        assert!(closed_within_10s(&mut slow), "{server:?}: a half head stayed open");
        proxy.shutdown(Duration::from_secs(1));
    }
}

#[test]
fn connections_past_max_connections_are_closed_on_both_servers() {
    for server in [Http1Server::Lean, Http1Server::Hyper] {
        let (proxy, _records) = proxy_with(server, |limits| limits.max_connections = 2);
        let addr = proxy.listen_addrs()[0];
        // A third connection is closed at once, before a request; once one
        // of the two closes, a new one is served.
        let held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(100));
        let mut third = TcpStream::connect(addr).unwrap();
        assert!(closed_within_10s(&mut third), "{server:?}: a connection past the limit was kept");
        drop(held);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(statuses(addr, b""), [200], "{server:?}");
        proxy.shutdown(Duration::from_secs(1));
    }
}
