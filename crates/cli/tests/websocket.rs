//! End-to-end: a real WebSocket server and client (the `websockets` package
//! from PyPI, which `scripts/test` installs) exchange messages both ways
//! through `fulcrum serve`, and the connection survives a reload.
//!
//! A second test opens the WebSocket over HTTP/2 (RFC 8441 extended
//! CONNECT) with hyper's HTTP/2 client, the frames written by hand (no
//! installable client speaks RFC 8441), to the same Python server.
//!
//! A plain `cargo test` ignores them (they need the websockets package);
//! `scripts/test` installs it and runs them, and run without it they fail,
//! never skip.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{ChildStdout, Command, Stdio};

use common::h2c::h2c_client;
use common::{app_config, get, Fulcrum, KillOnDrop};

fn peer_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/tools/ws_peer.py")
}

fn python(args: &[&str]) -> KillOnDrop {
    let child = Command::new("python3")
        .arg(peer_script())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 (with the websockets package: scripts/test installs it)");
    KillOnDrop(child)
}

fn line(out: &mut BufReader<ChildStdout>) -> String {
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    l.trim().to_string()
}

/// The balancer's active count of the only endpoint (one worker).
fn balancer_active(f: &Fulcrum) -> u64 {
    let metrics = get(f.admin.unwrap(), "admin", "/metrics", "");
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    let line = text.lines().find(|l| l.starts_with("fulcrum_balancer_active{")).unwrap_or_else(|| panic!("{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// The Python WebSocket server, its output, and the port it listens on.
fn websocket_server() -> (KillOnDrop, BufReader<ChildStdout>, u16) {
    let mut server = python(&["server"]);
    let mut out = BufReader::new(server.0.stdout.take().unwrap());
    let first = line(&mut out);
    let port: u16 = first.strip_prefix("port ").and_then(|p| p.parse().ok()).unwrap_or_else(|| {
        panic!("the WebSocket server did not start (is the websockets package installed?): {first:?}")
    });
    (server, out, port)
}

#[test]
#[ignore = "needs python3 with the websockets package (scripts/test installs it)"]
fn websocket_messages_pass_both_ways_and_survive_a_reload() {
    let (server, _server_out, port) = websocket_server();
    let config = app_config(&format!("\"127.0.0.1:{port}\""), "workers = 1", "", "");
    let f = Fulcrum::serve("websocket", &config);
    let url = format!("ws://{}/chat", f.listen[0]);

    let mut client = python(&["client", &url, "20"]);
    let mut out = BufReader::new(client.0.stdout.take().unwrap());
    assert_eq!(line(&mut out), "half", "the handshake and ten messages went through");
    assert_eq!(balancer_active(&f), 1, "the open tunnel counts as active");
    // Reload while the connection is open (the same file: a new routing
    // and balancer set), then let the client finish on the same connection.
    let status =
        Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["reload", "--pid", &f.pid().to_string()]).status().unwrap();
    assert!(status.success());
    // A plain request after the reload is answered (the WebSocket server
    // refuses it: 426 or 400, passed on as it is, not a proxy error).
    let plain = get(f.listen[0], "app", "/chat", "");
    assert!(plain.status == 426 || plain.status == 400, "{plain:?}");
    client.0.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    assert_eq!(line(&mut out), "ok 20");
    assert!(client.0.wait().unwrap().success());

    // A new connection after the reload works too.
    let mut again = python(&["client", &url, "2"]);
    let mut out = BufReader::new(again.0.stdout.take().unwrap());
    assert_eq!(line(&mut out), "half");
    again.0.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    assert_eq!(line(&mut out), "ok 2");

    assert!(again.0.wait().unwrap().success());
    // The balancer counted each tunnel until it closed: nothing active now
    // (the count follows the close on the proxy's side: wait for it).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while balancer_active(&f) != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(balancer_active(&f), 0);
    drop(again);
    drop(server);
    assert!(f.terminate().success());
}

/// One WebSocket frame read from `io`: (opcode, payload). Server frames are
/// not masked (RFC 6455 §5.1); payloads here are short.
async fn read_frame<R: tokio::io::AsyncRead + Unpin>(io: &mut R) -> (u8, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 2];
    io.read_exact(&mut head).await.unwrap();
    assert_eq!(head[1] & 0x80, 0, "a server frame is not masked");
    let len = usize::from(head[1] & 0x7f);
    assert!(len < 126, "short payloads only");
    let mut payload = vec![0u8; len];
    io.read_exact(&mut payload).await.unwrap();
    (head[0] & 0x0f, payload)
}

/// A final, masked text frame (clients must mask, RFC 6455 §5.3).
fn text_frame(text: &str) -> Vec<u8> {
    let mask = [0x12, 0x34, 0x56, 0x78];
    let mut frame = vec![0x81, 0x80 | u8::try_from(text.len()).unwrap()];
    frame.extend_from_slice(&mask);
    frame.extend(text.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

#[test]
#[ignore = "needs python3 with the websockets package (scripts/test installs it)"]
fn a_websocket_over_http2_reaches_an_http1_websocket_server() {
    use bytes::Bytes;
    use http_body_util::Empty;
    use hyper_util::rt::TokioIo;
    use tokio::io::AsyncWriteExt;

    let (server, _server_out, port) = websocket_server();
    let config = app_config(&format!("\"127.0.0.1:{port}\""), "workers = 1", "", "");
    let f = Fulcrum::serve("websocket-h2", &config);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut send = h2c_client(f.listen[0]).await;
        // A plain request first: its answer comes after the proxy's SETTINGS,
        // which must allow extended CONNECT before the client may send one.
        let plain = send.send_request(http::Request::get("http://app/chat").body(Empty::<Bytes>::new()).unwrap());
        let plain = plain.await.unwrap();
        assert!(plain.status() == 426 || plain.status() == 400, "{plain:?}");

        let mut req = http::Request::connect("http://app/chat")
            .header("sec-websocket-version", "13")
            .body(Empty::<Bytes>::new())
            .unwrap();
        req.extensions_mut().insert(hyper::ext::Protocol::from_static("websocket"));
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200, "{resp:?}");
        assert!(resp.headers().get("sec-websocket-accept").is_none(), "{resp:?}");
        let mut ws = TokioIo::new(hyper::upgrade::on(resp).await.unwrap());
        assert_eq!(read_frame(&mut ws).await, (1, b"hello".to_vec()));
        for i in 0..3 {
            ws.write_all(&text_frame(&format!("message {i}"))).await.unwrap();
            assert_eq!(read_frame(&mut ws).await, (1, format!("echo: message {i}").into_bytes()));
        }
        assert_eq!(balancer_active(&f), 1, "the open tunnel counts as active");
    });
    drop(rt);
    drop(server);
    assert!(f.terminate().success());
}
