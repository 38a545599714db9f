//! A scheduler on chosen ports only (`scheduler.ports`) and a discipline
//! per class (`scheduler.aqm`), on the mq scenario.

use std::path::Path;

use fulcrum_fabric::{Outcome, Scenario};

fn run(sets: &[&str]) -> Outcome {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/fabric/mq-ecnsharp.toml"));
    let mut all = vec!["end=\"300ms\"".to_string()];
    all.extend(sets.iter().map(|s| s.to_string()));
    fulcrum_fabric::run(&Scenario::load(path, &all).unwrap(), 1, None)
}

fn bottleneck_marks(o: &Outcome) -> u64 {
    o.queues.iter().find(|q| q.port == "to-host").unwrap().marks
}

#[test]
fn naming_the_only_loaded_port_changes_nothing() {
    // Data only crosses the port toward host 5; the others carry ACKs.
    let all = run(&[]);
    let one = run(&["scheduler.ports=[\"switch 0 -> host 5\"]"]);
    assert_eq!(all.flows, one.flows);
    assert_eq!(all.throughput, one.throughput);
    // The same discipline named per class is the default.
    let ecn = "{kind=\"ecn-sharp\", threshold=\"150us\", target=\"10us\", interval=\"200us\"}";
    let same = run(&[&format!("scheduler.aqm=[{ecn}, {ecn}, {ecn}]")]);
    assert_eq!(all.flows, same.flows);
}

#[test]
fn per_class_disciplines_and_unscheduled_ports_act() {
    assert!(bottleneck_marks(&run(&[])) > 0);
    let plain = run(&["scheduler.aqm=[{kind=\"drop-tail\"}, {kind=\"drop-tail\"}, {kind=\"drop-tail\"}]"]);
    assert_eq!(bottleneck_marks(&plain), 0, "drop-tail classes never mark");
    // Without the scheduler on the bottleneck its DWRR shares are gone: in
    // the three-flow phase (240–300 ms) flow 0 no longer gets twice flow 1.
    // (Unlimited sender NICs: with them seed 1 keeps the 2:1 share.)
    let nic = "buffers.host_packets=100000000";
    let all = run(&[nic]);
    let fifo = run(&[nic, "scheduler.ports=[\"switch 0 -> host 0\"]"]);
    let ratio = |o: &Outcome| {
        let s: Vec<&(u64, Vec<f64>)> = o.throughput.iter().filter(|(t, _)| *t >= 240_000_000).collect();
        let f0: f64 = s.iter().map(|(_, g)| g[0]).sum();
        let f1: f64 = s.iter().map(|(_, g)| g[1]).sum();
        f0 / f1
    };
    assert!((ratio(&all) - 2.0).abs() < 0.2, "DWRR 2:1 → {}", ratio(&all));
    assert!((ratio(&fifo) - 2.0).abs() > 0.3, "one FIFO → {}", ratio(&fifo));
}
