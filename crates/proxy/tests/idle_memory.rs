//! Heap memory per idle client connection, counted exactly: a global
//! allocator that counts live bytes wraps the system's, the proxy runs in
//! this process, and connections that each sent one request and read its
//! answer are held open while the live bytes are compared. The sizes of
//! the allocations the idle connections hold are printed (`--nocapture`),
//! so that a regression shows where the memory went.
//!
//! Only counting needs `unsafe` (the `GlobalAlloc` trait is unsafe); the
//! proxy itself forbids it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};
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

/// A connection that sent one request and read its answer.
fn idle_client(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !got.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&got));
    s
}

/// Live heap bytes once the proxy's threads have settled.
fn live() -> i64 {
    std::thread::sleep(Duration::from_millis(300));
    LIVE.load(Relaxed)
}

#[test]
fn an_idle_http1_connection_holds_little_heap() {
    // Client and proxy ends share this process's descriptors (often 1,024).
    const N: usize = 300;
    let mut config = Config::quick(
        "127.0.0.1:0".parse().unwrap(),
        &[upstream().to_string()],
        fulcrum_balance::AlgorithmKind::RoundRobin,
    )
    .unwrap();
    config.workers = 1;
    let proxy = Proxy::start(config).unwrap();
    let addr = proxy.listen_addrs()[0];
    // Warm up: the upstream connection, the worker's pools and timers.
    drop((0..20).map(|_| idle_client(addr)).collect::<Vec<_>>());
    let before = live();
    TRACK.store(true, Relaxed);
    let held: Vec<TcpStream> = (0..N).map(|_| idle_client(addr)).collect();
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
    eprintln!("heap per idle HTTP/1.1 connection: {per} bytes; live allocations per connection by size: {classes:?}");
    drop(held);
    proxy.shutdown(Duration::from_secs(1));
    // A debug build's figure (release futures are smaller); with a read
    // buffer held between requests, or the request path's future inline in
    // the connection's task, it would be over 10 KiB.
    assert!(per <= 3 * 1024, "{per} bytes of heap per idle connection");
}
