//! Queue length over time of the ports a scenario names
//! (`monitor.queue_ports`): one sample per `monitor.interval`, in the JSON
//! report, its own CSV file and the per-port `queues` entries.

use std::path::Path;

use fulcrum_fabric::report::Report;
use fulcrum_fabric::Scenario;

fn scenario() -> Scenario {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/fabric/mq-ecnsharp.toml"));
    let sets = [
        "end=\"50ms\"".to_string(),
        "monitor.interval=\"100us\"".to_string(),
        "monitor.queue_ports=[\"switch 0 -> host 5\", \"host 0 -> switch 0\"]".to_string(),
    ];
    Scenario::load(path, &sets).unwrap()
}

#[test]
fn named_ports_are_sampled_every_interval() {
    let s = scenario();
    let o = fulcrum_fabric::run(&s, 1, None);
    assert_eq!(o.queue_series.len(), 2);
    let bottleneck = &o.queue_series[0];
    assert_eq!(bottleneck.port, "switch 0 -> host 5");
    assert_eq!(bottleneck.interval_ns, 100_000);
    // Samples at 0, 0.1 ms, …, 50 ms.
    assert_eq!(bottleneck.packets.len(), 501);
    // The lone long flow fills the bottleneck's queue in slow start; the
    // queue of a sender's NIC (drop-tail, no discipline) stays in its own
    // entry.
    assert!(bottleneck.packets.iter().any(|&p| p > 0));
    let entry = o.queues.iter().find(|q| q.port == "switch 0 -> host 5").expect("an entry of its own");
    let mean = bottleneck.packets.iter().map(|&p| p as f64).sum::<f64>() / 501.0;
    assert!((entry.mean_packets - mean).abs() < 1e-9);
    assert_eq!(entry.max_packets, *bottleneck.packets.iter().max().unwrap());
    assert!(entry.marks > 0, "ECN# marks the lone flow's queue");
    assert_eq!(o.queues.iter().filter(|q| q.port == "host 0 -> switch 0").count(), 1);
}

#[test]
fn series_reach_the_json_and_the_csv() {
    let s = scenario();
    let outcomes = fulcrum_fabric::run_many(&s, 1, 2, 1, None).unwrap();
    let report = Report { provenance: None, scenario: &s.name, sets: &[], outcomes: &outcomes, wall_seconds: 0.0 };
    let json: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
    let series = &json["queue_series"];
    assert_eq!(series[0]["port"], "switch 0 -> host 5");
    assert_eq!(series[0]["interval_us"], 100.0);
    assert_eq!(series[1]["packets"].as_array().unwrap().len(), 501);
    // Two runs: each sample is the mean of the two.
    let k = (0..501).find(|&k| outcomes[0].queue_series[0].packets[k] > 0).unwrap();
    let both = (outcomes[0].queue_series[0].packets[k] + outcomes[1].queue_series[0].packets[k]) as f64 / 2.0;
    assert_eq!(series[0]["packets"][k].as_f64().unwrap(), both);
    let dir = std::env::temp_dir().join(format!("fulcrum-fabric-series-{}", std::process::id()));
    report.write_csv(&dir).unwrap();
    let csv = std::fs::read_to_string(dir.join("queue_series.csv")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(csv.starts_with("seed,port,t_ns,packets\n1,switch 0 -> host 5,0,"), "{}", &csv[..80]);
    assert_eq!(csv.lines().count(), 1 + 2 * 2 * 501);
}

#[test]
fn without_named_ports_nothing_changes() {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/fabric/mq-ecnsharp.toml"));
    let s = Scenario::load(path, &["end=\"20ms\"".to_string()]).unwrap();
    let o = fulcrum_fabric::run(&s, 1, None);
    assert!(o.queue_series.is_empty());
    assert_eq!(o.queues.iter().map(|q| q.port.as_str()).collect::<Vec<_>>(), ["host-nic", "to-host"]);
    let report = Report {
        provenance: None,
        scenario: &s.name,
        sets: &[],
        outcomes: std::slice::from_ref(&o),
        wall_seconds: 0.0,
    };
    assert!(!report.json().contains("queue_series"));
}

#[test]
fn the_plot_has_a_queue_panel_and_a_throughput_panel() {
    let s = scenario();
    let outcomes = fulcrum_fabric::run_many(&s, 1, 1, 1, None).unwrap();
    let report = Report { provenance: None, scenario: &s.name, sets: &[], outcomes: &outcomes, wall_seconds: 0.0 };
    let svg = report.plot_svg();
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    assert!(svg.contains("height=\"1500\""), "three panels of 500 px");
    assert!(svg.contains("queue length, sampled every 100 µs") && svg.contains("switch 0 -&gt; host 5"));
    assert!(svg.contains("long flows' throughput over each interval"));
    assert!(svg.contains("long flow 0") && svg.contains("throughput (Gb/s)"));
    assert!(svg.matches("<polyline").count() >= 6, "one bucket, two ports, three flows");
}
