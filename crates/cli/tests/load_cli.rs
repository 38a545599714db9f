//! `fulcrum backend` and `fulcrum load` as a user runs them: backends print
//! their addresses and stop cleanly on SIGTERM; `load --json` prints only
//! the report; bad flags exit with code 2.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Output, Stdio};

fn fulcrum() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fulcrum"))
}

/// A `fulcrum backend` process, killed by PID if a test fails.
struct BackendProcess {
    child: Child,
    addrs: Vec<SocketAddr>,
}

impl BackendProcess {
    /// Starts a backend that prints `count` addresses, or says why it
    /// could not (its exit status and stderr).
    fn try_start(args: &[&str], count: usize) -> Result<BackendProcess, String> {
        let mut child = fulcrum()
            .arg("backend")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fulcrum backend");
        // Drained by a thread so a chatty backend never blocks on a full pipe.
        let mut stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut err = String::new();
            let _ = stderr.read_to_string(&mut err);
            err
        });
        let stdout = child.stdout.take().unwrap();
        let addrs: Vec<SocketAddr> =
            BufReader::new(stdout).lines().take(count).map(|l| l.unwrap().parse().unwrap()).collect();
        if addrs.len() == count {
            return Ok(BackendProcess { child, addrs });
        }
        // Stdout closed early: the backend exited; its stderr says why.
        let status = child.wait().unwrap();
        let err = stderr.join().unwrap();
        Err(format!("fulcrum backend {args:?} printed {} of {count} addresses ({status}): {err}", addrs.len()))
    }

    fn start(args: &[&str], count: usize) -> BackendProcess {
        BackendProcess::try_start(args, count).unwrap_or_else(|e| panic!("{e}"))
    }

    fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let status = self.child.wait().unwrap();
        std::mem::forget(self);
        status
    }
}

impl Drop for BackendProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn load(args: &[&str]) -> Output {
    fulcrum().arg("load").args(args).output().expect("run fulcrum load")
}

#[test]
fn backends_answer_load_and_stop_on_sigterm() {
    let b = BackendProcess::start(&["--listen", "127.0.0.1:0", "--count", "3", "--delays", "1ms*2,2ms"], 3);
    assert_eq!(b.addrs.len(), 3);
    let url = format!("http://{}/", b.addrs[2]);
    let out = load(&[&url, "--rate", "400", "--requests", "200", "--json", "--threads", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is only JSON");
    assert_eq!((v["requests"].as_u64(), v["errors"].as_u64()), (Some(200), Some(0)));
    assert_eq!(v["by_backend"]["2"], 200);
    assert!(v["latency_ms"]["min"].as_f64().unwrap() >= 2.0);

    let out = load(&[
        &format!("http://{}/", b.addrs[0]),
        "--clients",
        "2",
        "--interval",
        "10ms",
        "--requests-per-client",
        "5",
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && table.contains("requests 10 in"), "{table}");
    assert!(table.contains("p99.99"), "{table}");

    assert!(b.terminate().success());
}

/// A port `p` below 65535 where `p` and `p + 1` were both free a moment ago.
fn two_free_ports() -> u16 {
    for _ in 0..100 {
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = a.local_addr().unwrap().port();
        if p < 65535 && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
    panic!("found no two consecutive free ports on 127.0.0.1 in 100 tries");
}

#[test]
fn consecutive_ports_follow_listen() {
    // Another process may take one of the two ports between the check and
    // the backend's bind; try again then, but a backend that never starts
    // fails the test.
    let mut errors = Vec::new();
    for _ in 0..5 {
        let listen = format!("127.0.0.1:{}", two_free_ports());
        match BackendProcess::try_start(&["--listen", &listen, "--count", "2"], 2) {
            Ok(b) => {
                assert_eq!(b.addrs[0].to_string(), listen);
                assert_eq!(b.addrs[1].port(), b.addrs[0].port() + 1);
                assert!(b.terminate().success());
                return;
            }
            Err(e) => errors.push(e),
        }
    }
    panic!("the backend never started: {errors:#?}");
}

#[test]
fn bad_flags_exit_with_code_2_and_say_why() {
    let cases: &[(&[&str], &str)] = &[
        (&["backend", "--delays", "5ms*0"], "--delays"),
        (&["backend", "--delays", "5ms,6ms", "--count", "3"], "--delays"),
        (&["backend", "--status", "200:x"], "--status"),
        (&["backend", "--delay-dist", "normal"], "--delay-dist"),
        (&["backend", "--listen", "127.0.0.1:65535", "--count", "2"], "65535"),
        (&["load", "http://127.0.0.1:9/", "--rate", "0", "-n", "1"], "rate"),
        (&["load", "ftp://127.0.0.1:9/", "-n", "1"], "https://"),
        (&["load", "http://127.0.0.1:9/", "--http3", "-n", "1"], "needs an https://"),
        (&["load", "http://127.0.0.1:9/", "--streams", "4", "-n", "1"], "--streams"),
        (&["load", "https://127.0.0.1:9/", "--cacert", "/nonexistent.pem", "-n", "1"], "/nonexistent.pem"),
        (&["load", "http://127.0.0.1:9/", "-H", "no-colon", "-n", "1"], "--header"),
        (&["load", "http://127.0.0.1:9/", "--rate", "10", "--clients", "2"], "cannot be used"),
    ];
    for (args, says) in cases {
        let out = fulcrum().args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
