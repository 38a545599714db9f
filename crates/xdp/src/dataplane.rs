//! The control plane's handle on the data plane: loading the BPF object,
//! pinning its maps in bpffs, attaching it to interfaces, and reading and
//! writing services, backends and counters.
//!
//! [`Dataplane`] owns the maps. [`Dataplane::open_pinned`] finds them under a
//! pin directory (default [`DEFAULT_PIN_DIR`]), creating and pinning them on
//! first use, so each `fulcrum lb` command is a short-lived process and the
//! data plane, with its flows, outlives it. [`Loaded`] is the unpinned
//! variant the fixture tests and the cost benchmark run through
//! `BPF_PROG_TEST_RUN`. An attachment is a bpf_link pinned as
//! `link-<interface>`: removing the pin detaches the program.

use std::collections::HashSet;
use std::ffi::CString;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use aya::maps::{Array, HashMap, Map, MapData, MapError, PerCpuArray, PerCpuValues};
use aya::programs::links::FdLink;
use aya::programs::Xdp;
/// How the program attaches: native (driver), generic (skb) or let the kernel choose.
pub use aya::programs::XdpMode;
use aya::{Ebpf, EbpfLoader};

use crate::conntrack::{self, Entry, FlowKind, Slot, Timeouts};
use crate::maps::*;
use crate::spec::{Backend, Mode, Protocol, Select, ServiceKey, ServiceSpec};
use crate::Error;

/// Where `fulcrum lb` pins the data plane unless told otherwise.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/fulcrum";

/// The maps the program defines.
const MAP_NAMES: [&str; 14] = [
    "services",
    "services6",
    "backends6",
    "conntrack6",
    "ring",
    "backends",
    "conntrack",
    "ct_config",
    "flow_cache",
    "flow_cache6",
    "nexthops",
    "svc_stats",
    "backend_stats",
    "totals",
];

const PROGRAM: &str = "fulcrum_lb";

const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// An object file that `build.rs` compiled into `OUT_DIR`, embedded and
/// aligned for the ELF parser; without clang, [`Error::NotBuilt`].
macro_rules! embedded_object {
    ($name:ident, $file:literal) => {
        #[cfg(fulcrum_bpf)]
        fn $name() -> Result<&'static [u8], Error> {
            #[repr(C, align(32))]
            struct Aligned<B: ?Sized>(B);
            static OBJECT: &Aligned<[u8]> = &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/", $file)));
            Ok(&OBJECT.0)
        }

        #[cfg(not(fulcrum_bpf))]
        fn $name() -> Result<&'static [u8], Error> {
            Err(Error::NotBuilt)
        }
    };
}

// The program; its benchmark variant (`-DFULCRUM_BENCH`, `bpf/bench.h`); an
// empty program (XDP_PASS), the per-packet benchmark's floor.
embedded_object!(object, "lb.bpf.o");
embedded_object!(bench_object, "lb_bench.bpf.o");
embedded_object!(empty_object, "peer_pass.bpf.o");

/// `bpf/peer_pass.bpf.c` loaded (not attached): a program that returns
/// XDP_PASS and does nothing else, for measuring what `BPF_PROG_TEST_RUN`
/// itself costs per repetition.
pub struct EmptyProgram(Ebpf);

impl EmptyProgram {
    /// Load it.
    pub fn new() -> Result<Self, Error> {
        let mut ebpf =
            EbpfLoader::new().load(empty_object()?).map_err(|e| Error::load("loading peer_pass.bpf.o", e))?;
        let prog: &mut Xdp = ebpf
            .program_mut("peer_pass")
            .ok_or_else(|| Error::Missing("program peer_pass".into()))?
            .try_into()
            .map_err(|e| Error::program("program type", e))?;
        prog.load().map_err(|e| Error::program("loading peer_pass", e))?;
        Ok(EmptyProgram(ebpf))
    }

    /// Its file descriptor, for `BPF_PROG_TEST_RUN`.
    pub fn fd(&self) -> Result<BorrowedFd<'_>, Error> {
        let prog: &Xdp = self
            .0
            .program("peer_pass")
            .ok_or_else(|| Error::Missing("program peer_pass".into()))?
            .try_into()
            .map_err(|e| Error::program("program type", e))?;
        Ok(prog.fd().map_err(|e| Error::program("program fd", e))?.as_fd())
    }
}

/// True when this build carries the BPF program (clang was found).
pub fn built() -> bool {
    object().is_ok()
}

/// A service as the data plane holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceInfo {
    /// The service, backends in table order.
    pub spec: ServiceSpec,
    /// Its ring segment and counter index.
    pub id: u32,
    /// The backend slot of each of `spec.backends`.
    pub slots: Vec<u32>,
    /// Whether health checks found each of `spec.backends` down
    /// ([`Dataplane::set_down`]).
    pub down: Vec<bool>,
}

/// A service with its counters.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceStats {
    /// The service.
    pub info: ServiceInfo,
    /// Counters of the service.
    pub total: Counters,
    /// Counters of each backend, in `info.spec.backends` order.
    pub backends: Vec<Counters>,
}

/// What [`Dataplane::upsert`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    /// The service was new.
    pub created: bool,
    /// Backends added.
    pub added: usize,
    /// Backends removed.
    pub removed: usize,
}

/// What [`Dataplane::conntrack_gc`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sweep {
    /// Entries in the table when the sweep read it.
    pub examined: usize,
    /// Expired entries deleted.
    pub deleted: usize,
}

/// Entries of the conntrack map unless told otherwise (two per NAT flow).
pub const DEFAULT_CONNTRACK_ENTRIES: u32 = 2 * MAX_FLOWS;
/// Entries of the conntrack6 map unless told otherwise.
pub const DEFAULT_CONNTRACK6_ENTRIES: u32 = 2 * MAX_FLOWS6;

/// Size the conntrack maps: `entries` each, or their defaults.
fn size_conntrack(loader: &mut EbpfLoader<'_>, entries: Option<u32>) {
    loader.map_max_entries("conntrack", entries.unwrap_or(DEFAULT_CONNTRACK_ENTRIES));
    loader.map_max_entries("conntrack6", entries.unwrap_or(DEFAULT_CONNTRACK6_ENTRIES));
}

/// The program's maps.
pub struct Dataplane {
    services: HashMap<MapData, SvcKey, SvcValue>,
    services6: HashMap<MapData, SvcKey6, SvcValue>,
    backends6: Array<MapData, Addr6>,
    ring: Array<MapData, u32>,
    backends: Array<MapData, BackendEntry>,
    conntrack: HashMap<MapData, FlowKey, FlowEntry>,
    conntrack6: HashMap<MapData, FlowKey6, FlowEntry6>,
    ct_config: Array<MapData, CtConfig>,
    svc_stats: PerCpuArray<MapData, Counters>,
    backend_stats: PerCpuArray<MapData, Counters>,
    totals: PerCpuArray<MapData, u64>,
}

/// The program loaded without pins or attachment, with its maps.
pub struct Loaded {
    ebpf: Ebpf,
    /// The maps.
    pub dataplane: Dataplane,
}

/// What the benchmark variant's prologue does to each repetition of a
/// `BPF_PROG_TEST_RUN` call (`bpf/bench.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchMode {
    /// Nothing: the production program.
    Off = 0,
    /// Every repetition sees the frame the call was given.
    Restore = 1,
    /// As `Restore`, with a source address and port not used before: every
    /// repetition is a new flow.
    NewFlows = 2,
    /// As `Restore`, and the flow's entry in this CPU's flow cache is
    /// emptied: every repetition is a conntrack hit through the conntrack map.
    Uncached = 3,
}

impl Loaded {
    /// Load the program and create fresh maps.
    pub fn new() -> Result<Self, Error> {
        Self::load(object()?, None)
    }

    /// As [`Loaded::new`], with conntrack maps of `entries` entries each.
    pub fn with_conntrack_entries(entries: u32) -> Result<Self, Error> {
        Self::load(object()?, Some(entries))
    }

    /// Load the benchmark variant (`bpf/bench.h`), for `BPF_PROG_TEST_RUN`
    /// only; [`Loaded::bench_mode`] sets what its prologue does.
    pub fn bench() -> Result<Self, Error> {
        Self::load(bench_object()?, None)
    }

    /// Set the benchmark variant's prologue for the next call; `call` must
    /// differ from the previous call's.
    pub fn bench_mode(&mut self, mode: BenchMode, call: u32) -> Result<(), Error> {
        let map = self.ebpf.map_mut("bench_config").ok_or_else(|| Error::Missing("map bench_config".into()))?;
        let mut config: Array<&mut MapData, [u32; 2]> =
            Array::try_from(map).map_err(|e| Error::map("map bench_config", e))?;
        config.set(0, [mode as u32, call], 0).map_err(|e| Error::map("writing bench_config", e))
    }

    fn load(object: &[u8], conntrack_entries: Option<u32>) -> Result<Self, Error> {
        let mut loader = EbpfLoader::new();
        size_conntrack(&mut loader, conntrack_entries);
        let mut ebpf = loader.load(object).map_err(|e| Error::load("loading lb.bpf.o", e))?;
        program(&mut ebpf)?;
        let mut dataplane = Dataplane::from_maps(|name| {
            ebpf.take_map(name).ok_or_else(|| Error::Missing(format!("map {name} in lb.bpf.o")))
        })?;
        dataplane.set_timeouts(&Timeouts::default())?;
        Ok(Loaded { ebpf, dataplane })
    }

    /// The program's file descriptor, for `BPF_PROG_TEST_RUN`.
    pub fn program_fd(&self) -> Result<BorrowedFd<'_>, Error> {
        let prog: &Xdp = self
            .ebpf
            .program(PROGRAM)
            .ok_or_else(|| Error::Missing(format!("program {PROGRAM}")))?
            .try_into()
            .map_err(|e| Error::program("program type", e))?;
        Ok(prog.fd().map_err(|e| Error::program("program fd", e))?.as_fd())
    }
}

/// The XDP program of a loaded object, verified and loaded into the kernel.
fn program(ebpf: &mut Ebpf) -> Result<&mut Xdp, Error> {
    let prog: &mut Xdp = ebpf
        .program_mut(PROGRAM)
        .ok_or_else(|| Error::Missing(format!("program {PROGRAM}")))?
        .try_into()
        .map_err(|e| Error::program("program type", e))?;
    prog.load().map_err(|e| Error::program("verifying and loading fulcrum_lb", e))?;
    Ok(prog)
}

/// Mount bpffs at /sys/fs/bpf if `dir` lies there and it is not mounted,
/// then create `dir`.
fn prepare_pin_dir(dir: &Path) -> Result<(), Error> {
    let root = Path::new("/sys/fs/bpf");
    if dir.starts_with(root) && !is_bpffs(root) {
        let (src, target, fstype) = (c"bpf", c"/sys/fs/bpf", c"bpf");
        // SAFETY: NUL-terminated strings, no data argument.
        let rc = unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, std::ptr::null()) };
        if rc != 0 {
            return Err(Error::io("mounting bpffs on /sys/fs/bpf", std::io::Error::last_os_error()));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    if !is_bpffs(dir) {
        return Err(Error::Missing(format!("{} is not on a bpffs (mount -t bpf bpf DIR)", dir.display())));
    }
    Ok(())
}

fn is_bpffs(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: `st` is plain data the call fills in.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out pointer.
    unsafe { libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == BPF_FS_MAGIC }
}

/// Load the object with every map pinned under `dir` (created if missing,
/// with `conntrack_entries` entries in each conntrack map and the default
/// conntrack timeouts; reused if pinned already).
fn load_pinned(dir: &Path, conntrack_entries: Option<u32>) -> Result<Ebpf, Error> {
    prepare_pin_dir(dir)?;
    let fresh = !dir.join("ct_config").exists();
    let mut loader = EbpfLoader::new();
    size_conntrack(&mut loader, conntrack_entries);
    for name in MAP_NAMES {
        loader.map_pin_path(name, dir.join(name));
    }
    let mut ebpf = loader
        .load(object()?)
        .map_err(|e| Error::load(format!("loading lb.bpf.o with maps in {}", dir.display()), e))?;
    if fresh {
        let map = ebpf.map_mut("ct_config").ok_or_else(|| Error::Missing("map ct_config".into()))?;
        let mut config: Array<&mut MapData, CtConfig> =
            Array::try_from(map).map_err(|e| Error::map("map ct_config", e))?;
        config.set(0, Timeouts::default().to_config(), 0).map_err(|e| Error::map("writing ct_config", e))?;
    }
    Ok(ebpf)
}

fn link_path(dir: &Path, iface: &str) -> PathBuf {
    dir.join(format!("link-{iface}"))
}

/// Attach the program to `iface` in `mode` and pin the link; false when it
/// was attached already.
pub fn attach(dir: &Path, iface: &str, mode: XdpMode) -> Result<bool, Error> {
    let pin = link_path(dir, iface);
    if pin.exists() {
        return Ok(false);
    }
    let mut ebpf = load_pinned(dir, None)?;
    let prog = program(&mut ebpf)?;
    let id = prog.attach(iface, mode).map_err(|e| Error::program(format!("attaching to {iface}"), e))?;
    let link = prog.take_link(id).map_err(|e| Error::program("taking the link", e))?;
    let link = FdLink::try_from(link)
        .map_err(|e| Error::Missing(format!("a bpf_link for {iface} (kernel too old for XDP links?): {e}")))?;
    link.pin(&pin).map_err(|e| Error::io(format!("pinning {}", pin.display()), std::io::Error::other(e)))?;
    Ok(true)
}

/// Detach the program from `iface`; false when it was not attached.
pub fn detach(dir: &Path, iface: &str) -> Result<bool, Error> {
    let pin = link_path(dir, iface);
    match std::fs::remove_file(&pin) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(format!("removing {}", pin.display()), e)),
    }
}

/// The interfaces the program is attached to.
pub fn attached(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("link-").map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// Detach everywhere and remove every pin: the data plane and its flows go.
pub fn reset(dir: &Path) -> Result<(), Error> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(format!("removing {}", dir.display()), e)),
        _ => Ok(()),
    }
}

/// A service's key in the map of its address family.
#[derive(Clone, Copy)]
enum AnyKey {
    V4(SvcKey),
    V6(SvcKey6),
}

fn svc_key(key: &ServiceKey) -> AnyKey {
    let (port, proto) = (be_port(key.port), key.proto.number());
    match key.vip {
        IpAddr::V4(vip) => AnyKey::V4(SvcKey { vip: be_addr(vip), port, proto, pad: 0 }),
        IpAddr::V6(vip) => AnyKey::V6(SvcKey6 { vip: Addr6(vip.octets()), port, proto, pad: 0 }),
    }
}

fn not_found(e: &MapError) -> bool {
    matches!(e, MapError::KeyNotFound)
}

impl Dataplane {
    fn from_maps(mut take: impl FnMut(&str) -> Result<Map, Error>) -> Result<Self, Error> {
        fn typed<T: TryFrom<Map, Error = MapError>>(m: Map, name: &str) -> Result<T, Error> {
            T::try_from(m).map_err(|e| Error::map(format!("map {name}"), e))
        }
        Ok(Dataplane {
            services: typed(take("services")?, "services")?,
            services6: typed(take("services6")?, "services6")?,
            backends6: typed(take("backends6")?, "backends6")?,
            ring: typed(take("ring")?, "ring")?,
            backends: typed(take("backends")?, "backends")?,
            conntrack: typed(take("conntrack")?, "conntrack")?,
            conntrack6: typed(take("conntrack6")?, "conntrack6")?,
            ct_config: typed(take("ct_config")?, "ct_config")?,
            svc_stats: typed(take("svc_stats")?, "svc_stats")?,
            backend_stats: typed(take("backend_stats")?, "backend_stats")?,
            totals: typed(take("totals")?, "totals")?,
        })
    }

    /// The pinned maps under `dir`; with `create`, load and pin them first if
    /// they are not there (mounting bpffs if needed).
    pub fn open_pinned(dir: &Path, create: bool) -> Result<Self, Error> {
        if create && !dir.join("services").exists() {
            load_pinned(dir, None)?;
        }
        Self::open_existing(dir)
    }

    /// The pinned maps under `dir`, created and pinned first if they are not
    /// there, with conntrack maps (IPv4 and IPv6) of `conntrack_entries`
    /// entries each. When they are, the size must be theirs: it is fixed
    /// until `reset`.
    pub fn create_pinned(dir: &Path, conntrack_entries: u32) -> Result<Self, Error> {
        if !dir.join("services").exists() {
            load_pinned(dir, Some(conntrack_entries))?;
        }
        let dp = Self::open_existing(dir)?;
        for (name, size) in [("conntrack", dp.conntrack_capacity()?), ("conntrack6", dp.conntrack6_capacity()?)] {
            if size != conntrack_entries {
                return Err(Error::Spec(format!(
                    "the data plane in {} has a {name} map of {size} entries, not {conntrack_entries}: \
                     its size is set when it is created (`fulcrum lb reset` removes it, with its services)",
                    dir.display()
                )));
            }
        }
        Ok(dp)
    }

    fn open_existing(dir: &Path) -> Result<Self, Error> {
        if !dir.join("services").exists() {
            return Err(Error::NotCreated(dir.to_owned()));
        }
        if !dir.join("ct_config").exists() || !dir.join("services6").exists() {
            return Err(Error::Missing(format!(
                "map ct_config in {}: the data plane there was made by an older fulcrum (`fulcrum lb reset` \
                 removes it, with its services)",
                dir.display()
            )));
        }
        Dataplane::from_maps(|name| {
            let path = dir.join(name);
            let data = MapData::from_pin(&path).map_err(|e| Error::map(format!("opening {}", path.display()), e))?;
            Map::from_map_data(data).map_err(|e| Error::map(format!("map {name}"), e))
        })
    }

    /// Entries the conntrack map (IPv4) can hold.
    pub fn conntrack_capacity(&self) -> Result<u32, Error> {
        capacity(&self.conntrack, "conntrack")
    }

    /// Entries the conntrack6 map (IPv6) can hold.
    pub fn conntrack6_capacity(&self) -> Result<u32, Error> {
        capacity(&self.conntrack6, "conntrack6")
    }

    /// The conntrack timeouts the program applies.
    pub fn timeouts(&self) -> Result<Timeouts, Error> {
        let c = self.ct_config.get(&0, 0).map_err(|e| Error::map("reading ct_config", e))?;
        Ok(Timeouts::from_config(&c))
    }

    /// Change the conntrack timeouts; established flows follow at their next
    /// packet.
    pub fn set_timeouts(&mut self, t: &Timeouts) -> Result<(), Error> {
        self.ct_config.set(0, t.to_config(), 0).map_err(|e| Error::map("writing ct_config", e))
    }

    /// Every IPv4 conntrack entry, decoded now, ordered by direction and key.
    pub fn conntrack(&self) -> Result<Vec<Entry<FlowKey>>, Error> {
        let (slots, timeouts) = (self.slots()?, self.timeouts()?);
        Ok(sorted(decode(&self.conntrack, "conntrack", &slots, &timeouts)?))
    }

    /// Every IPv6 conntrack entry, decoded now, ordered by direction and key.
    pub fn conntrack6(&self) -> Result<Vec<Entry<FlowKey6>>, Error> {
        let (slots, timeouts) = (self.slots()?, self.timeouts()?);
        Ok(sorted(decode(&self.conntrack6, "conntrack6", &slots, &timeouts)?))
    }

    /// Delete the expired conntrack entries of both families
    /// ([`conntrack::sweep`] says which). Each table is read twice, and an
    /// entry that changed in between (had a packet) is kept.
    pub fn conntrack_gc(&mut self) -> Result<Sweep, Error> {
        let (slots, timeouts) = (self.slots()?, self.timeouts()?);
        let a = gc(&self.conntrack, "conntrack", &slots, &timeouts)?;
        let b = gc(&self.conntrack6, "conntrack6", &slots, &timeouts)?;
        Ok(Sweep { examined: a.examined + b.examined, deleted: a.deleted + b.deleted })
    }

    /// The backend slots in service, by slot, as conntrack entries name them.
    fn slots(&self) -> Result<Vec<Option<Slot>>, Error> {
        self.backend_entries()?
            .into_iter()
            .map(|(slot, e)| {
                if e.flags & BACKEND_ACTIVE == 0 {
                    return Ok(None);
                }
                let addr = SocketAddr::new(self.backend_ip(slot, &e)?, u16::from_be(e.port));
                Ok(Some(Slot { addr, gen: e.gen }))
            })
            .collect()
    }

    /// Create `spec`'s service, or change it: backends that stay keep their
    /// slot, so their established flows stay with them; flows of removed
    /// backends move (their conntrack entries no longer match the slot's
    /// generation).
    pub fn upsert(&mut self, spec: &ServiceSpec) -> Result<Change, Error> {
        spec.validate().map_err(|e| Error::Spec(e.0))?;
        let key = svc_key(&spec.key);
        let existing = self.service_get(&key)?;
        let id = match existing {
            Some(v) => v.id,
            None => self.free_service_id()?,
        };
        let current = if existing.is_some() { self.backends_of(id)? } else { Vec::new() };
        let port = be_port(spec.backend_port);
        // Backends that stay keep their health; new ones start healthy.
        let down: Vec<IpAddr> = current
            .iter()
            .filter(|(_, e)| e.flags & BACKEND_DOWN != 0 && e.port == port)
            .map(|&(slot, e)| self.backend_ip(slot, &e))
            .collect::<Result<_, _>>()?;
        let (backends, table) = crate::table::build_healthy(spec, &down).map_err(|e| Error::Spec(e.to_string()))?;
        let mut free = self.free_backend_slots()?.into_iter();
        let mut slots = Vec::with_capacity(backends.len());
        let mut added = 0;
        for b in &backends {
            let mut kept = None;
            for &(slot, e) in &current {
                if e.port == port && self.backend_ip(slot, &e)? == b.ip {
                    kept = Some((slot, e));
                }
            }
            let (slot, gen) = match kept {
                Some((slot, e)) => (slot, e.gen),
                None => {
                    let (slot, old) = free.next().ok_or_else(|| {
                        Error::Full(format!("no free backend slot (the data plane holds {MAX_BACKENDS})"))
                    })?;
                    self.zero_backend_stats(slot)?;
                    added += 1;
                    (slot, old.gen)
                }
            };
            let mut flags = if spec.mode == Mode::Dsr { BACKEND_ACTIVE | BACKEND_DSR } else { BACKEND_ACTIVE };
            if down.contains(&b.ip) {
                flags |= BACKEND_DOWN;
            }
            let ip = match b.ip {
                IpAddr::V4(ip) => be_addr(ip),
                IpAddr::V6(ip) => {
                    flags |= BACKEND_V6;
                    self.backends6.set(slot, Addr6(ip.octets()), 0).map_err(|e| Error::map("writing backends6", e))?;
                    0
                }
            };
            let entry = BackendEntry { ip, port, pad: 0, svc_id: id, weight: b.weight, gen, flags };
            self.backends.set(slot, entry, 0).map_err(|e| Error::map("writing backends", e))?;
            slots.push(slot);
        }
        self.write_ring(id, &table, &slots)?;
        if existing.is_none() {
            self.svc_stats.set(id, zeros()?, 0).map_err(|e| Error::map("resetting svc_stats", e))?;
        }
        let mut flags = 0;
        if spec.mode == Mode::Dsr {
            flags |= SVC_DSR;
        }
        if spec.hash == fulcrum_balance::HashFunction::Murmur3 {
            flags |= SVC_MURMUR3;
        }
        if spec.select == Select::Rendezvous {
            flags |= SVC_RENDEZVOUS;
        }
        let value = SvcValue { id, flags };
        match key {
            AnyKey::V4(k) => self.services.insert(k, value, 0),
            AnyKey::V6(k) => self.services6.insert(k, value, 0),
        }
        .map_err(|e| Error::map("writing services", e))?;
        // Only now that the ring no longer names them do the old ones go.
        let mut removed = 0;
        for (slot, entry) in current.into_iter().filter(|(s, _)| !slots.contains(s)) {
            self.free_backend(slot, entry)?;
            removed += 1;
        }
        Ok(Change { created: existing.is_none(), added, removed })
    }

    /// Mark backend `ip` of service `key` down (health checks failed) or up
    /// again; false when it was so already. A backend that is down owns no
    /// table entry, so new flows go to the others, while the flows it has
    /// keep it (their conntrack entries still match its slot); when every
    /// backend is down, all keep their entries ([`crate::table::build_healthy`]).
    pub fn set_down(&mut self, key: &ServiceKey, ip: IpAddr, down: bool) -> Result<bool, Error> {
        let info = self
            .services()?
            .into_iter()
            .find(|s| s.spec.key == *key)
            .ok_or_else(|| Error::Spec(format!("no service {key}")))?;
        let i = info
            .spec
            .backends
            .iter()
            .position(|b| b.ip == ip)
            .ok_or_else(|| Error::Spec(format!("{key} has no endpoint {ip}")))?;
        if info.down[i] == down {
            return Ok(false);
        }
        let slot = info.slots[i];
        let entry = self.backends.get(&slot, 0).map_err(|e| Error::map("reading backends", e))?;
        let flags = if down { entry.flags | BACKEND_DOWN } else { entry.flags & !BACKEND_DOWN };
        self.backends.set(slot, BackendEntry { flags, ..entry }, 0).map_err(|e| Error::map("writing backends", e))?;
        let mut is_down = info.down.clone();
        is_down[i] = down;
        let down_ips: Vec<IpAddr> =
            info.spec.backends.iter().zip(&is_down).filter(|(_, &d)| d).map(|(b, _)| b.ip).collect();
        let (sorted, table) =
            crate::table::build_healthy(&info.spec, &down_ips).map_err(|e| Error::Spec(e.to_string()))?;
        let slots: Vec<u32> = sorted
            .iter()
            .map(|b| info.slots[info.spec.backends.iter().position(|x| x.ip == b.ip).expect("the same backends")])
            .collect();
        self.write_ring(info.id, &table, &slots)?;
        Ok(true)
    }

    /// Point service `id`'s ring at `slots`, by table entry.
    fn write_ring(&mut self, id: u32, table: &[u32], slots: &[u32]) -> Result<(), Error> {
        let base = id * RING_SIZE as u32;
        for (i, &b) in table.iter().enumerate() {
            self.ring.set(base + i as u32, slots[b as usize], 0).map_err(|e| Error::map("writing the ring", e))?;
        }
        Ok(())
    }

    /// Remove a service; false when there was none.
    pub fn delete(&mut self, key: &ServiceKey) -> Result<bool, Error> {
        let k = svc_key(key);
        let Some(v) = self.service_get(&k)? else { return Ok(false) };
        match k {
            AnyKey::V4(k) => self.services.remove(&k),
            AnyKey::V6(k) => self.services6.remove(&k),
        }
        .map_err(|e| Error::map("removing the service", e))?;
        for (slot, entry) in self.backends_of(v.id)? {
            self.free_backend(slot, entry)?;
        }
        Ok(true)
    }

    /// Every service, ordered by VIP, port and protocol.
    pub fn services(&self) -> Result<Vec<ServiceInfo>, Error> {
        let mut out = Vec::new();
        let mut keys = Vec::new();
        for item in self.services.iter() {
            let (k, v) = item.map_err(|e| Error::map("reading services", e))?;
            keys.push((IpAddr::V4(addr_of(k.vip)), k.port, k.proto, v));
        }
        for item in self.services6.iter() {
            let (k, v) = item.map_err(|e| Error::map("reading services6", e))?;
            keys.push((IpAddr::V6(Ipv6Addr::from(k.vip.0)), k.port, k.proto, v));
        }
        for (vip, port, proto, v) in keys {
            let backends = self.backends_of(v.id)?;
            let proto = Protocol::from_number(proto).ok_or_else(|| Error::Missing("a known protocol".into()))?;
            let key = ServiceKey { vip, port: u16::from_be(port), proto };
            let mut eps = Vec::with_capacity(backends.len());
            for (slot, e) in &backends {
                eps.push(Backend { ip: self.backend_ip(*slot, e)?, weight: e.weight });
            }
            out.push(ServiceInfo {
                spec: ServiceSpec {
                    key,
                    backend_port: backends.first().map_or(key.port, |(_, e)| u16::from_be(e.port)),
                    backends: eps,
                    mode: if v.flags & SVC_DSR != 0 { Mode::Dsr } else { Mode::Nat },
                    select: if v.flags & SVC_RENDEZVOUS != 0 { Select::Rendezvous } else { Select::Maglev },
                    hash: if v.flags & SVC_MURMUR3 != 0 {
                        fulcrum_balance::HashFunction::Murmur3
                    } else {
                        fulcrum_balance::HashFunction::Xxhash
                    },
                },
                id: v.id,
                slots: backends.iter().map(|(s, _)| *s).collect(),
                down: backends.iter().map(|(_, e)| e.flags & BACKEND_DOWN != 0).collect(),
            });
        }
        out.sort_by_key(|s| s.spec.key);
        Ok(out)
    }

    /// Every service with its counters, summed over CPUs.
    pub fn stats(&self) -> Result<Vec<ServiceStats>, Error> {
        let read = |map: &PerCpuArray<MapData, Counters>, i: u32| {
            map.get(&i, 0).map(|v| Counters::sum(v.iter())).map_err(|e| Error::map("reading counters", e))
        };
        self.services()?
            .into_iter()
            .map(|info| {
                let total = read(&self.svc_stats, info.id)?;
                let backends = info.slots.iter().map(|&s| read(&self.backend_stats, s)).collect::<Result<_, _>>()?;
                Ok(ServiceStats { info, total, backends })
            })
            .collect()
    }

    /// The data plane's own counters ([`TOTALS`] names them), summed over CPUs.
    pub fn totals(&self) -> Result<Vec<(&'static str, u64)>, Error> {
        TOTALS
            .iter()
            .enumerate()
            .map(|(i, &name)| {
                let v = self.totals.get(&(i as u32), 0).map_err(|e| Error::map("reading totals", e))?;
                Ok((name, v.iter().sum()))
            })
            .collect()
    }

    fn service_get(&self, key: &AnyKey) -> Result<Option<SvcValue>, Error> {
        let got = match key {
            AnyKey::V4(k) => self.services.get(k, 0),
            AnyKey::V6(k) => self.services6.get(k, 0),
        };
        match got {
            Ok(v) => Ok(Some(v)),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(Error::map("reading services", e)),
        }
    }

    /// The address of the backend in `slot`.
    fn backend_ip(&self, slot: u32, e: &BackendEntry) -> Result<IpAddr, Error> {
        if e.flags & BACKEND_V6 == 0 {
            return Ok(IpAddr::V4(addr_of(e.ip)));
        }
        let a = self.backends6.get(&slot, 0).map_err(|e| Error::map("reading backends6", e))?;
        Ok(IpAddr::V6(Ipv6Addr::from(a.0)))
    }

    fn backends_of(&self, id: u32) -> Result<Vec<(u32, BackendEntry)>, Error> {
        Ok(self
            .backend_entries()?
            .into_iter()
            .filter(|(_, e)| e.flags & BACKEND_ACTIVE != 0 && e.svc_id == id)
            .collect())
    }

    fn free_backend_slots(&self) -> Result<Vec<(u32, BackendEntry)>, Error> {
        Ok(self.backend_entries()?.into_iter().filter(|(_, e)| e.flags & BACKEND_ACTIVE == 0).collect())
    }

    fn backend_entries(&self) -> Result<Vec<(u32, BackendEntry)>, Error> {
        (0..MAX_BACKENDS)
            .map(|i| self.backends.get(&i, 0).map(|e| (i, e)).map_err(|e| Error::map("reading backends", e)))
            .collect()
    }

    fn free_backend(&mut self, slot: u32, entry: BackendEntry) -> Result<(), Error> {
        let freed = BackendEntry { flags: 0, gen: entry.gen.wrapping_add(1), ..entry };
        self.backends.set(slot, freed, 0).map_err(|e| Error::map("freeing a backend", e))
    }

    fn free_service_id(&self) -> Result<u32, Error> {
        let mut used = HashSet::new();
        for item in self.services.iter() {
            used.insert(item.map_err(|e| Error::map("reading services", e))?.1.id);
        }
        for item in self.services6.iter() {
            used.insert(item.map_err(|e| Error::map("reading services6", e))?.1.id);
        }
        (0..MAX_SERVICES)
            .find(|id| !used.contains(id))
            .ok_or_else(|| Error::Full(format!("no free service (the data plane holds {MAX_SERVICES})")))
    }

    fn zero_backend_stats(&mut self, slot: u32) -> Result<(), Error> {
        self.backend_stats.set(slot, zeros()?, 0).map_err(|e| Error::map("resetting backend_stats", e))
    }
}

fn capacity<K: FlowKind>(map: &HashMap<MapData, K, K::Value>, name: &str) -> Result<u32, Error> {
    use aya::maps::IterableMap;
    Ok(map.map().info().map_err(|e| Error::map(format!("reading {name}'s size"), e))?.max_entries())
}

/// Every entry of a conntrack map as it holds it, read in batches.
fn raw<K: FlowKind>(map: &HashMap<MapData, K, K::Value>, name: &str) -> Result<Vec<(K, K::Value)>, Error> {
    use aya::maps::IterableMap;
    crate::batch::lookup_all(map.map().fd().as_fd(), 8192).map_err(|e| Error::io(format!("reading {name}"), e))
}

fn decode<K: FlowKind>(
    map: &HashMap<MapData, K, K::Value>,
    name: &str,
    slots: &[Option<Slot>],
    t: &Timeouts,
) -> Result<Vec<Entry<K>>, Error> {
    let now = conntrack::now_ns();
    Ok(raw(map, name)?.into_iter().map(|(k, v)| Entry::decode(k, v, slots, now, t)).collect())
}

fn sorted<K: FlowKind>(mut entries: Vec<Entry<K>>) -> Vec<Entry<K>> {
    entries.sort_by_key(|e| (e.direction == conntrack::Direction::Reply, e.src, e.dst, e.proto_number));
    entries
}

/// Delete a conntrack map's expired entries that have not changed since
/// they were read.
fn gc<K: FlowKind>(
    map: &HashMap<MapData, K, K::Value>,
    name: &str,
    slots: &[Option<Slot>],
    t: &Timeouts,
) -> Result<Sweep, Error> {
    use aya::maps::IterableMap;
    let entries = decode(map, name, slots, t)?;
    let doomed = conntrack::sweep(&entries);
    if doomed.is_empty() {
        return Ok(Sweep { examined: entries.len(), deleted: 0 });
    }
    let mut again = raw(map, name)?;
    again.sort_unstable_by_key(|(k, _)| *k);
    let unchanged = |e: &Entry<K>| again.binary_search_by_key(&e.key, |(k, _)| *k).is_ok_and(|i| again[i].1 == e.value);
    let keys: Vec<K> = doomed.into_iter().filter(|e| unchanged(e)).map(|e| e.key).collect();
    let deleted = crate::batch::delete(map.map().fd().as_fd(), &keys)
        .map_err(|e| Error::io(format!("deleting from {name}"), e))?;
    Ok(Sweep { examined: entries.len(), deleted })
}

fn zeros() -> Result<PerCpuValues<Counters>, Error> {
    let cpus = aya::util::nr_cpus().map_err(|(what, e)| Error::io(what, e))?;
    PerCpuValues::try_from(vec![Counters::default(); cpus]).map_err(|e| Error::io("per-CPU values", e))
}
