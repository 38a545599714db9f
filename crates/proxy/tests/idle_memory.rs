//! Heap memory per idle client connection, counted exactly: a global
//! allocator that counts live bytes wraps the system's, the proxy runs in
//! this process, and connections that each sent one request (HTTP/1.1,
//! h2c) or WebSocket handshake and read its answer are held open while the
//! live bytes are compared. The sizes of
//! the allocations the idle connections hold are printed (`--nocapture`),
//! so that a regression shows where the memory went. One more test counts
//! the file descriptors an HTTP/2-only listener's connections hold.
//!
//! Only counting needs `unsafe` (the `GlobalAlloc` trait is unsafe); the
//! proxy itself forbids it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use fulcrum_proxy::config::Config;
use fulcrum_proxy::server::Proxy;

/// Live allocations by size class (class i: sizes up to 16 << i), while
/// [`TRACK`] is on.
static CLASSES: [AtomicI64; 16] = [const { AtomicI64::new(0) }; 16];
static LIVE: AtomicI64 = AtomicI64::new(0);
static TRACK: AtomicBool = AtomicBool::new(false);

struct Counting;

fn class(size: usize) -> usize {
    (0..16).find(|i| size <= 16 << i).unwrap_or(15)
}

fn note(size: usize, sign: i64) {
    LIVE.fetch_add(sign * size as i64, Relaxed);
    if TRACK.load(Relaxed) {
        CLASSES[class(size)].fetch_add(sign, Relaxed);
    }
}

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size(), 1);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(layout.size(), -1);
        // SAFETY: as above; `ptr` came from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(layout.size(), -1);
        note(new_size, 1);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// An upstream answering every request with an empty 200, keep-alive.
fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut writer = conn.try_clone().unwrap();
                let mut line = String::new();
                let mut reader = BufReader::new(conn);
                while reader.read_line(&mut line).unwrap_or(0) > 0 {
                    if line == "\r\n" && writer.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_err() {
                        return;
                    }
                    line.clear();
                }
            });
        }
    });
    addr
}

/// An upstream that answers each connection's WebSocket handshake with a
/// 101 and then holds it, on one thread, in room reserved up front (its
/// memory is counted too).
fn websocket_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::with_capacity(4 * N);
        for mut conn in listener.incoming().flatten() {
            read_head(&mut conn);
            let _ = conn
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n");
            held.push(conn);
        }
    });
    addr
}

/// Read from `s` up to the end of a head (no further), on the stack.
fn read_head(s: &mut TcpStream) -> [u8; 512] {
    let mut head = [0u8; 512];
    let mut len = 0;
    while !head[..len].ends_with(b"\r\n\r\n") {
        assert!(len < head.len(), "head too long");
        let n = s.read(&mut head[len..len + 1]).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&head[..len]));
        len += n;
    }
    head
}

/// How a test client opens a connection and makes it idle.
#[derive(Clone, Copy, Debug)]
enum Client {
    /// One HTTP/1.1 request and its answer.
    Http1,
    /// The HTTP/2 preface, one request and its answer, by prior knowledge.
    H2c,
    /// A WebSocket handshake and its 101.
    WebSocket,
}

/// A connection of `client`'s kind to `addr`, now idle.
fn idle_client(addr: SocketAddr, client: Client) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    match client {
        Client::Http1 => {
            s.write_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n").unwrap();
            assert!(read_head(&mut s).starts_with(b"HTTP/1.1 200"));
        }
        Client::WebSocket => {
            s.write_all(
                b"GET /ws HTTP/1.1\r\nhost: a\r\nconnection: upgrade\r\nupgrade: websocket\r\n\
                  sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
            )
            .unwrap();
            assert!(read_head(&mut s).starts_with(b"HTTP/1.1 101"));
        }
        Client::H2c => h2c_request(&mut s),
    }
    s
}

/// An HTTP/2 frame header: length, type, flags, stream.
fn frame(len: usize, kind: u8, flags: u8, stream: u32) -> [u8; 9] {
    let [_, a, b, c] = (len as u32).to_be_bytes();
    let [d, e, f, g] = stream.to_be_bytes();
    [a, b, c, kind, flags, d, e, f, g]
}

/// Over `s`: the preface, empty SETTINGS, and `GET /` on stream 1 as a
/// browser sends it (the authority indexed in the server's HPACK table);
/// the server's SETTINGS acknowledged; frames read until the response to
/// stream 1 ends.
fn h2c_request(s: &mut TcpStream) {
    const HEADERS: u8 = 1;
    const SETTINGS: u8 = 4;
    const END_STREAM: u8 = 1;
    const ACK: u8 = 1;
    // :method GET, :scheme http, :path / (static table), :authority "a"
    // (literal with incremental indexing), user-agent "t" (the same).
    let block = [0x82, 0x86, 0x84, 0x41, 1, b'a', 0x7a, 1, b't'];
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend_from_slice(&frame(0, SETTINGS, 0, 0));
    out.extend_from_slice(&frame(block.len(), HEADERS, END_STREAM | 4, 1));
    out.extend_from_slice(&block);
    s.write_all(&out).unwrap();
    let mut payload = [0u8; 1024];
    loop {
        let mut h = [0u8; 9];
        s.read_exact(&mut h).unwrap();
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
        let (kind, flags, stream) = (h[3], h[4], u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff);
        assert!(len <= payload.len(), "frame of {len} bytes");
        s.read_exact(&mut payload[..len]).unwrap();
        if kind == SETTINGS && flags & ACK == 0 {
            s.write_all(&frame(0, SETTINGS, ACK, 0)).unwrap();
        }
        if kind == HEADERS && stream == 1 {
            // The static table's `:status 200`.
            assert_eq!(payload[0], 0x88, "not a 200");
        }
        if stream == 1 && flags & END_STREAM != 0 {
            return;
        }
        assert!(kind != 3 && kind != 7, "stream reset or connection closed (frame type {kind})");
    }
}

/// Live heap bytes once the proxy's threads have settled.
fn live() -> i64 {
    std::thread::sleep(Duration::from_millis(300));
    LIVE.load(Relaxed)
}

/// `fulcrum_parked_connections`, from the admin listener's `/metrics`.
fn parked(admin: SocketAddr) -> u64 {
    let mut s = TcpStream::connect(admin).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let value = text.lines().find_map(|l| l.strip_prefix("fulcrum_parked_connections "));
    value.expect("no fulcrum_parked_connections in /metrics").trim().parse().unwrap()
}

/// Connections held at once. Client and proxy ends (and, for WebSocket,
/// the upstream's) share this process's descriptors (often 1,024).
const N: usize = 250;

/// The tests share the counters: one runs at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Heap bytes per idle connection of `client`'s kind, through a proxy with
/// one worker in front of `upstream`; the sizes of the allocations they
/// hold are printed.
fn heap_per_connection(client: Client, upstream: SocketAddr) -> i64 {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut config = Config::quick(
        "127.0.0.1:0".parse().unwrap(),
        &[upstream.to_string()],
        fulcrum_balance::AlgorithmKind::ROUND_ROBIN,
    )
    .unwrap();
    config.workers = 1;
    // Parked soon, to be counted parked (as they are after a second).
    config.listeners[0].limits.park_after = Duration::from_millis(50);
    config.admin = Some("127.0.0.1:0".parse().unwrap());
    let proxy = Proxy::start(config).unwrap();
    let addr = proxy.listen_addrs()[0];
    let admin = proxy.admin_addr().unwrap();
    // Warm up: the upstream connection, the worker's pools and timers.
    drop((0..20).map(|_| idle_client(addr, client)).collect::<Vec<_>>());
    std::thread::sleep(Duration::from_millis(200));
    for c in &CLASSES {
        c.store(0, Relaxed);
    }
    let mut held = Vec::with_capacity(N);
    let before = live();
    TRACK.store(true, Relaxed);
    held.extend((0..N).map(|_| idle_client(addr, client)));
    if let Client::Http1 = client {
        let start = std::time::Instant::now();
        while parked(admin) != N as u64 {
            assert!(start.elapsed() < Duration::from_secs(20), "{} of {N} connections parked", parked(admin));
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let after = live();
    TRACK.store(false, Relaxed);
    let per = (after - before) / N as i64;
    let classes: Vec<String> = CLASSES
        .iter()
        .enumerate()
        .map(|(i, c)| (16usize << i, c.load(Relaxed) as f64 / N as f64))
        .filter(|(_, c)| c.abs() >= 0.01)
        .map(|(size, c)| format!("≤{size} B: {c:.2}"))
        .collect();
    eprintln!("heap per idle {client:?} connection: {per} bytes; live allocations per connection by size: {classes:?}");
    drop(held);
    proxy.shutdown(Duration::from_secs(1));
    per
}

// The bounds are a debug build's figures (release futures are smaller),
// with a little room.

#[test]
fn an_idle_http1_connection_holds_little_heap() {
    let per = heap_per_connection(Client::Http1, upstream());
    // Parked: the socket's registration (256 bytes), the connection's
    // shared state (socket, empty buffer, body state: 128, kept so that
    // waking it allocates nothing), the peer (128 and its address as
    // text), the socket box, and about 40 bytes in the parker. A connection that
    // kept its task would add tokio's record of it (512 bytes) and its
    // timer (112): over 1.2 KiB; with a read buffer held between requests,
    // over 8 KiB.
    assert!(per <= 800, "{per} bytes of heap per idle HTTP/1.1 connection");
}

#[test]
fn an_idle_h2c_connection_holds_its_codec_and_little_more() {
    let per = heap_per_connection(Client::H2c, upstream());
    // The h2 crate's codec keeps 28 KiB of buffers per connection (16 KiB
    // to write, 8 KiB to read, 4 KiB for HPACK) and its stream tables
    // about 5 KiB more; hyper's server in the task that accepted the
    // connection, not one of its own, would add 1.7 KiB, and so would
    // room in the connection's task for hyper's auto server (HTTP/1.1 or
    // HTTP/2), which only `http1_server = "hyper"` uses.
    assert!(per <= 36 * 1024 + 512, "{per} bytes of heap per idle h2c connection");
}

#[test]
fn an_idle_websocket_tunnel_holds_no_buffer() {
    let per = heap_per_connection(Client::WebSocket, websocket_upstream());
    // Either side's read buffer kept for the tunnel's life would add 8 KiB.
    assert!(per <= 2560, "{per} bytes of heap per idle WebSocket tunnel");
}

#[test]
fn an_http2_only_connection_holds_one_descriptor() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const CONNECTIONS: usize = 50;
    let fds = || std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
    let mut config = Config::quick(
        "127.0.0.1:0".parse().unwrap(),
        &[upstream().to_string()],
        fulcrum_balance::AlgorithmKind::ROUND_ROBIN,
    )
    .unwrap();
    config.workers = 1;
    config.listeners[0].protocol = fulcrum_proxy::config::ListenerProtocol::Http2;
    let proxy = Proxy::start(config).unwrap();
    let addr = proxy.listen_addrs()[0];
    drop(idle_client(addr, Client::H2c));
    std::thread::sleep(Duration::from_millis(200));
    let before = fds();
    let held: Vec<TcpStream> = (0..CONNECTIONS).map(|_| idle_client(addr, Client::H2c)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let opened = fds() - before;
    drop(held);
    proxy.shutdown(Duration::from_secs(1));
    // The client's end and the proxy's, and a few upstream connections;
    // a duplicate kept for the lingering close would make it three each.
    assert!(opened <= 2 * CONNECTIONS + 4, "{opened} descriptors for {CONNECTIONS} connections");
    assert!(opened >= 2 * CONNECTIONS, "{opened} descriptors for {CONNECTIONS} connections: not counted?");
}
