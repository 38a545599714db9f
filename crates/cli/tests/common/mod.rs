//! Starting the real `fulcrum` binary for end-to-end tests, and a minimal
//! HTTP/1.1 client over std sockets. Everything listens on 127.0.0.1 with
//! ports chosen by the kernel; every process is killed by PID on drop.

#![allow(dead_code)] // each test binary uses a different subset

pub mod h2c;
pub mod xdp;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `fulcrum serve`.
pub struct Fulcrum {
    child: Child,
    /// Bound listener addresses, in configuration order.
    pub listen: Vec<SocketAddr>,
    /// The admin listener.
    pub admin: Option<SocketAddr>,
    /// The config file (kept for the process's lifetime).
    pub dir: PathBuf,
    /// What it wrote to stderr after its admin line.
    pub stderr: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// A fresh temporary directory for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fulcrum-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Fulcrum {
    /// `fulcrum serve --config` with `config` written to a file; returns once
    /// it listens.
    pub fn serve(name: &str, config: &str) -> Fulcrum {
        let dir = temp_dir(name);
        let path = dir.join("fulcrum.toml");
        std::fs::write(&path, config).unwrap();
        Fulcrum::spawn(&["serve", "--config", path.to_str().unwrap()], dir)
    }

    /// `fulcrum` with `args`, reading "listening on" lines from stderr.
    pub fn spawn(args: &[&str], dir: PathBuf) -> Fulcrum {
        Fulcrum::spawn_command(Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(args), dir, None)
    }

    /// `command` (which runs `fulcrum serve`), reading "listening on" lines
    /// from stderr; the later lines go to `log` if given.
    pub fn spawn_command(command: &mut Command, dir: PathBuf, log: Option<std::sync::mpsc::Sender<String>>) -> Fulcrum {
        let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start fulcrum");
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let mut listen = Vec::new();
        let mut admin = None;
        let mut seen = Vec::new();
        // The admin line comes last; tests always configure an admin listener.
        for line in lines.by_ref() {
            let line = line.unwrap();
            if let Some(rest) = line.strip_prefix("fulcrum: listening on ") {
                listen.push(rest.split_whitespace().next().unwrap().parse().unwrap());
            } else if let Some(rest) = line.strip_prefix("fulcrum: admin on http://") {
                admin = Some(rest.trim_end_matches("/metrics").parse().unwrap());
                break;
            }
            seen.push(line);
        }
        assert!(admin.is_some(), "fulcrum exited before listening: {seen:#?}");
        // Keep draining stderr so the child never blocks on a full pipe.
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = stderr.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Some(log) = &log {
                    let _ = log.send(line.clone());
                }
                kept.lock().unwrap().push(line);
            }
        });
        Fulcrum { child, listen, admin, dir, stderr }
    }

    /// Wait (up to 10 s) for a stderr line containing `text`, and return it.
    pub fn wait_for_log(&self, text: &str) -> String {
        for _ in 0..1000 {
            if let Some(line) = self.stderr.lock().unwrap().iter().find(|l| l.contains(text)) {
                return line.clone();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no log line with {text:?} in {:#?}", self.stderr.lock().unwrap());
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Ask it to stop (SIGTERM) and wait; returns the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let status = self.child.wait().unwrap();
        // Drop then only removes the directory (the child is reaped).
        status
    }
}

impl Drop for Fulcrum {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A response read by [`send`].
#[derive(Debug)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Raw header block (lowercase names as received).
    pub head: String,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl Reply {
    /// A header's value, case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Write `raw` to `addr` and read one response (the connection is expected to close or the response to have a length).
pub fn send(addr: SocketAddr, raw: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(_) => break,
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let length = head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok()).flatten()
            });
            if let Some(len) = length {
                if buf.len() >= end + 4 + len {
                    break;
                }
            }
        }
    }
    let end =
        find(&buf, b"\r\n\r\n").unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(&buf)));
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap();
    Reply { status, head, body: buf[end + 4..].to_vec() }
}

/// `GET path` with `Host: host` and any extra header lines.
pub fn get(addr: SocketAddr, host: &str, path: &str, extra: &str) -> Reply {
    send(addr, format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n").as_bytes())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Addresses as the body of a TOML list: `"a", "b"`.
pub fn toml_list<T: std::fmt::Display>(items: &[T]) -> String {
    items.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", ")
}

/// A proxy configuration: an admin listener and one HTTP listener, both on
/// free ports, routing everything to the cluster `app` whose endpoints are
/// `endpoints` (a TOML list body). `top` goes before the tables (e.g.
/// `workers = 1`), `listener` and `cluster` into those tables.
pub fn app_config(endpoints: &str, top: &str, listener: &str, cluster: &str) -> String {
    format!(
        "admin = \"127.0.0.1:0\"\n{top}\n\n[[listener]]\nlisten = \"127.0.0.1:0\"\nroutes = [{{ cluster = \"app\" }}]\n\
         {listener}\n\n[[cluster]]\nname = \"app\"\nendpoints = [{endpoints}]\n{cluster}\n"
    )
}

/// A port on 127.0.0.1 where nothing listens (bound, then released).
pub fn closed_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// A helper process (a third-party peer, a routing daemon) killed by PID and
/// reaped on drop, so a failing test leaves nothing running.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `command` started with its standard output piped, killed on drop, and
/// the first `lines` lines it printed (without their line ends; fewer if it
/// closed its output first): how a helper process says where it listens.
pub fn spawn_printing(command: &mut Command, lines: usize) -> (KillOnDrop, Vec<String>) {
    let mut child = KillOnDrop(command.stdout(Stdio::piped()).spawn().unwrap_or_else(|e| panic!("{command:?}: {e}")));
    let printed = BufReader::new(child.0.stdout.take().unwrap()).lines().take(lines).map_while(Result::ok).collect();
    (child, printed)
}

/// A `fulcrum backend` started with `args` (on `--listen 127.0.0.1:0`
/// unless they name a listen address), killed on drop, and the addresses it
/// printed: one per backend (`--count`, 1 by default).
pub fn fulcrum_backend(args: &[&str]) -> (KillOnDrop, Vec<SocketAddr>) {
    let count = args.iter().position(|a| *a == "--count").map_or(1, |i| args[i + 1].parse().expect("--count N"));
    let mut command = Command::new(env!("CARGO_BIN_EXE_fulcrum"));
    command.arg("backend");
    if !args.contains(&"--listen") {
        command.args(["--listen", "127.0.0.1:0"]);
    }
    let (child, lines) = spawn_printing(command.args(args).stderr(Stdio::null()), count);
    let addrs: Vec<SocketAddr> = lines.iter().filter_map(|l| l.trim().parse().ok()).collect();
    assert_eq!(addrs.len(), count, "fulcrum backend {args:?} printed {lines:?}");
    (child, addrs)
}

/// A backend's side of one connection in the XDP tests: every line read is
/// answered with the backend's `name`, so the client sees which backend it
/// reached; ends when the client closes.
pub fn answer_with_name(conn: TcpStream, name: &str) {
    let mut writer = conn.try_clone().unwrap();
    for line in BufReader::new(conn).lines() {
        if line.is_err() || writeln!(writer, "{name}").is_err() {
            return;
        }
    }
}

/// Which backend answered each of `n` requests sent from `threads` threads.
pub fn spread(addr: SocketAddr, n: usize, threads: usize, extra: &str) -> std::collections::HashMap<String, usize> {
    let extra = extra.to_string();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let extra = extra.clone();
            std::thread::spawn(move || {
                (0..n / threads)
                    .map(|_| {
                        let r = get(addr, "app", "/", &extra);
                        assert_eq!(r.status, 200, "{r:?}");
                        r.header(fulcrum_load::BACKEND_HEADER).unwrap().to_string()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut counts = std::collections::HashMap::new();
    for h in handles {
        for name in h.join().unwrap() {
            *counts.entry(name).or_insert(0) += 1;
        }
    }
    counts
}

/// An upstream on a free port: 101 and echo for an upgrade, 200 otherwise.
pub fn echo_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || serve(conn));
        }
    });
    addr
}

fn serve(conn: TcpStream) {
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    let mut upgrade = false;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        upgrade |= line.to_ascii_lowercase().starts_with("upgrade:");
        if line == "\r\n" {
            break;
        }
    }
    if !upgrade {
        let _ = writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nplain");
        return;
    }
    let _ = writer.write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n");
    let mut buf = [0u8; 1024];
    while let Ok(n @ 1..) = reader.read(&mut buf) {
        if writer.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// An HTTP/1.1 upgrade request for `path` (the echo upstream accepts it).
pub fn upgrade(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: app\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n").into_bytes()
}

/// A client tunnel through the proxy at `proxy` to an [`echo_upstream`],
/// read past its 101.
pub fn open_tunnel(proxy: SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&upgrade(path)).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "closed during the handshake: {:?}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    s
}

/// Polls `check` every 5 ms until it holds, failing after 20 s: a test
/// waits for what its rule needs (a reload applied, a request held), not
/// for a sleep that guesses how long a loaded machine takes.
pub fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "not within 20 s: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}
