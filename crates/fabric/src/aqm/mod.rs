//! Active queue management: the marking rule of a queue discipline, and the
//! registry that names the rules a scenario's `[aqm]` table can choose.
//!
//! A discipline ([`crate::qdisc::Qdisc`]) is a bounded FIFO that drops at
//! its tail; its rule ([`Aqm`], one object per queue, owning that queue's
//! state) gives each packet a [`Verdict`]: pass it, mark it with
//! Congestion Experienced, or drop it. The rule is asked when a packet
//! arrives ([`Aqm::on_arrival`], with the backlog it finds) and when one
//! leaves ([`Aqm::on_departure`], with its sojourn time and the backlog it
//! leaves behind), and is told when a dequeue finds the queue empty
//! ([`Aqm::on_empty`]). Only ECN-capable packets are marked (first
//! transmissions; not handshakes, pure ACKs or retransmissions): a mark
//! for another packet lets it pass, and a packet already carrying CE is
//! not counted again at departure. A dropped packet counts in the queue's
//! drops, as a full queue's do; one dropped at departure is followed at
//! once by the next packet's departure, and the sender retransmits it as
//! any lost packet.
//!
//! Most packets find their discipline empty and go straight through it
//! ([`crate::qdisc::Qdisc::pass`]). [`Aqm::quiet`] lets the discipline skip
//! the rule for them, and [`Aqm::hooks`] the calls a rule does not need;
//! both default to the safe answer (every call, never quiet).
//!
//! Adding a rule, here or in another crate: a type implementing [`Aqm`],
//! and an [`AqmType`] giving its name (`kind` in `[aqm]`), its parameters
//! (the other keys, read with serde and checked by [`AqmType::check`]) and
//! its constructor, added with [`register`]. The built-ins ([`BUILT_IN`])
//! are drop-tail, RED with DCTCP's threshold K, TCN and ECN#
//! ([`threshold`]), following the ns3-ecn-sharp simulator
//! (snowzjx/ns3-ecn-sharp, `src/traffic-control/model/`) that the seed
//! experiments use, CoDel ([`crate::codel`]) and PIE ([`pie`]).

pub mod ecn_sharp;
pub mod pie;
pub mod threshold;

use std::fmt;

use fulcrum_balance::Empty;
use fulcrum_config::registry::{Extends, Factory, Kind, Registry, Typed};
pub use fulcrum_config::registry::{NameTaken, ParamError, Params};
pub use fulcrum_des::Rng;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use ecn_sharp::EcnSharp;
pub use pie::Pie;
pub use threshold::{DropTail, Red, Tcn};

use crate::codel::CoDelRule;
use crate::packet::Nanos;

/// A packet arriving at a discipline that has room for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    pub now: Nanos,
    /// Packets already queued (the arrival not counted).
    pub queued: u32,
    /// Their wire bytes.
    pub bytes: u64,
    /// The arriving packet is ECN-capable.
    pub ect: bool,
}

/// What a rule does with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing.
    Pass,
    /// Set Congestion Experienced if the packet is ECN-capable (else pass).
    Mark,
    /// Drop the packet.
    Drop,
}

impl Verdict {
    /// [`Verdict::Mark`] if `mark`, else [`Verdict::Pass`].
    #[inline]
    pub fn mark_if(mark: bool) -> Verdict {
        if mark {
            Verdict::Mark
        } else {
            Verdict::Pass
        }
    }
}

/// The calls a rule needs ([`Aqm::hooks`]; all by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AqmHooks {
    /// [`Aqm::on_arrival`] for every packet admitted.
    pub arrival: bool,
    /// [`Aqm::on_empty`] when a dequeue finds the queue empty.
    pub empty: bool,
    /// [`Aqm::quiet`] is asked again after every departure (its answer
    /// moves with the rule's state); false: asked once, when built.
    pub requiet: bool,
}

/// The rule of one queue; see the module documentation.
pub trait Aqm: Send + fmt::Debug {
    /// Name as written in a scenario.
    fn name(&self) -> &'static str;

    /// Which calls the rule needs.
    fn hooks(&self) -> AqmHooks {
        AqmHooks { arrival: true, empty: true, requiet: true }
    }

    /// What becomes of a packet arriving to a queue with room for it.
    fn on_arrival(&mut self, _a: &Arrival) -> Verdict {
        Verdict::Pass
    }

    /// What becomes of a packet leaving at `now` (a mark counts only if it
    /// is not marked already): it spent `sojourn` in the queue and leaves
    /// `queued` packets of `bytes` wire bytes behind it; `ect`: it is
    /// ECN-capable. (Values, not a struct: this call is on every packet's
    /// path.)
    fn on_departure(&mut self, _now: Nanos, _sojourn: Nanos, _queued: u32, _bytes: u64, _ect: bool) -> Verdict {
        Verdict::Pass
    }

    /// A dequeue found the queue empty.
    fn on_empty(&mut self) {}

    /// Whether a packet passing the empty queue now (an arrival finding
    /// nothing queued, its departure with a sojourn of zero leaving
    /// nothing, then possibly an empty dequeue) would pass and leave the
    /// rule's state as it is, so that the calls can be skipped.
    fn quiet(&self) -> bool {
        false
    }
}

/// A rule that can be named in a scenario's `[aqm]` table.
pub trait AqmType: 'static {
    /// The name, as `kind = "…"`.
    const NAME: &'static str;
    /// The other keys of the table. Reject unknown fields
    /// (`#[serde(deny_unknown_fields)]`).
    type Params: Serialize + DeserializeOwned + Clone + PartialEq + fmt::Debug + Send + Sync + 'static;

    /// Check the parameters (the first bad one, named by its key).
    fn check(_params: &Self::Params) -> Result<(), ParamError> {
        Ok(())
    }

    /// The rule of one queue (each queue gets its own, and its own random
    /// stream `rng`, fixed by the run's seed and the queue).
    fn build(params: &Self::Params, rng: Rng) -> Box<dyn Aqm>;
}

/// The kind of the rules: an [`AqmType`] configured by an `[aqm]` table
/// builds one queue's [`Aqm`] from the queue's random stream.
pub struct Marking;

impl Kind for Marking {
    type Output = Box<dyn Aqm>;
    type Context<'a> = Rng;
    const KEY: &'static str = "kind";
    const WHAT: &'static str = "queue discipline";

    fn registry() -> &'static Registry<dyn Factory<Marking>> {
        &RULES
    }

    /// Drop-tail, the rule of queues that do not mark.
    fn default_config() -> Config {
        Config::new::<DropTail>(Empty {}).unwrap_or_else(|_| unreachable!("drop-tail has nothing to check"))
    }
}

impl<A: AqmType> Extends<A> for Marking {
    const NAME: &'static str = A::NAME;
    type Params = A::Params;

    fn check(params: &A::Params) -> Result<(), ParamError> {
        A::check(params)
    }

    fn build(params: &A::Params, rng: Rng) -> Box<dyn Aqm> {
        A::build(params, rng)
    }
}

/// The built-in rules.
pub const BUILT_IN: [&dyn Factory<Marking>; 6] = [
    &Typed::<Marking, DropTail>::NEW,
    &Typed::<Marking, Red>::NEW,
    &Typed::<Marking, Tcn>::NEW,
    &Typed::<Marking, EcnSharp>::NEW,
    &Typed::<Marking, CoDelRule>::NEW,
    &Typed::<Marking, Pie>::NEW,
];

static RULES: Registry<dyn Factory<Marking>> = Registry::new(&BUILT_IN);

/// Add `A` to the rules a scenario can name.
pub fn register<A: AqmType>() -> Result<(), NameTaken> {
    Typed::<Marking, A>::register()
}

/// Every rule: the built-ins, then the registered ones.
pub fn rules() -> Vec<&'static dyn Factory<Marking>> {
    RULES.all()
}

/// A rule and its parameters, as an `[aqm]` table gives them (`kind` and
/// the rule's keys); [`Config::build`] makes a new queue's rule from its
/// random stream.
pub type Config = fulcrum_config::registry::Config<Marking>;

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        text.parse().unwrap()
    }

    #[test]
    fn every_built_in_is_named_and_built() {
        let names: Vec<&str> = rules().iter().map(|r| r.name()).take(BUILT_IN.len()).collect();
        assert_eq!(names, ["drop-tail", "red", "tcn", "ecn-sharp", "codel", "pie"]);
        let tables = [
            "kind = \"drop-tail\"",
            "kind = \"red\"\nk = 3",
            "kind = \"tcn\"\nthreshold = \"30us\"",
            "kind = \"ecn-sharp\"\nthreshold = \"30us\"\ntarget = \"10us\"\ninterval = \"100us\"",
            "kind = \"codel\"\ntarget = \"10us\"\ninterval = \"100us\"",
            "kind = \"pie\"\ntarget = \"20us\"\nupdate_interval = \"30us\"",
        ];
        for (name, text) in names.iter().zip(tables) {
            let cfg = Config::from_table(table(text)).unwrap();
            assert_eq!(cfg.name(), *name);
            assert_eq!(cfg.build(Rng::new(1)).name(), *name);
            assert_eq!(cfg.clone(), cfg);
        }
        assert_eq!(Config::default().name(), "drop-tail");
    }

    #[test]
    fn errors_name_the_key() {
        let err = Config::from_table(table("kind = \"red\"\nkk = 3")).unwrap_err();
        assert_eq!(err.field, "kk");
        assert!(err.message.starts_with("red: unknown field `kk`"), "{}", err.message);
        let err = Config::from_table(table("kind = \"fq-codel\"")).unwrap_err();
        assert_eq!(err.field, "kind");
        assert!(err.message.contains("drop-tail, red, tcn, ecn-sharp, codel, pie"), "{}", err.message);
        // A bad value is named by its key, found where serde quotes it.
        let err = Config::from_table(table("kind = \"tcn\"\nthreshold = \"3 parsecs\"")).unwrap_err();
        assert_eq!(err.field, "threshold", "{}", err.message);
        let err = Config::from_table(table("kind = \"red\"\nk = \"many\"")).unwrap_err();
        assert_eq!(err.field, "k", "{}", err.message);
        let err = Config::from_table(table("kind = \"codel\"\nmode = \"sometimes\"")).unwrap_err();
        assert_eq!(err.field, "mode", "{}", err.message);
        assert!(err.message.contains("expected one of `mark`, `ecn`, `drop`"), "{}", err.message);
        let err = Config::from_table(table("threshold = \"3us\"")).unwrap_err();
        assert_eq!((err.field.as_str(), err.message.as_str()), ("kind", "missing: name a queue discipline"));
    }

    #[test]
    fn a_rule_from_outside_registers_once() {
        #[derive(Debug)]
        struct Never;
        impl Aqm for Never {
            fn name(&self) -> &'static str {
                "never-marks"
            }
        }
        impl AqmType for Never {
            const NAME: &'static str = "never-marks";
            type Params = Empty;
            fn build(_: &Empty, _: Rng) -> Box<dyn Aqm> {
                Box::new(Never)
            }
        }
        register::<Never>().unwrap();
        assert!(register::<Never>().is_err());
        let rule = Config::from_table(table("kind = \"never-marks\"")).unwrap().build(Rng::new(1));
        assert_eq!(rule.name(), "never-marks");
    }
}
