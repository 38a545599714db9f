//! Queue rules that drop (`examples/fabric/codel-drop.toml`): four NewReno
//! senders without ECN overload one 10 Gb/s port whose queue holds 1000
//! packets. CoDel in drop mode, and PIE, keep the queueing delay near
//! their 20 µs target where tail-drop lets it grow to the buffer's size;
//! their drops are counted with the queue's and retransmitted, so the port
//! stays busy.

use std::path::Path;

use fulcrum_fabric::report::Report;
use fulcrum_fabric::{Outcome, Scenario};

const PORT: &str = "switch 0 -> host 4";
/// Time to send one full-sized packet (1500 wire bytes) at 10 Gb/s, in µs.
const PACKET_US: f64 = 1.2;

fn scenario(aqm: &str) -> Scenario {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/fabric/codel-drop.toml"));
    let sets: Vec<String> = (!aqm.is_empty()).then(|| format!("aqm={aqm}")).into_iter().collect();
    Scenario::load(path, &sets).unwrap()
}

/// The port's mean queueing delay over the second half of the run (µs,
/// from its sampled length), its drops, and the senders' mean throughput
/// over that half (Gb/s).
fn figures(o: &Outcome) -> (f64, u64, f64) {
    let series = &o.queue_series.iter().find(|s| s.port == PORT).expect("the port is watched").packets;
    let half = &series[series.len() / 2..];
    let delay = half.iter().map(|&p| f64::from(p)).sum::<f64>() / half.len() as f64 * PACKET_US;
    let drops = o.queues.iter().find(|q| q.port == PORT).expect("the port's figures").drops;
    let late: Vec<f64> = o.throughput.iter().skip(o.throughput.len() / 2).map(|(_, g)| g.iter().sum()).collect();
    (delay, drops, late.iter().sum::<f64>() / late.len() as f64)
}

#[test]
fn codel_and_pie_keep_the_delay_near_target_where_tail_drop_does_not() {
    let tail = fulcrum_fabric::run(&scenario("{kind=\"drop-tail\"}"), 1, None);
    let codel = fulcrum_fabric::run(&scenario(""), 1, None);
    let pie = "{kind=\"pie\", target=\"20us\", update_interval=\"30us\", alpha=100, beta=1000, max_burst=\"0s\"}";
    let pie = fulcrum_fabric::run(&scenario(pie), 1, None);
    let [tail, codel, pie] = [&tail, &codel, &pie].map(figures);
    eprintln!("(delay µs, drops, Gb/s): tail-drop {tail:?}, codel {codel:?}, pie {pie:?}");
    // Tail-drop: a standing queue of hundreds of packets.
    assert!(tail.0 > 300.0, "tail-drop's delay {:.1} µs", tail.0);
    for (name, (delay, drops, gbps)) in [("codel", codel), ("pie", pie)] {
        assert!(delay < 40.0, "{name}: mean delay {delay:.1} µs, target 20");
        assert!(drops > 20, "{name} dropped {drops} packets");
        assert!(gbps > 0.95 * tail.2, "{name}: {gbps:.2} Gb/s against tail-drop's {:.2}", tail.2);
    }
}

#[test]
fn a_random_rule_gives_the_same_bytes_for_the_same_seed() {
    let s =
        scenario("{kind=\"pie\", target=\"20us\", update_interval=\"30us\", alpha=100, beta=1000, max_burst=\"0s\"}");
    let json = |seed| {
        let outcomes = fulcrum_fabric::run_many(&s, seed, 1, 1, None).unwrap();
        Report { provenance: None, scenario: &s.name, sets: &[], outcomes: &outcomes, wall_seconds: 0.0 }.json()
    };
    assert_eq!(json(3), json(3));
    // Only PIE's draws depend on the seed here (long flows, one path).
    let (a, b) = (fulcrum_fabric::run(&s, 3, None), fulcrum_fabric::run(&s, 4, None));
    assert_ne!(a.queues, b.queues, "another seed, other draws");
}
