//! DRILL (Ghorbani et al., "DRILL: micro load balancing for low-latency
//! data center networks", SIGCOMM 2017): every switch sends every packet to
//! the least-loaded of `d` output ports sampled from the group and the `m`
//! ports it remembered as least loaded for that destination the previous
//! time — DRILL(d, m), d = 2 and m = 1 by default as in the original.
//!
//! As the original's `Ipv4DrillRouting`: the remembered port is the first
//! candidate; `d` distinct ports drawn uniformly follow; a candidate
//! replaces the best so far only when strictly less loaded, so ties keep
//! the remembered port, then the earlier sample; the memory is kept per
//! (switch, destination host). Load is the port's backlog in packets (the
//! original counts bytes; with MSS-sized packets the order is the same).
//! This is not `fulcrum_balance`'s least-request power of d choices: that
//! rule has no memory and breaks ties at random, so it is not reused.

use fulcrum_balance::Rng;
use fulcrum_des::Streams;
use serde::{Deserialize, Serialize};

use super::{forced, Hooks, ParamError, Scheme, SchemeType, SwitchCtx, STREAM_ROUTING};
use crate::packet::Packet;
use crate::topology::Fabric;

/// DRILL(d, m) at every switch.
#[derive(Debug)]
pub struct Drill {
    d: u32,
    m: u32,
    /// `m` remembered ports per (switch, destination), `u32::MAX` for none.
    memory: Vec<u32>,
    rng: Rng,
    scratch: Vec<u32>,
}

/// DRILL's parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DrillParams {
    /// Output queues sampled per packet (2).
    pub d: u32,
    /// Least-loaded ports remembered per destination (1).
    pub memory: u32,
}

impl Default for DrillParams {
    fn default() -> Self {
        DrillParams { d: 2, memory: 1 }
    }
}

impl SchemeType for Drill {
    const NAME: &'static str = "drill";
    type Params = DrillParams;

    fn check(p: &DrillParams) -> Result<(), ParamError> {
        if !(1..=64).contains(&p.d) {
            return Err(ParamError::new("d", format!("sample 1 to 64 queues (found {})", p.d)));
        }
        if p.memory > 64 {
            return Err(ParamError::new("memory", format!("remember at most 64 ports (found {})", p.memory)));
        }
        Ok(())
    }

    fn build(p: &DrillParams, _: &Fabric, streams: &Streams) -> Box<dyn Scheme> {
        Box::new(Drill::new(p.d, p.memory, streams.stream(STREAM_ROUTING)))
    }
}

impl Drill {
    pub fn new(d: u32, m: u32, rng: Rng) -> Self {
        Drill { d, m, memory: Vec::new(), rng, scratch: Vec::new() }
    }
}

impl Scheme for Drill {
    fn name(&self) -> &'static str {
        "drill"
    }

    fn hooks(&self) -> Hooks {
        Hooks { edge: false, single_port_hops: false, src: false }
    }

    fn switch_port(&mut self, ctx: &SwitchCtx, pkt: &mut Packet) -> u32 {
        if let Some(port) = forced(ctx, pkt) {
            return port;
        }
        let g = ctx.group;
        let m = self.m as usize;
        let slot = (ctx.switch * ctx.fabric.hosts + ctx.dst) as usize * m;
        if self.memory.len() < slot + m {
            self.memory.resize(slot + m, u32::MAX);
        }
        // Candidates: the remembered ports still in the group, then d
        // distinct samples (a partial Fisher–Yates shuffle of the group).
        let cands = &mut self.scratch;
        cands.clear();
        cands.extend(self.memory[slot..slot + m].iter().copied().filter(|p| g.contains(p)));
        let remembered = cands.len();
        cands.extend_from_slice(g);
        let d = (self.d as usize).min(g.len());
        for i in 0..d {
            let j = i + self.rng.below((g.len() - i) as u64) as usize;
            cands.swap(remembered + i, remembered + j);
        }
        cands.truncate(remembered + d);
        // A sample that is also remembered counts once, as the remembered one.
        let mut kept = remembered;
        for i in remembered..cands.len() {
            if !cands[..remembered].contains(&cands[i]) {
                cands[kept] = cands[i];
                kept += 1;
            }
        }
        cands.truncate(kept);
        // Stable sort by load: ties keep the remembered port, then draw order.
        cands.sort_by_key(|&p| ctx.loads.queued(p));
        let best = cands[0];
        for (k, cell) in self.memory[slot..slot + m].iter_mut().enumerate() {
            *cell = cands.get(k).copied().unwrap_or(u32::MAX);
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn least_loaded_of_two_samples_and_the_remembered_port() {
        let f = fabric();
        // Leaf 0's uplinks are ports 64, 66, 68, 70.
        let mut queued = vec![0; 100];
        queued[64] = 5;
        queued[66] = 1;
        queued[68] = 9;
        queued[70] = 3;
        let loads = FixedLoads(queued);
        let ctx = at_leaf0(&f, &loads, 0);
        let mut drill = Drill::new(2, 1, Rng::new(1));
        let picks: Vec<u32> = (0..6).map(|s| drill.switch_port(&ctx, &mut data(0, s, 31))).collect();
        // Golden for seed 1: 64 (5 queued) beats the sample it is drawn
        // with and is remembered; once port 66 (the least loaded) is
        // sampled it is remembered and kept: nothing is strictly less loaded.
        assert_eq!(picks, [64, 64, 66, 66, 66, 66]);
        // d = 4 samples the whole group: always the least loaded.
        let mut all = Drill::new(4, 0, Rng::new(2));
        assert!((0..5).all(|s| all.switch_port(&ctx, &mut data(0, s, 31)) == 66));
    }

    #[test]
    fn a_remembered_port_that_fills_up_is_left() {
        let f = fabric();
        let mut queued = vec![0; 100];
        queued[66] = 50;
        let loads = FixedLoads(queued);
        let ctx = at_leaf0(&f, &loads, 0);
        let mut drill = Drill::new(2, 1, Rng::new(1));
        drill.memory = vec![u32::MAX; 8 * 32];
        drill.memory[31] = 66;
        assert_ne!(drill.switch_port(&ctx, &mut data(0, 0, 31)), 66);
    }
}
