//! The PROXY protocol parser (`fulcrum_proxy::proxy_protocol::parse`) on any
//! bytes. Never a panic, and:
//! - a header is no longer than the input nor than the longest accepted,
//!   parses the same alone, and one byte less of it is incomplete;
//! - "no signature" is exactly what `detect` says cannot begin a header;
//! - a client's addresses encode (v1 and v2) to headers that parse back to them.
#![no_main]

use fulcrum_proxy::proxy_protocol::{detect, encode, parse, Header, Malformed, Version, V1_MAX, V2_MAX};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = parse(data);
    assert_eq!(matches!(parsed, Err(Malformed::Signature)), detect(data) == Some(false));
    if let Ok(Some((header, n))) = parsed {
        assert!(n <= data.len() && n <= V1_MAX.max(V2_MAX));
        assert_eq!(parse(&data[..n]), Ok(Some((header, n))));
        assert_eq!(parse(&data[..n - 1]), Ok(None));
        if let Header::Proxied(a) = header {
            for v in [Version::V1, Version::V2] {
                let bytes = encode(v, Some(a));
                let Ok(Some((Header::Proxied(b), m))) = parse(&bytes) else { panic!("{v:?} {a:?}") };
                assert_eq!(m, bytes.len());
                assert_eq!((b.source.port(), b.destination.port()), (a.source.port(), a.destination.port()));
            }
        }
    }
});
