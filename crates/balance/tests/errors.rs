//! Errors, not panics: bad input is rejected at build time and says which
//! value is wrong; an empty endpoint set picks nothing.

mod common;

use common::endpoints;
use fulcrum_balance::{build, AlgorithmConfig, AlgorithmKind, BuildError, Endpoint};

#[test]
fn empty_set_picks_none() {
    for kind in AlgorithmKind::all() {
        let mut b = build(&kind.default_config(), &[], 0).unwrap();
        assert!(b.pick(0, Some(1)).is_none(), "{kind}");
        assert!(b.pick(0, None).is_none(), "{kind}");
    }
}

#[test]
fn bad_weights_are_rejected_by_every_algorithm_and_named() {
    for weight in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let eps = vec![Endpoint::new(0, "good"), Endpoint::new(1, "bad").with_weight(weight)];
        for kind in AlgorithmKind::all() {
            let err = build(&kind.default_config(), &eps, 0).unwrap_err();
            assert!(matches!(err, BuildError::InvalidWeight { .. }), "{kind}: {err:?}");
            assert!(err.to_string().contains("\"bad\""), "{kind}: {err}");
            // A balancer that exists keeps its endpoints when an update is bad.
            let mut b = build(&kind.default_config(), &endpoints(2), 0).unwrap();
            assert!(b.set_endpoints(&eps).is_err());
            assert_eq!(b.endpoints(), &endpoints(2)[..], "{kind}");
        }
    }
}

#[test]
fn duplicate_ids_are_rejected() {
    let eps = vec![Endpoint::new(0, "a"), Endpoint::new(0, "b")];
    for kind in AlgorithmKind::all() {
        let err = build(&kind.default_config(), &eps, 0).unwrap_err();
        assert_eq!(err, BuildError::DuplicateId { id: 0, name: "b".into() }, "{kind}");
    }
}

fn config_error(text: &str) -> String {
    let config: AlgorithmConfig = toml::from_str(text).unwrap();
    config.validate().unwrap_err().to_string()
}

#[test]
fn bad_parameters_name_the_value() {
    assert!(config_error("kind = \"maglev\"\ntable_size = 65536").contains("65536"));
    assert!(config_error("kind = \"ring-hash\"\nmin_ring_size = 0").contains("min_ring_size = 0"));
    assert!(config_error("kind = \"ring-hash\"\nmax_ring_size = 9000000").contains("max_ring_size = 9000000"));
    assert!(config_error("kind = \"maglev\"\nbounded_load = 0.5").contains("bounded_load"));
    assert!(config_error("kind = \"least-request\"\nchoices = 0").contains("choices"));
    assert!(config_error("kind = \"least-request\"\nactive_request_bias = -1.0").contains("active_request_bias"));
    assert!(config_error("kind = \"peak-ewma\"\ndecay = \"0s\"").contains("decay"));
}

#[test]
fn unknown_fields_and_kinds_are_rejected_by_the_parser() {
    let err = toml::from_str::<AlgorithmConfig>("kind = \"maglev\"\ntable = 7").unwrap_err().to_string();
    assert!(err.contains("table"), "{err}");
    let err = toml::from_str::<AlgorithmConfig>("kind = \"fastest\"").unwrap_err().to_string();
    assert!(err.contains("fastest"), "{err}");
    assert!("Fastest".parse::<AlgorithmKind>().unwrap_err().to_string().contains("Fastest"));
}

#[test]
fn names_and_aliases_parse_case_insensitively() {
    for (name, kind) in [
        ("WRR", AlgorithmKind::ROUND_ROBIN),
        ("round-robin", AlgorithmKind::ROUND_ROBIN),
        ("LR", AlgorithmKind::LEAST_REQUEST),
        ("PeakEWMA", AlgorithmKind::PEAK_EWMA),
        ("RingHash", AlgorithmKind::RING_HASH),
        ("Maglev", AlgorithmKind::MAGLEV),
        ("random", AlgorithmKind::RANDOM),
        ("rendezvous", AlgorithmKind::RENDEZVOUS),
    ] {
        assert_eq!(name.parse::<AlgorithmKind>().unwrap(), kind);
    }
    for kind in AlgorithmKind::all() {
        assert_eq!(kind.name().parse::<AlgorithmKind>().unwrap(), kind);
    }
}
