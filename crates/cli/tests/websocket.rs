//! End-to-end: a real WebSocket server and client (the `websockets` package
//! from PyPI, which `scripts/test` installs) exchange messages both ways
//! through `fulcrum serve`, and the connection survives a reload.
//!
//! The test fails, never skips, when python3 or the package is missing.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{ChildStdout, Command, Stdio};

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

#[test]
fn websocket_messages_pass_both_ways_and_survive_a_reload() {
    let mut server = python(&["server"]);
    let mut server_out = BufReader::new(server.0.stdout.take().unwrap());
    let first = line(&mut server_out);
    let port: u16 = first.strip_prefix("port ").and_then(|p| p.parse().ok()).unwrap_or_else(|| {
        panic!("the WebSocket server did not start (is the websockets package installed?): {first:?}")
    });
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
