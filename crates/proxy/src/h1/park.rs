//! Parking: idle HTTP/1.1 connections held without a task of their own.
//!
//! An idle connection's task costs tokio's record of it (the task's future
//! padded to 512 bytes) and its timer (a boxed `Sleep`), more than the rest
//! of what an idle connection holds. So a connection that has been idle for
//! `limits.park_after` gives what it must keep — its shared state (socket,
//! no buffer), its peer, and when it went idle ([`Asleep`]) — to its
//! worker's [`Parker`], and its task ends. Not at once: under load a
//! connection is idle for microseconds between requests, and ending and
//! spawning a task per request would cost every request; the lean server
//! checks lazily, when the connection's one timer fires.
//!
//! Only after a connection's first request: before it, the connection may
//! still turn out to speak HTTP/2, which hyper's server takes over.
//!
//! One parker per worker (each worker is one thread with its own runtime)
//! holds its parked connections in a slab (in small chunks, so that its
//! growth takes no fresh pages), with their idle deadlines, which one
//! timer and a sweep keep instead of a timer each. It runs outside tokio's
//! cooperative budget, which would otherwise end its reads early. It waits
//! for each connection's bytes with
//! the connection's own shared state as the waker ([`Conn`] is a
//! [`Wake`]): a wake puts the connection on the parker's queue, so nothing
//! is allocated per park, and the queue says which connection woke. The
//! read is the one an idle connection's task does ([`Inbound::poll_fill`]),
//! so TLS connections park the same way. When bytes come, the parker hands
//! the connection back ([`Resume`]) for a new task to serve; at its
//! deadline, at end of stream, or when the proxy stops, it closes it.
//!
//! A parked connection's socket is dropped explicitly when it is closed: the
//! socket's registration may hold the connection's waker, and so the
//! connection itself.
//!
//! [`Inbound::poll_fill`]: crate::h1::conn::Inbound::poll_fill

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::h1::conn::{lock, Conn, Shared};
use crate::http::Peer;
use crate::metrics::ProxyStats;
use crate::shutdown::{stopping, Stop};

/// A connection to park, or one that woke: its state, its peer, and since
/// when it has been idle (when it woke, for one that woke).
pub struct Asleep {
    pub(crate) conn: Shared,
    pub(crate) peer: Arc<Peer>,
    pub(crate) since: Instant,
}

impl Asleep {
    /// Close it.
    fn close(self) {
        close(&self.conn);
    }
}

/// Close `conn`: drop its socket, whose registration may hold `conn` as its
/// waker (and so keep it alive).
fn close(conn: &Shared) {
    let io = lock(conn).io.take();
    drop(io);
}

/// What a parked connection goes back to when its bytes come.
pub trait Resume: Send + 'static {
    /// How long the connection may stay idle.
    fn idle_timeout(&self) -> Duration;
    /// Serve the connection again (bytes are in its read buffer).
    fn resume(self, asleep: Asleep);
}

/// The connections of one parker that woke, for it to look at.
#[derive(Debug, Default)]
pub struct Parking {
    woken: Mutex<Vec<Shared>>,
    notify: Notify,
}

impl Wake for Conn {
    fn wake(self: Arc<Self>) {
        let parking = self.parking.clone();
        parking.woken.lock().unwrap_or_else(PoisonError::into_inner).push(self);
        parking.notify.notify_one();
    }
}

/// One worker's parker: connections are parked through it, and its
/// [`run`](Parker::run) task holds them.
pub struct Parker<R> {
    parking: Arc<Parking>,
    /// Connections parked and not yet taken in; `None` once it stopped.
    inbox: Mutex<Option<Vec<(Asleep, R)>>>,
}

impl<R: Resume> Parker<R> {
    pub fn new() -> Arc<Self> {
        Arc::new(Parker { parking: Arc::default(), inbox: Mutex::new(Some(Vec::new())) })
    }

    /// Where connections that may park here wake.
    pub fn parking(&self) -> &Arc<Parking> {
        &self.parking
    }

    /// Park `asleep`, to go back to `to` when its bytes come (closed at
    /// once if the parker has stopped).
    pub fn park(&self, asleep: Asleep, to: R) {
        let mut inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
        match inbox.as_mut() {
            Some(inbox) => inbox.push((asleep, to)),
            None => asleep.close(),
        }
        drop(inbox);
        self.parking.notify.notify_one();
    }

    /// Hold the parked connections until the proxy stops, then close them.
    pub async fn run(self: Arc<Self>, stats: Arc<ProxyStats>, mut stopped: watch::Receiver<Stop>) {
        let mut lot = Lot::new(stats);
        let timer = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(timer);
        loop {
            let next = lot.next_deadline();
            if let Some(at) = next {
                timer.as_mut().reset(at);
            }
            tokio::select! {
                biased;
                () = stopping(&mut stopped) => break,
                () = self.parking.notify.notified() => {}
                () = timer.as_mut(), if next.is_some() => {}
            }
            // Taken whole, so that the queues' room goes too.
            let parked = self.inbox.lock().unwrap_or_else(PoisonError::into_inner).as_mut().map(std::mem::take);
            for (asleep, to) in parked.into_iter().flatten() {
                let key = lot.insert(asleep, to);
                lot.poll(key);
            }
            let woken = std::mem::take(&mut *self.parking.woken.lock().unwrap_or_else(PoisonError::into_inner));
            for conn in woken {
                let key = lock(&conn).parked_at;
                if lot.holds(key, &conn) {
                    lot.poll(key);
                }
            }
            lot.expire(Instant::now());
        }
        let parked = self.inbox.lock().unwrap_or_else(PoisonError::into_inner).take();
        parked.into_iter().flatten().for_each(|(asleep, _)| asleep.close());
        lot.close_all();
        self.parking.woken.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }
}

/// A parked connection, with its idle deadline.
struct Spot<R> {
    conn: Shared,
    peer: Arc<Peer>,
    to: R,
    deadline: Instant,
}

/// A place in the lot: a parked connection, or the next free place.
enum Slot<R> {
    Free(u32),
    Taken(Spot<R>),
}

/// Places per chunk: chunks of a few KiB come from the allocator's small
/// pages, where one large array, grown by doubling, would take fresh
/// memory (with transparent huge pages, 2 MiB at a time) at each step.
const CHUNK: usize = 128;
/// The end of the free list.
const NONE: u32 = u32::MAX;
/// The least time between two sweeps for expired connections.
const SWEEP: Duration = Duration::from_millis(100);

/// The parked connections: a slab in chunks, swept for expired deadlines
/// when the earliest is due (at most once per [`SWEEP`], so an idle
/// timeout may close a parked connection up to that much late). A sweep
/// reads every place, a few nanoseconds each: far less than a timer per
/// connection, and no second structure to keep in step.
struct Lot<R> {
    chunks: Vec<Box<[Slot<R>; CHUNK]>>,
    free: u32,
    len: usize,
    /// The earliest deadline, or a time no later than it.
    due: Option<Instant>,
    stats: Arc<ProxyStats>,
}

impl<R: Resume> Lot<R> {
    fn new(stats: Arc<ProxyStats>) -> Self {
        Lot { chunks: Vec::new(), free: NONE, len: 0, due: None, stats }
    }

    fn slot(&self, key: u32) -> Option<&Slot<R>> {
        self.chunks.get(key as usize / CHUNK).map(|c| &c[key as usize % CHUNK])
    }

    fn slot_mut(&mut self, key: u32) -> Option<&mut Slot<R>> {
        self.chunks.get_mut(key as usize / CHUNK).map(|c| &mut c[key as usize % CHUNK])
    }

    fn insert(&mut self, asleep: Asleep, to: R) -> u32 {
        let Asleep { conn, peer, since } = asleep;
        let deadline = since + to.idle_timeout();
        if self.free == NONE {
            let first = u32::try_from(self.chunks.len() * CHUNK).unwrap_or(NONE);
            let next = |i: usize| if i + 1 < CHUNK { first + i as u32 + 1 } else { NONE };
            self.chunks.push(Box::new(std::array::from_fn(|i| Slot::Free(next(i)))));
            self.free = first;
        }
        let key = self.free;
        lock(&conn).parked_at = key;
        let spot = Slot::Taken(Spot { conn, peer, to, deadline });
        if let Some(slot) = self.slot_mut(key) {
            if let Slot::Free(next) = std::mem::replace(slot, spot) {
                self.free = next;
            }
        }
        self.len += 1;
        self.due = Some(self.due.map_or(deadline, |due| due.min(deadline)));
        self.stats.parked_connections.fetch_add(1, Relaxed);
        key
    }

    /// Whether `conn` is parked at `key`.
    fn holds(&self, key: u32, conn: &Shared) -> bool {
        matches!(self.slot(key), Some(Slot::Taken(s)) if Arc::ptr_eq(&s.conn, conn))
    }

    fn remove(&mut self, key: u32) -> Option<Spot<R>> {
        let free = self.free;
        let slot = self.slot_mut(key)?;
        if let Slot::Free(_) = slot {
            return None;
        }
        let Slot::Taken(spot) = std::mem::replace(slot, Slot::Free(free)) else { return None };
        self.free = key;
        self.len -= 1;
        self.stats.parked_connections.fetch_sub(1, Relaxed);
        if self.len == 0 {
            // All gone: give back the room too.
            self.chunks = Vec::new();
            (self.free, self.due) = (NONE, None);
        }
        Some(spot)
    }

    /// Read from the connection at `key`: serve it again if bytes came,
    /// close it at its end.
    fn poll(&mut self, key: u32) {
        let Some(Slot::Taken(spot)) = self.slot(key) else { return };
        let waker = Waker::from(spot.conn.clone());
        let got = lock(&spot.conn).poll_fill(&mut Context::from_waker(&waker));
        let Poll::Ready(got) = got else { return };
        let Some(Spot { conn, peer, to, .. }) = self.remove(key) else { return };
        match got {
            Ok(n) if n > 0 => to.resume(Asleep { conn, peer, since: Instant::now() }),
            _ => close(&conn),
        }
    }

    /// When the parker next sweeps.
    fn next_deadline(&self) -> Option<Instant> {
        self.due
    }

    /// Close the connections whose deadline is past, if one may be.
    fn expire(&mut self, now: Instant) {
        if self.due.is_none_or(|due| due > now) {
            return;
        }
        let mut due: Option<Instant> = None;
        for key in 0..u32::try_from(self.chunks.len() * CHUNK).unwrap_or(NONE) {
            let Some(Slot::Taken(spot)) = self.slot(key) else { continue };
            if spot.deadline <= now {
                if let Some(spot) = self.remove(key) {
                    close(&spot.conn);
                }
            } else {
                due = Some(due.map_or(spot.deadline, |d| d.min(spot.deadline)));
            }
        }
        self.due = due.map(|due| due.max(now + SWEEP));
    }

    fn close_all(&mut self) {
        for key in 0..u32::try_from(self.chunks.len() * CHUNK).unwrap_or(NONE) {
            if let Some(spot) = self.remove(key) {
                close(&spot.conn);
            }
        }
    }
}
