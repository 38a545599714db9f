//! Load balancing inside the fabric: the routing hook every scheme plugs
//! into, and the schemes themselves, one file each.
//!
//! The comparison follows the Hermes paper (Zhang et al., "Resilient
//! datacenter load balancing in the wild", SIGCOMM 2017) and its simulator
//! (github.com/snowzjx/ns3-ecn-sharp, experiment program in
//! snowzjx/ns3-load-balance `examples/load-balance/`), which places each
//! scheme at one of two decision points:
//!
//! - **Edge schemes** (Presto, DRB, CLOVE, FlowBender, Hermes) decide at the
//!   sending host: [`Scheme::edge_path`] returns a *path* that the packet
//!   carries ([`Packet::path`], as the original's source-routing tag). A
//!   switch follows a carried path: path `p` takes member `p mod n` of each
//!   `n`-port equal-cost group on the way. In a leaf-spine fabric with `S`
//!   spines and `L` parallel links per leaf–spine pair the paths between
//!   two racks are `0 .. S·L`: path `s·L + l` climbs through uplink `l` to
//!   spine `s` and comes down its parallel link `l`
//!   ([`EdgeCtx::paths`] gives the count; within a rack there is one).
//! - **Switch schemes** (ECMP, LetFlow, DRILL, CONGA) decide at each switch
//!   for packets without a path: [`Scheme::switch_port`] picks one port of
//!   the equal-cost group toward the packet's destination, seeing the time,
//!   the packet (mutable, so a scheme can stamp its own fields, e.g. CONGA's
//!   congestion extent and feedback in [`Packet::lb`]), where it came from,
//!   and every port's backlog ([`Loads`]). It is called at every switch a
//!   packet crosses, also where the group has one port (a CONGA destination
//!   leaf reads the packet there), so per-packet switch state (DRE meters)
//!   lives in the scheme.
//!
//! A scheme says which of these calls it needs ([`Scheme::hooks`]; all by
//! default), so that per-flow ECMP costs what it did before the hook.
//! Adding a scheme, here or in another crate: a type implementing
//! [`Scheme`], and a [`SchemeType`] giving its name, its parameters (read
//! from `[routing]` with serde, checked by [`SchemeType::check`]) and its
//! constructor, added with [`register`] (the built-ins are listed in
//! [`BUILT_IN`]); a scheme that counts its decisions returns the counts
//! from [`Scheme::stats`] (a variant of [`SchemeStats`]), which the run's
//! outcome and its JSON report carry.
//!
//! Feedback reaches edge schemes through [`Scheme::on_ack`] (an ACK arrives
//! at the sender: ECN echo, the RTT sample `now − echo` and the path the
//! acknowledged segment took, [`Packet::echo_path`], which the receiver
//! copies from the data segment, and the data's one-way delay in
//! [`Packet::lb`], which the receiver writes) and [`Scheme::on_timeout`] (a flow's
//! retransmission timer fired). A scheme is one object per run owning the
//! state of every host and switch; randomness comes from its own seeded
//! stream ([`fulcrum_des::Streams`] stream [`STREAM_ROUTING`]; per-flow
//! hashing uses the run's salt, [`SwitchCtx::salt`]), so a scenario
//! and a seed give the same decisions. Schemes know nothing of the event
//! loop: their tests feed fixed contexts and check the choices.
//!
//! Per-packet schemes (DRB, Presto, DRILL) reorder a flow's packets; the
//! receiver's resequencing buffer ([`crate::reseq`]) can hide that from TCP.
//! Link failures ([`crate::faults`]) act below the schemes: once a failure
//! is detected the group a switch scheme sees lacks the dead port, and a
//! carried path whose member is dead is moved to a live one
//! ([`follow`]). Before detection every scheme keeps using the dead link.

pub mod clove;
pub mod conga;
pub mod drb;
pub mod drill;
mod ecmp;
pub mod flowbender;
pub mod hermes;
pub mod letflow;

pub use drb::RoundRobinPaths;
pub use drill::Drill;
pub use ecmp::Ecmp;
pub use letflow::LetFlow;

pub use clove::CloveScheme;
pub use conga::CongaScheme;
pub use flowbender::FlowBenderScheme;
pub use hermes::HermesScheme;

use std::fmt;

use fulcrum_config::registry::{Extends, Factory, Kind, Registry, Typed};
pub use fulcrum_config::registry::{NameTaken, ParamError, Params};
use fulcrum_des::Streams;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::packet::{Nanos, Packet, NO_PATH};
use crate::topology::Fabric;

/// RNG stream of the routing scheme (stream 0 draws the workload, 1 the
/// ECMP salt, 3 the faults).
pub const STREAM_ROUTING: u64 = 2;

/// Backlog of every output port, as a switch scheme may read it.
pub trait Loads {
    /// Packets waiting at `port` (discipline and device queue).
    fn queued(&self, port: u32) -> u32;
}

/// The decision points a scheme is called at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hooks {
    /// [`Scheme::edge_path`] for every packet a host sends.
    pub edge: bool,
    /// [`Scheme::switch_port`] also where the group has one port (needed
    /// by schemes that read or stamp packets at every switch, e.g. CONGA).
    pub single_port_hops: bool,
    /// [`SwitchCtx::src`] filled in: the sending host is looked up in the
    /// packet's flow record, a cache miss on every hop with a choice; a
    /// scheme that never reads it says false and gets [`NO_HOST`] there.
    pub src: bool,
}

/// [`SwitchCtx::src`] of a scheme that does not read it ([`Hooks::src`]).
pub const NO_HOST: u32 = u32::MAX;

/// What a switch scheme sees when it forwards one packet.
pub struct SwitchCtx<'a> {
    pub now: Nanos,
    pub switch: u32,
    /// Port the packet arrived on (its sending end's index).
    pub in_port: u32,
    /// Sending and receiving host of the packet ([`NO_HOST`] as `src` for
    /// a scheme whose [`Hooks::src`] is false).
    pub src: u32,
    pub dst: u32,
    /// The packet goes from the flow's receiver back to its sender.
    pub reverse: bool,
    /// Equal-cost output ports toward `dst` still in the routes (at least one).
    pub group: &'a [u32],
    pub fabric: &'a Fabric,
    pub loads: &'a dyn Loads,
    /// The run's ECMP hashing seed (drawn from its own stream).
    pub salt: u64,
}

/// What an edge scheme sees when a host sends a packet.
pub struct EdgeCtx<'a> {
    pub now: Nanos,
    /// The sending host and the host the packet goes to.
    pub host: u32,
    pub peer: u32,
    /// The packet goes from the flow's receiver back to its sender.
    pub reverse: bool,
    /// Number of paths between the two hosts (1 within a rack).
    pub paths: u32,
    pub fabric: &'a Fabric,
}

/// A load-balancing scheme; see the module documentation for the model.
pub trait Scheme: Send {
    /// Name as written in a scenario.
    fn name(&self) -> &'static str;

    /// Which decision points the scheme needs (both by default). Switch
    /// schemes that only choose among several ports say so, and the
    /// world then skips the calls it does not need (ECMP's runs cost
    /// what they did before the hook).
    fn hooks(&self) -> Hooks {
        Hooks { edge: true, single_port_hops: true, src: true }
    }

    /// Path for `pkt`, which `ctx.host` is about to send; `None` leaves the
    /// choice to the switches. Edge schemes override this.
    fn edge_path(&mut self, _ctx: &EdgeCtx, _pkt: &Packet) -> Option<u16> {
        None
    }

    /// Output port (a member of `ctx.group`) for `pkt` at `ctx.switch`.
    /// The default follows a carried path and hashes the rest per flow
    /// (ECMP); switch schemes override it.
    fn switch_port(&mut self, ctx: &SwitchCtx, pkt: &mut Packet) -> u32 {
        if pkt.path != NO_PATH {
            return follow(ctx, pkt.path);
        }
        ecmp::hash_port(ctx, pkt)
    }

    /// An ACK (`ack.ece`, `ack.echo`, `ack.echo_path`) reached the sender
    /// `host` of flow `ack.flow`.
    fn on_ack(&mut self, _now: Nanos, _host: u32, _ack: &Packet) {}

    /// Flow `flow`'s retransmission timer fired at its sender `host`;
    /// `fresh`: it re-sends a SYN or starts a loss episode (not a backoff
    /// inside one).
    fn on_timeout(&mut self, _now: Nanos, _host: u32, _flow: u32, _fresh: bool) {}

    /// Period of the probes the scheme's hosts send (Hermes); `None`: none.
    fn probe_interval(&self) -> Option<Nanos> {
        None
    }

    /// The probes to send at `now`, appended to `out`.
    fn probes(&mut self, _now: Nanos, _out: &mut Vec<Probe>) {}

    /// The reply to `reply.probe` reached its prober at `now`.
    fn on_probe_reply(&mut self, _now: Nanos, _reply: &ProbeReply) {}

    /// What the scheme counted during the run (its decisions), for the
    /// run's outcome ([`crate::Outcome::routing_stats`]); `None` for a
    /// scheme that counts nothing.
    fn stats(&self) -> Option<SchemeStats> {
        None
    }
}

/// The counters of the schemes that keep some, as [`Scheme::stats`]
/// returns them. In the JSON report, `"routing_stats": {"hermes": {…}}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SchemeStats {
    Hermes(hermes::Stats),
}

/// A probe a host sends on a path it chose (Hermes's path sensing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub from: u32,
    pub to: u32,
    pub path: u16,
}

/// What the reply to a probe tells its prober.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeReply {
    pub probe: Probe,
    /// The probe's one-way delay (sent → received).
    pub delay: Nanos,
    /// The probe arrived with CE.
    pub ce: bool,
}

/// The member of the group a carried path takes: `path mod n` of the full
/// group toward the destination; if failure detection has removed that
/// port, `path mod m` of the `m` live ones.
pub fn follow(ctx: &SwitchCtx, path: u16) -> u32 {
    let full = ctx.fabric.group(ctx.switch, ctx.dst);
    let port = full[path as usize % full.len()];
    if ctx.group.len() == full.len() || ctx.group.contains(&port) {
        port
    } else {
        ctx.group[path as usize % ctx.group.len()]
    }
}

/// The port when a switch scheme has no choice to make: the packet follows
/// the path an edge scheme chose, or the group has one port.
pub fn forced(ctx: &SwitchCtx, pkt: &Packet) -> Option<u32> {
    if pkt.path != NO_PATH {
        return Some(follow(ctx, pkt.path));
    }
    (ctx.group.len() == 1).then(|| ctx.group[0])
}

/// A scheme that can be named in a scenario's `[routing]` table.
pub trait SchemeType: 'static {
    /// The name, as `scheme = "…"`.
    const NAME: &'static str;
    /// The other keys of `[routing]`; `Default` gives a table with
    /// `scheme` alone. Reject unknown fields (`#[serde(deny_unknown_fields)]`).
    type Params: Serialize + DeserializeOwned + Default + Clone + PartialEq + fmt::Debug + Send + Sync + 'static;

    /// Check the parameters (the first bad one, named by its key).
    fn check(_params: &Self::Params) -> Result<(), ParamError> {
        Ok(())
    }

    /// The scheme for one run over `fabric`; its randomness comes from
    /// `streams` (stream [`STREAM_ROUTING`]).
    fn build(params: &Self::Params, fabric: &Fabric, streams: &Streams) -> Box<dyn Scheme>;
}

/// The kind of the schemes: a [`SchemeType`] configured by `[routing]`
/// builds a [`Scheme`] for a fabric and the run's streams.
pub struct Routing;

impl Kind for Routing {
    type Output = Box<dyn Scheme>;
    type Context<'a> = (&'a Fabric, &'a Streams);
    const KEY: &'static str = "scheme";
    const WHAT: &'static str = "scheme";

    fn registry() -> &'static Registry<dyn Factory<Routing>> {
        &SCHEMES
    }

    /// Per-flow ECMP, the scheme of a scenario without `[routing]`.
    fn default_config() -> Config {
        Config::with_defaults(BUILT_IN[0]).unwrap_or_else(|| unreachable!("every scheme has default parameters"))
    }
}

impl<S: SchemeType> Extends<S> for Routing {
    const NAME: &'static str = S::NAME;
    type Params = S::Params;

    fn default_params() -> Option<S::Params> {
        Some(S::Params::default())
    }

    fn check(params: &S::Params) -> Result<(), ParamError> {
        S::check(params)
    }

    fn build(params: &S::Params, (fabric, streams): (&Fabric, &Streams)) -> Box<dyn Scheme> {
        S::build(params, fabric, streams)
    }
}

/// The built-in schemes.
pub const BUILT_IN: [&dyn Factory<Routing>; 9] = [
    &Typed::<Routing, Ecmp>::NEW,
    &Typed::<Routing, drb::Drb>::NEW,
    &Typed::<Routing, drb::Presto>::NEW,
    &Typed::<Routing, LetFlow>::NEW,
    &Typed::<Routing, Drill>::NEW,
    &Typed::<Routing, CongaScheme>::NEW,
    &Typed::<Routing, CloveScheme>::NEW,
    &Typed::<Routing, FlowBenderScheme>::NEW,
    &Typed::<Routing, HermesScheme>::NEW,
];

static SCHEMES: Registry<dyn Factory<Routing>> = Registry::new(&BUILT_IN);

/// Add `S` to the schemes a scenario can name.
pub fn register<S: SchemeType>() -> Result<(), NameTaken> {
    Typed::<Routing, S>::register()
}

/// Every scheme: the built-ins, then the registered ones.
pub fn schemes() -> Vec<&'static dyn Factory<Routing>> {
    SCHEMES.all()
}

/// A scheme and its parameters, as a scenario's `[routing]` gives them
/// (`scheme` and the scheme's keys).
pub type Config = fulcrum_config::registry::Config<Routing>;

/// The most paths between two hosts of `fabric` (the size of a per-host
/// path table).
pub fn max_paths(fabric: &Fabric) -> usize {
    let first_of = |r: u32| fabric.rack.iter().position(|&x| x == r).unwrap_or(0) as u32;
    let racks = fabric.racks().max(1);
    (0..racks * racks).map(|i| fabric.paths(first_of(i / racks), first_of(i % racks))).max().unwrap_or(1) as usize
}

/// Build the scheme of `cfg` for `fabric`, with the run's `streams`.
pub fn build(cfg: &Config, fabric: &Fabric, streams: &Streams) -> Box<dyn Scheme> {
    cfg.build((fabric, streams))
}

#[cfg(test)]
pub(crate) mod testing {
    //! Fixed contexts for the schemes' golden tests.
    use super::*;
    use crate::packet::Kind;
    use crate::topology::Shape;

    /// Backlogs given as a list indexed by port.
    pub struct FixedLoads(pub Vec<u32>);

    impl Loads for FixedLoads {
        fn queued(&self, port: u32) -> u32 {
            self.0.get(port as usize).copied().unwrap_or(0)
        }
    }

    /// The seed's 4 × 4 × 8 leaf-spine.
    pub fn fabric() -> Fabric {
        let shape =
            Shape::LeafSpine { spines: 4, leaves: 4, hosts_per_leaf: 8, links: 1, host_gbps: 10.0, fabric_gbps: 10.0 };
        Fabric::build(&shape, 10_000)
    }

    pub fn data(flow: u32, seq: u32, dst: u32) -> Packet {
        let mut p = Packet::new(flow, Kind::Data, seq, dst, 1454, 0);
        p.set_ect(true);
        p
    }

    /// Host 0's leaf (switch 0) forwarding toward host 31 (leaf 3).
    pub fn at_leaf0<'a>(f: &'a Fabric, loads: &'a dyn Loads, now: Nanos) -> SwitchCtx<'a> {
        SwitchCtx {
            now,
            switch: 0,
            in_port: f.host_port[0],
            src: 0,
            dst: 31,
            reverse: false,
            group: f.group(0, 31),
            fabric: f,
            loads,
            salt: 7,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn a_carried_path_is_followed_and_moved_off_a_dead_port() {
        let f = fabric();
        let loads = FixedLoads(vec![]);
        let mut ctx = at_leaf0(&f, &loads, 0);
        let full = f.group(0, 31).to_vec();
        assert_eq!(full.len(), 4);
        for p in 0..8u16 {
            assert_eq!(follow(&ctx, p), full[p as usize % 4]);
        }
        // Port of path 1 detected dead: the live group is the other three.
        let live = [full[0], full[2], full[3]];
        ctx.group = &live;
        assert_eq!(follow(&ctx, 2), full[2], "live paths keep their port");
        assert_eq!(follow(&ctx, 1), live[1], "path 1 moves to live member 1 mod 3");
    }

    #[test]
    fn every_config_builds_its_scheme() {
        let f = fabric();
        let streams = Streams::new(1);
        let names: Vec<&str> =
            schemes().iter().map(|s| build(&Config::with_defaults(*s).unwrap(), &f, &streams).name()).collect();
        assert_eq!(names, ["ecmp", "drb", "presto", "letflow", "drill", "conga", "clove", "flowbender", "hermes"]);
        assert_eq!(max_paths(&f), 4);
    }
}
