//! The one-LB namespace topology of `scripts/xdp-topology` (a client, the
//! LB and three backends on one bridge) for `fulcrum lb` end-to-end tests:
//! backends are threads of the test that listen inside their backend's
//! namespace and answer every line with their address; clients connect
//! from threads that enter the client's namespace. Namespaces, pins and
//! servers go when the [`Topology`] is dropped.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fulcrum_xdp::netns::Netns;

use super::answer_with_name;

/// The VIP.
pub const VIP: &str = "10.202.1.1";
/// The backends' addresses, `b1`…`b3`.
pub const BACKENDS: [&str; 3] = ["10.202.0.11", "10.202.0.12", "10.202.0.13"];
/// The IPv6 VIP the topology routes through the LB.
pub const VIP6: &str = "fd00:202:1::1";
/// The backends' IPv6 addresses, in [`BACKENDS`] order.
pub const BACKENDS6: [&str; 3] = ["fd00:202::11", "fd00:202::12", "fd00:202::13"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A backend server thread and what stops it.
struct Server {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The topology; torn down (namespaces, pins, servers) when dropped.
pub struct Topology {
    /// Names' prefix (`PREFIX-lb`, `PREFIX-c`, `PREFIX-b1`…).
    pub prefix: String,
    /// The data plane's pin directory.
    pub pin_dir: String,
    servers: Vec<(usize, Server)>,
}

impl Topology {
    /// `scripts/xdp-topology up` in `mode` (nat, dsr or direct).
    pub fn up(name: &str, mode: &str) -> Topology {
        let prefix = format!("fx{}{name}", std::process::id());
        let pin_dir = format!("/sys/fs/bpf/{prefix}");
        // The guard exists before the first namespace does, so a setup that
        // fails half-way is torn down too.
        let topo = Topology { prefix, pin_dir, servers: Vec::new() };
        let status =
            Command::new(repo().join("scripts/xdp-topology")).args(["up", &topo.prefix, mode]).status().unwrap();
        assert!(status.success(), "xdp-topology up failed");
        topo
    }

    /// `/run/netns/PREFIX-NODE`.
    pub fn ns(&self, node: &str) -> String {
        format!("/run/netns/{}-{node}", self.prefix)
    }

    /// `fulcrum lb --pin-dir … ARGS` inside the LB namespace, whatever it does.
    pub fn lb_output(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .arg(format!("--net={}", self.ns("lb")))
            .arg(env!("CARGO_BIN_EXE_fulcrum"))
            .args(["lb", "--pin-dir", &self.pin_dir])
            .args(args)
            .output()
            .unwrap()
    }

    /// `fulcrum lb --pin-dir … ARGS` inside the LB namespace: its stdout,
    /// asserting success.
    pub fn lb(&self, args: &[&str]) -> String {
        let out = self.lb_output(args);
        assert!(out.status.success(), "fulcrum lb {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `fulcrum lb … ARGS --json`, parsed.
    pub fn lb_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.push("--json");
        let text = self.lb(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("fulcrum lb {all:?}: {e}: {text}"))
    }

    /// A server in backend `i`'s namespace on `port`, answering each line
    /// with its address, until [`Topology::stop`] or the drop.
    pub fn serve(&mut self, i: usize, port: u16) {
        let ns = Netns::attach(&format!("{}-b{}", self.prefix, i + 1));
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let name = BACKENDS[i];
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            ns.enter().unwrap();
            // IPv6 and IPv4 (mapped) both.
            let listener = TcpListener::bind(("::", port)).unwrap();
            listener.set_nonblocking(true).unwrap();
            ready_tx.send(()).unwrap();
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        conn.set_nonblocking(false).unwrap();
                        std::thread::spawn(move || answer_with_name(conn, name));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        ready_rx.recv().unwrap();
        self.servers.push((i, Server { stop, thread: Some(thread) }));
    }

    /// Close backend `i`'s listener (its established connections stay):
    /// new connections to it are refused.
    pub fn stop(&mut self, i: usize) {
        for (_, s) in self.servers.iter_mut().filter(|(b, _)| *b == i) {
            s.stop.store(true, Ordering::Relaxed);
            if let Some(t) = s.thread.take() {
                t.join().unwrap();
            }
        }
    }

    /// `n` connections to the VIP's `port` from the client namespace, each
    /// having asked once who answers.
    pub fn connect(&self, n: usize, port: u16) -> Vec<Conn> {
        self.in_client(move || (0..n).map(|_| Conn::open(port).unwrap()).collect())
    }

    /// As [`Topology::connect`], to the IPv6 VIP.
    pub fn connect6(&self, n: usize, port: u16) -> Vec<Conn> {
        let vip = SocketAddr::new(VIP6.parse().expect("an address"), port);
        self.in_client(move || (0..n).map(|_| Conn::open_to(vip).unwrap()).collect())
    }

    /// Run `f` on a thread inside the client namespace.
    pub fn in_client<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        self.spawn_in_client(f).join().unwrap()
    }

    /// Start `f` on a thread inside the client namespace.
    pub fn spawn_in_client<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
        let ns = Netns::attach(&format!("{}-c", self.prefix));
        std::thread::spawn(move || {
            ns.enter().unwrap();
            f()
        })
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for i in 0..BACKENDS.len() {
            self.stop(i);
        }
        // Failures cannot be returned from a drop; they go straight to
        // stderr (past the harness's capture), and scripts/test fails on
        // whatever is left.
        if let Err(e) = std::fs::remove_dir_all(&self.pin_dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                let _ = writeln!(std::io::stderr(), "could not remove {}: {e}", self.pin_dir);
            }
        }
        match Command::new(repo().join("scripts/xdp-topology")).args(["down", &self.prefix]).status() {
            Ok(s) if s.success() => {}
            other => {
                let _ = writeln!(std::io::stderr(), "xdp-topology down {}: {other:?}", self.prefix);
            }
        }
    }
}

/// A client connection through the VIP that remembers who answered.
pub struct Conn {
    reader: BufReader<TcpStream>,
    /// The backend that answered the first line.
    pub backend: String,
}

impl Conn {
    /// Connect to the VIP's `port` (from a thread in the client namespace)
    /// and ask once.
    pub fn open(port: u16) -> std::io::Result<Conn> {
        Conn::open_to(SocketAddr::from((VIP.parse::<Ipv4Addr>().expect("an address"), port)))
    }

    /// As [`Conn::open`], to `vip`.
    pub fn open_to(vip: SocketAddr) -> std::io::Result<Conn> {
        let stream = TcpStream::connect_timeout(&vip, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut conn = Conn { reader: BufReader::new(stream), backend: String::new() };
        conn.backend = conn.ask()?;
        Ok(conn)
    }

    /// Send a line; the answer.
    pub fn ask(&mut self) -> std::io::Result<String> {
        writeln!(self.reader.get_mut(), "hello")?;
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line.trim().to_owned())
    }

    /// The client's port.
    pub fn local_port(&self) -> u16 {
        self.reader.get_ref().local_addr().expect("a connected socket").port()
    }
}
