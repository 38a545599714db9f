//! Port names a person can write and read: `"switch 0 -> host 16"`,
//! `"host 3 -> switch 0"`, and on a leaf-spine fabric `"leaf 0 -> spine 1"`
//! (leaves and spines numbered from 0 each; `switch N` works there too,
//! leaves first, then spines).
//!
//! A port is the sending end of a directed link, so a name is the link's
//! two ends. Spaces are optional (`leaf0->spine1`). Where parallel links
//! join the same two ends (`topology.links` above 1) the name means the
//! first of them. Scenarios use these names to choose the ports whose queue
//! length is sampled over time (`monitor.queue_ports`).

use crate::topology::{End, Fabric, Shape};

/// How switches are called on a fabric of `shape`: leaf-spine fabrics have
/// leaves and spines; the others plain switches.
fn leaves(shape: &Shape) -> Option<u32> {
    match shape {
        Shape::LeafSpine { leaves, .. } => Some(*leaves),
        _ => None,
    }
}

fn end_name(end: End, leaves: Option<u32>) -> String {
    match (end, leaves) {
        (End::Host(h), _) => format!("host {h}"),
        (End::Switch(s), Some(l)) if s < l => format!("leaf {s}"),
        (End::Switch(s), Some(l)) => format!("spine {}", s - l),
        (End::Switch(s), None) => format!("switch {s}"),
    }
}

/// The name of `port` on `fabric` (built from `shape`).
pub fn name(fabric: &Fabric, shape: &Shape, port: u32) -> String {
    let p = &fabric.ports[port as usize];
    let l = leaves(shape);
    format!("{} -> {}", end_name(p.from, l), end_name(p.to, l))
}

/// One end as written: `host N`, `switch N`, `leaf N` or `spine N`.
fn parse_end(text: &str, shape: &Shape, fabric: &Fabric) -> Result<End, String> {
    let t = text.trim();
    let split = t.find(|c: char| c.is_ascii_digit()).ok_or_else(|| format!("{t:?} has no number"))?;
    let (kind, num) = (t[..split].trim(), t[split..].trim());
    let n: u32 = num.parse().map_err(|_| format!("{num:?} is not a number"))?;
    let check = |n: u32, count: u32, what: &str| {
        if n < count {
            Ok(n)
        } else {
            Err(format!("there is no {what} {n} (there are {count})"))
        }
    };
    match (kind, leaves(shape)) {
        ("host", _) => Ok(End::Host(check(n, fabric.hosts, "host")?)),
        ("switch", _) => Ok(End::Switch(check(n, fabric.switches, "switch")?)),
        ("leaf", Some(l)) => Ok(End::Switch(check(n, l, "leaf")?)),
        ("spine", Some(l)) => Ok(End::Switch(l + check(n, fabric.switches - l, "spine")?)),
        ("leaf" | "spine", None) => Err(format!("{kind:?}: only a leaf-spine fabric has leaves and spines")),
        _ => Err(format!("{kind:?} is not host, switch, leaf or spine")),
    }
}

/// The port a name means, or why there is none.
pub fn resolve(text: &str, fabric: &Fabric, shape: &Shape) -> Result<u32, String> {
    let (from, to) =
        text.split_once("->").ok_or_else(|| format!("{text:?}: write a port as \"switch 0 -> host 5\""))?;
    let (from, to) = (parse_end(from, shape, fabric)?, parse_end(to, shape, fabric)?);
    fabric
        .ports
        .iter()
        .position(|p| p.from == from && p.to == to)
        .map(|i| i as u32)
        .ok_or_else(|| format!("{text:?}: no link goes from {} to {}", end_name(from, None), end_name(to, None)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_on_a_leaf_spine_fabric() {
        let shape =
            Shape::LeafSpine { spines: 2, leaves: 3, hosts_per_leaf: 2, links: 1, host_gbps: 10.0, fabric_gbps: 10.0 };
        let f = Fabric::build(&shape, 1000);
        for port in 0..f.ports.len() as u32 {
            assert_eq!(resolve(&name(&f, &shape, port), &f, &shape), Ok(port));
        }
        let up = resolve("leaf0->spine1", &f, &shape).unwrap();
        assert_eq!((f.ports[up as usize].from, f.ports[up as usize].to), (End::Switch(0), End::Switch(4)));
        assert_eq!(resolve("switch 4 -> leaf 0", &f, &shape), resolve("spine 1 -> leaf 0", &f, &shape));
        assert_eq!(name(&f, &shape, f.host_port[5]), "host 5 -> leaf 2");
    }

    #[test]
    fn bad_names_say_what_is_wrong() {
        let shape = Shape::Star { hosts: 4, gbps: 10.0, extra_delay: vec![] };
        let f = Fabric::build(&shape, 1000);
        assert_eq!(name(&f, &shape, f.host_port[2]), "host 2 -> switch 0");
        assert!(resolve("switch 0 -> host 3", &f, &shape).is_ok());
        assert!(resolve("switch 0 -> host 4", &f, &shape).unwrap_err().contains("no host 4"));
        assert!(resolve("host 0 -> host 1", &f, &shape).unwrap_err().contains("no link"));
        assert!(resolve("leaf 0 -> host 1", &f, &shape).unwrap_err().contains("leaf-spine"));
        assert!(resolve("switch 0", &f, &shape).unwrap_err().contains("->"));
        assert!(resolve("router 0 -> host 1", &f, &shape).unwrap_err().contains("not host"));
    }
}
