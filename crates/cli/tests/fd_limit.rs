//! The proxy at its file-descriptor limit: `fulcrum serve` started with a
//! low `ulimit -n` holds as many client connections as it can, leaves the
//! next ones waiting in the listen queue without spinning on `EMFILE`,
//! warns once, counts it, keeps serving the connections it has, and
//! accepts the waiting ones as soon as descriptors come free.
#![cfg(target_os = "linux")]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use common::{app_config, temp_dir, Fulcrum};

/// An upstream that answers every request on a connection with a 200
/// (keep-alive), so that the proxy reuses one upstream connection.
fn keep_alive_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut writer = conn.try_clone().unwrap();
                let mut reader = BufReader::new(conn);
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 0 {
                    if line == "\r\n" && writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
                        return;
                    }
                    line.clear();
                }
            });
        }
    });
    addr
}

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: app\r\n\r\n";

/// Send one keep-alive request on `conn`; whether its 200 came within `wait`.
fn request(conn: &mut TcpStream, send: bool, wait: Duration) -> bool {
    if send && conn.write_all(REQUEST).is_err() {
        return false;
    }
    conn.set_read_timeout(Some(wait)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !got.ends_with(b"\r\n\r\nok") {
        match conn.read(&mut buf) {
            Ok(n @ 1..) => got.extend_from_slice(&buf[..n]),
            _ => return false,
        }
    }
    assert!(got.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&got));
    true
}

/// User plus system CPU time of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[test]
fn at_the_fd_limit_accepting_pauses_and_resumes_by_itself() {
    let upstream = keep_alive_upstream();
    let dir = temp_dir("fd-limit");
    let config = dir.join("fulcrum.toml");
    std::fs::write(&config, app_config(&format!("\"{upstream}\""), "workers = 1", "", "")).unwrap();
    let (log_tx, log) = mpsc::channel();
    let mut command = Command::new("sh");
    command.args(["-c", "ulimit -n 48 && exec \"$0\" serve --config \"$1\"", env!("CARGO_BIN_EXE_fulcrum")]);
    command.arg(&config);
    let proxy = Fulcrum::spawn_command(&mut command, dir, Some(log_tx));
    let addr = proxy.listen[0];

    // Connect until three connections in a row get no answer: the proxy
    // has no descriptor left for them, and they wait in the listen queue.
    let (mut served, mut waiting) = (Vec::new(), Vec::new());
    while waiting.len() < 3 {
        assert!(served.len() < 48, "more connections served than the fd limit allows");
        let mut conn = TcpStream::connect(addr).unwrap();
        if request(&mut conn, true, Duration::from_millis(700)) {
            assert!(waiting.is_empty(), "a connection was served after one that waited");
            served.push(conn);
        } else {
            waiting.push(conn);
        }
    }
    assert!(served.len() >= 10, "only {} connections served under a limit of 48", served.len());

    // At the limit the accept loop sleeps instead of spinning on EMFILE.
    let before = cpu_ticks(proxy.pid());
    std::thread::sleep(Duration::from_secs(2));
    let ticks = cpu_ticks(proxy.pid()) - before;
    assert!(ticks < 30, "{ticks} clock ticks of CPU in 2 s at the fd limit: a busy loop?");

    // The connections it has are served as before.
    for conn in &mut served {
        assert!(request(conn, true, Duration::from_secs(5)), "an established connection failed at the fd limit");
    }

    // Free descriptors: the waiting connections are accepted and answered.
    served.truncate(served.len() - 6);
    for conn in &mut waiting {
        assert!(request(conn, false, Duration::from_secs(5)), "a waiting connection was not accepted");
    }

    // One warning (the later ones are held back), and the counter.
    let lines: Vec<String> = log.try_iter().collect();
    let warnings = lines.iter().filter(|l| l.contains("cannot accept")).count();
    assert_eq!(warnings, 1, "{lines:#?}");
    drop(waiting);
    let metrics = common::get(proxy.admin.unwrap(), "admin", "/metrics", "");
    let text = String::from_utf8_lossy(&metrics.body);
    let errors: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("fulcrum_downstream_accept_errors_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no accept error counter in {text}"));
    assert!(errors > 0, "{text}");
    let open: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("fulcrum_worker_connections{worker=\"0\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no worker connection gauge in {text}"));
    assert!(open >= served.len() as u64, "{open} connections counted open, {} are", served.len());
}
