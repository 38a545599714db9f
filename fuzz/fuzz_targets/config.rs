//! The proxy's configuration parser must answer every input with a config or
//! an error, never a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = fulcrum_proxy::Config::parse(Path::new("fuzz.toml"), text);
    }
});
