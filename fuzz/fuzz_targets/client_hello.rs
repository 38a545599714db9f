//! The TLS passthrough's ClientHello reader
//! (`fulcrum_proxy::passthrough::client_hello`) on any bytes. Never a
//! panic, and (the first byte of an input picks where to cut it, the rest
//! is the bytes read):
//! - a server name is lower case, at most 253 bytes of a DNS name's characters;
//! - an ALPN protocol is 1 to 255 bytes;
//! - a complete hello reads the same with more bytes after it, and a prefix
//!   of the input is incomplete, refused, or the same hello.
#![no_main]

use fulcrum_proxy::passthrough::{client_hello, Hello};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&cut, data)) = input.split_first() else { return };
    let whole = client_hello(data);
    if let Ok(Some(Hello { server_name, alpn })) = &whole {
        if let Some(name) = server_name {
            assert!(!name.is_empty() && name.len() <= 253);
            assert!(name.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_')));
        }
        // Lossy UTF-8 may grow a byte to three: 255 bytes read give at most 765.
        assert!(alpn.iter().all(|p| !p.is_empty() && p.len() <= 3 * 255));
    }
    if let Ok(Some(hello)) = &whole {
        let longer = [data, b"\x16\x03\x01\x00\x01\x00"].concat();
        assert_eq!(client_hello(&longer).as_ref(), Ok(&Some(hello.clone())));
        let at = usize::from(cut) * data.len() / 256;
        match client_hello(&data[..at]) {
            Ok(Some(h)) => assert_eq!(&h, hello),
            Ok(None) | Err(_) => {}
        }
    }
});
