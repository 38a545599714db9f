//! The PROXY protocol end to end against the real binary: headers accepted
//! from trusted sources and their client address used in forwarding headers
//! and the access log, refusals (untrusted, missing, malformed) logged and
//! counted, and headers sent to a TCP cluster's endpoints and to HTTP/2
//! upstreams. With HAProxy (Debian's; `scripts/test` installs it):
//! HAProxy's `send-proxy-v2` to Fulcrum and Fulcrum's header to HAProxy's
//! `accept-proxy`, over HTTP/1.1 and HTTP/2.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{get, Fulcrum, KillOnDrop};

/// An HTTP upstream that answers every request with its `X-Forwarded-For`.
fn xff_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut writer = conn.try_clone().unwrap();
                let mut reader = BufReader::new(conn);
                loop {
                    let mut xff = String::new();
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("x-forwarded-for:") {
                            xff = v.trim().to_string();
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{xff}", xff.len());
                    if writer.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A TCP upstream that sends back the first two lines of each connection.
fn line_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut writer = conn.try_clone().unwrap();
                let mut lines = BufReader::new(conn);
                let mut two = String::new();
                for _ in 0..2 {
                    let _ = lines.read_line(&mut two);
                }
                let _ = writer.write_all(two.as_bytes());
            });
        }
    });
    addr
}

/// A v2 header for a TCP/IPv4 client `src` connecting to `dst`.
fn v2(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let (SocketAddr::V4(s), SocketAddr::V4(d)) = (src, dst) else { panic!("IPv4 only") };
    let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    h.extend_from_slice(&s.ip().octets());
    h.extend_from_slice(&d.ip().octets());
    h.extend_from_slice(&s.port().to_be_bytes());
    h.extend_from_slice(&d.port().to_be_bytes());
    h
}

/// Send `raw` and read until the connection closes (at most 10 s).
fn exchange(addr: SocketAddr, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn metric(f: &Fulcrum, line: &str) -> u64 {
    let metrics = String::from_utf8(get(f.admin.unwrap(), "admin", "/metrics", "").body).unwrap();
    let found = metrics.lines().find_map(|l| l.strip_prefix(line)).unwrap_or_else(|| panic!("{line} in {metrics}"));
    found.trim().parse().unwrap()
}

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n";

#[test]
fn headers_from_trusted_sources_name_the_client_and_others_are_refused() {
    let dir = common::temp_dir("proxy-protocol-log");
    let log = dir.join("access.log");
    let config = format!(
        "workers = 1\nadmin = \"127.0.0.1:0\"\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [{{ cluster = \"echo\" }}]\n\
         proxy_protocol = {{ trusted = [\"127.0.0.1\"] }}\naccess_log = {{ path = \"{}\", format = \"$client $status\" }}\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [{{ cluster = \"echo\" }}]\n\
         proxy_protocol = {{ trusted = [\"10.0.0.0/8\"] }}\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nprotocol = \"tcp\"\ncluster = \"line\"\n\
         proxy_protocol = {{ trusted = [\"127.0.0.0/8\"], required = false }}\n\n\
         [[cluster]]\nname = \"echo\"\nendpoints = [\"{}\"]\n\n\
         [[cluster]]\nname = \"line\"\nendpoints = [\"{}\"]\nproxy_protocol = \"v1\"\n",
        log.display(),
        xff_upstream(),
        line_upstream()
    );
    let f = Fulcrum::serve("proxy-protocol", &config);
    let (http, untrusted, tcp) = (f.listen[0], f.listen[1], f.listen[2]);

    // v2 and v1 from a trusted source: the carried client is X-Forwarded-For.
    let client: SocketAddr = "203.0.113.7:4242".parse().unwrap();
    let reply = exchange(http, &[v2(client, http), REQUEST.to_vec()].concat());
    assert!(reply.starts_with("HTTP/1.1 200") && reply.ends_with("\r\n\r\n203.0.113.7"), "{reply}");
    let v1 = format!("PROXY TCP4 198.51.100.1 {} 5555 {}\r\n", http.ip(), http.port());
    let reply = exchange(http, &[v1.as_bytes(), REQUEST].concat());
    assert!(reply.ends_with("\r\n\r\n198.51.100.1"), "{reply}");

    // Refusals: closed without an answer, logged, counted by reason.
    assert_eq!(exchange(http, REQUEST), "");
    f.wait_for_log(&format!("listener {http}: refused a connection from 127.0.0.1:"));
    f.wait_for_log("no PROXY protocol header");
    assert_eq!(exchange(http, b"PROXY TCP4 203.0.113.7 nonsense\r\nGET / HTTP/1.1\r\n\r\n"), "");
    f.wait_for_log("malformed PROXY v1 line");
    assert_eq!(exchange(untrusted, &[v2(client, untrusted), REQUEST.to_vec()].concat()), "");
    f.wait_for_log("source not in proxy_protocol.trusted");
    for (reason, n) in [("missing", 1), ("malformed", 1), ("untrusted", 1), ("timeout", 0)] {
        assert_eq!(metric(&f, &format!("fulcrum_proxy_protocol_refused_total{{reason=\"{reason}\"}}")), n, "{reason}");
    }

    // A TCP cluster's endpoints get a v1 header naming the client: the
    // carried one, or the socket's when the optional header is absent.
    let reply = exchange(tcp, &[v2(client, tcp), b"hello\n".to_vec()].concat());
    assert_eq!(reply, format!("PROXY TCP4 203.0.113.7 {} 4242 {}\r\nhello\n", tcp.ip(), tcp.port()));
    let mut s = TcpStream::connect(tcp).unwrap();
    let local = s.local_addr().unwrap();
    s.write_all(b"hi\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert_eq!(reply, format!("PROXY TCP4 127.0.0.1 127.0.0.1 {} {}\r\nhi\n", local.port(), tcp.port()));

    assert!(f.terminate().success());
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("203.0.113.7:4242 200") && logged.contains("198.51.100.1:5555 200"), "{logged}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A TCP connection to `to` from `from` (another loopback address).
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&format!("{from}:0").parse::<SocketAddr>().unwrap().into()).unwrap();
    socket.connect(&to.into()).unwrap();
    let s: TcpStream = socket.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn wait_listening(addr: SocketAddr) {
    for _ in 0..500 {
        if TcpStream::connect(addr).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("nothing listens on {addr}");
}

/// An h2c upstream that reads a PROXY protocol header first on each
/// connection and answers every request with the client it names and the
/// connection's number (from 1).
fn h2_header_upstream() -> SocketAddr {
    use fulcrum_proxy::proxy_protocol::{read, Header};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            for n in 1.. {
                let Ok((mut conn, _)) = listener.accept().await else { return };
                tokio::spawn(async move {
                    let client = match read(&mut conn).await {
                        Ok(Some(Header::Proxied(a))) => a.source.to_string(),
                        other => format!("{other:?}"),
                    };
                    let answer = hyper::service::service_fn(move |_req| {
                        let body = http_body_util::Full::new(bytes::Bytes::from(format!("{client} #{n}")));
                        async move { Ok::<_, std::convert::Infallible>(hyper::Response::new(body)) }
                    });
                    let io = hyper_util::rt::TokioIo::new(conn);
                    let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(io, answer)
                        .await;
                });
            }
        });
    });
    addr
}

/// One keep-alive HTTP/1.1 exchange on `s`: the response's body.
fn keep_alive_get(s: &mut TcpStream) -> String {
    s.write_all(b"GET / HTTP/1.1\r\nHost: app\r\n\r\n").unwrap();
    let mut reader = BufReader::new(s);
    let (mut status, mut length) = (String::new(), 0);
    reader.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}

#[test]
fn http2_upstreams_get_the_header_on_connections_kept_per_client() {
    let config = format!(
        "workers = 1\nadmin = \"127.0.0.1:0\"\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [{{ cluster = \"h2\" }}]\n\n\
         [[cluster]]\nname = \"h2\"\nendpoints = [\"{}\"]\nupstream = \"http2\"\nproxy_protocol = \"v2\"\n",
        h2_header_upstream()
    );
    let f = Fulcrum::serve("proxy-protocol-h2", &config);
    let (mut a, mut b) = (connect_from("127.0.0.2", f.listen[0]), connect_from("127.0.0.3", f.listen[0]));
    let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    // Each client is named on an HTTP/2 connection of its own, which its
    // later requests share; no request goes out under another's header.
    let first = keep_alive_get(&mut a);
    let other = keep_alive_get(&mut b);
    let (a_conn, b_conn) = (first.strip_prefix(&format!("{a_addr} #")), other.strip_prefix(&format!("{b_addr} #")));
    assert!(a_conn.is_some() && b_conn.is_some() && a_conn != b_conn, "{first} for {a_addr}, {other} for {b_addr}");
    for _ in 0..2 {
        assert_eq!(keep_alive_get(&mut a), first, "the client's connection is reused");
        assert_eq!(keep_alive_get(&mut b), other, "the client's connection is reused");
    }
    assert!(f.terminate().success());
}

/// `haproxy -f` with `config`, killed by PID on drop.
fn haproxy(dir: &std::path::Path, config: &str) -> KillOnDrop {
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, config).unwrap();
    let child = Command::new("haproxy")
        .args(["-db", "-f", path.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("haproxy (scripts/test installs it)");
    KillOnDrop(child)
}

#[test]
#[ignore = "needs haproxy (scripts/test installs it)"]
fn haproxy_sends_proxy_v2_to_fulcrum_and_accepts_fulcrums() {
    let dir = common::temp_dir("proxy-protocol-haproxy");
    // HAProxy answers each request with the client address it was given.
    let accept_port = common::closed_port();
    let accept_h2_port = common::closed_port();
    let front_port = common::closed_port();
    let fulcrum_config = format!(
        "workers = 1\nadmin = \"127.0.0.1:0\"\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [{{ cluster = \"echo\" }}]\n\
         proxy_protocol = {{ trusted = [\"127.0.0.1\"] }}\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [{{ cluster = \"haproxy\" }}]\n\n\
         [[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [{{ cluster = \"haproxy-h2\" }}]\n\n\
         [[cluster]]\nname = \"echo\"\nendpoints = [\"{}\"]\n\n\
         [[cluster]]\nname = \"haproxy\"\nendpoints = [\"{accept_port}\"]\nproxy_protocol = \"v2\"\n\n\
         [[cluster]]\nname = \"haproxy-h2\"\nendpoints = [\"{accept_h2_port}\"]\nupstream = \"http2\"\nproxy_protocol = \"v2\"\n",
        xff_upstream(),
    );
    let f = Fulcrum::serve("proxy-protocol-haproxy", &fulcrum_config);
    let config = format!(
        "global\n  maxconn 100\ndefaults\n  timeout connect 5s\n  timeout client 10s\n  timeout server 10s\n\
         frontend accept\n  mode http\n  bind {accept_port} accept-proxy\n\
         \x20 http-request return status 200 content-type text/plain lf-string \"src=%[src]\"\n\
         frontend accept_h2\n  mode http\n  bind {accept_h2_port} accept-proxy proto h2\n\
         \x20 http-request return status 200 content-type text/plain lf-string \"src=%[src] %[req.ver]\"\n\
         frontend front\n  mode tcp\n  bind {front_port}\n  default_backend fulcrum\n\
         backend fulcrum\n  mode tcp\n  server f {} send-proxy-v2\n",
        f.listen[0]
    );
    let _haproxy = haproxy(&dir, &config);
    wait_listening(accept_port);
    wait_listening(accept_h2_port);
    wait_listening(front_port);

    // Client 127.0.0.2 → HAProxy (send-proxy-v2) → Fulcrum → the echo upstream.
    let mut s = connect_from("127.0.0.2", front_port);
    s.write_all(REQUEST).unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 200") && reply.ends_with("\r\n\r\n127.0.0.2"), "{reply}");

    // Clients 127.0.0.3, then .4, then .3 → Fulcrum (proxy_protocol = "v2")
    // → HAProxy's accept-proxy: each is named, none gets a connection that
    // an earlier client's header named.
    for client in ["127.0.0.3", "127.0.0.4", "127.0.0.3"] {
        let mut s = connect_from(client, f.listen[1]);
        s.write_all(REQUEST).unwrap();
        let mut reply = String::new();
        let _ = s.read_to_string(&mut reply);
        assert!(reply.starts_with("HTTP/1.1 200") && reply.ends_with(&format!("src={client}")), "{reply}");
    }
    // The same over HTTP/2 to HAProxy (`accept-proxy proto h2`), two
    // requests per client on its own connection.
    for client in ["127.0.0.3", "127.0.0.4"] {
        let mut s = connect_from(client, f.listen[2]);
        for _ in 0..2 {
            assert_eq!(keep_alive_get(&mut s), format!("src={client} 2.0"));
        }
    }

    assert!(f.terminate().success());
    let _ = std::fs::remove_dir_all(dir);
}
