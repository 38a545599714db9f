//! The simulator's scenario parser must answer every input with a scenario
//! or an error, never a panic. Inputs that name an `empirical` distribution
//! are skipped: that reads a file, and the file system is not under test.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if text.contains("empirical") {
        return;
    }
    if let Ok(scenario) = fulcrum_sim::Scenario::parse(text, "fuzz.toml", "fuzz", Path::new("fuzz")) {
        // What parsing promises: at least one server and one algorithm, each
        // buildable over the servers.
        assert!(!scenario.servers.is_empty() && !scenario.algorithms.is_empty());
        let _ = scenario.total_requests();
    }
});
