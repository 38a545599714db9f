//! `fulcrum lb health`: active health checks of the L4 data plane's
//! backends, until stopped.
//!
//! Every round (each `--interval`) probes every backend of every service in
//! the data plane at once, with the proxy's probe (a TCP connect, or an
//! HTTP GET whose status must fall in a range) and feeds the verdicts to
//! one [`ClusterHealth`] per service, the health state machine the proxy
//! uses: `--fall` failures in a row make a backend down, `--rise` passes in
//! a row make it up again. A backend that goes down is marked so in the
//! data plane ([`Dataplane::set_down`]): it owns no table entry any more,
//! so new flows avoid it, while its established flows keep it. When every
//! backend of a VIP is down, the node withdraws the VIP's BGP announcement
//! (the `refresh` it is given), and announces it again when one is back.
//! Services created, changed or deleted meanwhile are followed from one
//! round to the next.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use fulcrum_balance::{Endpoint, EndpointId, Nanos};
use fulcrum_proxy::config::{HealthCheck, HealthCheckKind};
use fulcrum_resilience::{CheckThresholds, ClusterHealth, HealthConfig};
use fulcrum_xdp::dataplane::{Dataplane, ServiceInfo};
use fulcrum_xdp::spec::ServiceKey;

use crate::cli::Failure;

/// Options of `fulcrum lb health`.
#[derive(Debug, ClapArgs)]
pub struct HealthArgs {
    /// The check: tcp (a connect) or http (a GET of --path whose status
    /// must be in --expected-status).
    #[arg(long, default_value = "tcp")]
    kind: String,
    /// Path of the HTTP check.
    #[arg(long, default_value = "/healthz")]
    path: String,
    /// Statuses an HTTP check accepts: LOW-HIGH.
    #[arg(long, default_value = "200-399")]
    expected_status: String,
    /// Time between rounds of checks.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// A check that takes longer fails.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Passing checks in a row that bring a backend back (the proxy's
    /// healthy_threshold).
    #[arg(long, default_value_t = 2)]
    rise: u32,
    /// Failing checks in a row that take a backend down (the proxy's
    /// unhealthy_threshold).
    #[arg(long, default_value_t = 3)]
    fall: u32,
    /// Also delete expired conntrack entries every round (what
    /// `fulcrum lb conntrack --gc` does).
    #[arg(long)]
    gc: bool,
}

impl HealthArgs {
    /// The proxy's health check these options describe.
    fn check(&self) -> Result<HealthCheck, Failure> {
        let kind = match self.kind.as_str() {
            "tcp" => HealthCheckKind::Tcp,
            "http" => HealthCheckKind::Http,
            k => return Err(Failure::input(format!("unknown check {k:?} (tcp or http)"))),
        };
        let status = self
            .expected_status
            .split_once('-')
            .and_then(|(lo, hi)| Some([lo.trim().parse::<u16>().ok()?, hi.trim().parse::<u16>().ok()?]))
            .filter(|[lo, hi]| (100..=599).contains(lo) && lo <= hi && *hi <= 599)
            .ok_or_else(|| {
                Failure::input(format!("--expected-status {:?}: give LOW-HIGH, e.g. 200-399", self.expected_status))
            })?;
        if !self.path.starts_with('/') {
            return Err(Failure::input(format!("--path {:?} must start with /", self.path)));
        }
        if self.interval.is_zero() || self.timeout.is_zero() {
            return Err(Failure::input("--interval and --timeout must be above zero"));
        }
        if self.rise == 0 || self.fall == 0 {
            return Err(Failure::input("--rise and --fall must be at least 1"));
        }
        Ok(HealthCheck {
            kind,
            path: self.path.clone(),
            expected_status: status,
            interval: self.interval,
            jitter: Duration::ZERO,
            timeout: self.timeout,
            healthy_threshold: self.rise,
            unhealthy_threshold: self.fall,
        })
    }
}

/// A backend's identity for the state machine: its address and port (an
/// IPv6 one hashed, with the top bit set so that it is never an IPv4 one's).
fn endpoint_id(ip: IpAddr, port: u16) -> EndpointId {
    match ip {
        IpAddr::V4(ip) => EndpointId(u64::from(u32::from(ip)) << 16 | u64::from(port)),
        IpAddr::V6(ip) => {
            let name = SocketAddr::new(ip.into(), port).to_string();
            EndpointId(fulcrum_balance::HashFunction::Xxhash.hash(name.as_bytes()) | 1 << 63)
        }
    }
}

/// The endpoints of a service, as its state machine knows them.
fn endpoints(s: &ServiceInfo) -> Vec<Endpoint> {
    let port = s.spec.backend_port;
    s.spec
        .backends
        .iter()
        .map(|b| Endpoint { id: endpoint_id(b.ip, port), weight: 1.0, name: SocketAddr::new(b.ip, port).to_string() })
        .collect()
}

/// One service's state machine, made to agree with what the data plane
/// says at the start: backends it has down start down.
fn state_of(s: &ServiceInfo, thresholds: CheckThresholds, now: Nanos) -> Result<ClusterHealth, Failure> {
    let config = HealthConfig {
        outlier_detection: None,
        slow_start: None,
        health_check: Some(thresholds),
        panic_threshold: 0.0,
    };
    let mut state = ClusterHealth::new(config, &endpoints(s), now).map_err(Failure::runtime)?;
    for (e, _) in endpoints(s).iter().zip(&s.down).filter(|(_, &down)| down) {
        for _ in 0..thresholds.unhealthy {
            state.record_check(e.id, false, now);
        }
    }
    Ok(state)
}

/// Run the checks until stopped; `refresh` re-announces the VIPs that
/// qualify after a backend changed state.
pub fn run(dir: &Path, a: HealthArgs, refresh: impl Fn() -> Result<(), Failure>) -> Result<(), Failure> {
    let check = a.check()?;
    let thresholds = CheckThresholds { healthy: a.rise, unhealthy: a.fall };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("starting the checks: {e}")))?;
    let start = Instant::now();
    let mut states: HashMap<ServiceKey, ClusterHealth> = HashMap::new();
    let mut dp = Dataplane::open_pinned(dir, false).map_err(crate::lb::failure)?;
    let mut first = true;
    loop {
        let round = Instant::now();
        let services = dp.services().map_err(crate::lb::failure)?;
        let targets: Vec<(usize, usize, SocketAddr)> = services
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                let port = s.spec.backend_port;
                s.spec.backends.iter().enumerate().map(move |(j, b)| (i, j, SocketAddr::from((b.ip, port))))
            })
            .collect();
        if first {
            println!(
                "checking {} endpoints of {} services every {} ({}, fall {}, rise {})",
                targets.len(),
                services.len(),
                humantime::format_duration(a.interval),
                a.kind,
                a.fall,
                a.rise
            );
        }
        let passed: Vec<bool> = runtime.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for (k, &(_, _, addr)) in targets.iter().enumerate() {
                let check = check.clone();
                set.spawn(async move { (k, fulcrum_proxy::health::probe(&check, addr).await) });
            }
            let mut passed = vec![false; targets.len()];
            while let Some(done) = set.join_next().await {
                if let Ok((k, ok)) = done {
                    passed[k] = ok;
                }
            }
            passed
        });
        let now = start.elapsed().as_nanos() as Nanos;
        let mut changed = false;
        for (&(i, j, addr), &ok) in targets.iter().zip(&passed) {
            let s = &services[i];
            let state = match states.entry(s.spec.key) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(state_of(s, thresholds, now)?),
            };
            if j == 0 {
                state.set_members(&endpoints(s), now);
            }
            let ip = s.spec.backends[j].ip;
            let Some(healthy) = state.record_check(endpoint_id(ip, addr.port()), ok, now) else { continue };
            if dp.set_down(&s.spec.key, ip, !healthy).map_err(crate::lb::failure)? {
                changed = true;
                let (what, n, verdict) = if healthy { ("passed", a.rise, "up") } else { ("failed", a.fall, "down") };
                println!("{addr} of {}: {verdict} after {n} {what} checks", s.spec.key);
            }
        }
        states.retain(|k, _| services.iter().any(|s| s.spec.key == *k));
        // The first round announces what qualifies now, whatever the
        // node announced before.
        if changed || first {
            refresh()?;
            first = false;
        }
        if a.gc {
            dp.conntrack_gc().map_err(crate::lb::failure)?;
        }
        std::thread::sleep(a.interval.saturating_sub(round.elapsed()));
        // A data plane reset and created again meanwhile has other maps.
        if !dir.join("services").exists() {
            return Err(Failure::runtime(format!("the data plane in {} is gone", dir.display())));
        }
        dp = Dataplane::open_pinned(dir, false).map_err(crate::lb::failure)?;
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        health: HealthArgs,
    }

    fn check(args: &[&str]) -> Result<HealthCheck, Failure> {
        let mut all = vec!["health"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).unwrap().health.check()
    }

    #[test]
    fn options_make_the_proxys_check() {
        let c = check(&["--kind=http", "--path=/ready", "--expected-status=200-204", "--fall=2"]).unwrap();
        assert_eq!((c.kind, c.path.as_str(), c.expected_status), (HealthCheckKind::Http, "/ready", [200, 204]));
        assert_eq!((c.healthy_threshold, c.unhealthy_threshold), (2, 2));
        let d = check(&[]).unwrap();
        assert_eq!(
            (d.kind, d.interval, d.timeout),
            (HealthCheckKind::Tcp, Duration::from_secs(5), Duration::from_secs(1))
        );
        for bad in [
            &["--kind=icmp"][..],
            &["--expected-status=399-200"],
            &["--expected-status=ok"],
            &["--path=healthz"],
            &["--fall=0"],
            &["--interval=0s"],
        ] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_state_machine_starts_where_the_data_plane_is() {
        use fulcrum_xdp::spec::{parse_endpoints, Mode, Protocol, Select, ServiceSpec};
        let spec = ServiceSpec {
            key: ServiceKey { vip: Ipv4Addr::new(10, 0, 1, 1).into(), port: 80, proto: Protocol::Tcp },
            backend_port: 8080,
            backends: parse_endpoints("10.0.0.1,10.0.0.2").unwrap(),
            mode: Mode::Nat,
            select: Select::Maglev,
            hash: fulcrum_balance::HashFunction::Xxhash,
        };
        let info = ServiceInfo { spec, id: 0, slots: vec![0, 1], down: vec![false, true] };
        let t = CheckThresholds { healthy: 2, unhealthy: 3 };
        let mut state = state_of(&info, t, 0).unwrap();
        let (up, down) = (
            endpoint_id(Ipv4Addr::new(10, 0, 0, 1).into(), 8080),
            endpoint_id(Ipv4Addr::new(10, 0, 0, 2).into(), 8080),
        );
        assert!(state.is_healthy(up) && !state.is_healthy(down));
        // Rise: two passes bring the down one back; fall: three failures.
        assert_eq!(state.record_check(down, true, 1), None);
        assert_eq!(state.record_check(down, true, 2), Some(true));
        assert_eq!(state.record_check(up, false, 3), None);
        assert_eq!(state.record_check(up, false, 4), None);
        assert_eq!(state.record_check(up, false, 5), Some(false));
    }
}
