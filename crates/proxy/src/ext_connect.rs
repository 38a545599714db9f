//! HTTP/2 extended CONNECT (RFC 8441): WebSockets over HTTP/2, proxied to
//! upstreams as HTTP/1.1 WebSocket handshakes (RFC 6455 §4).
//!
//! An HTTP/2 client opens a WebSocket with a `CONNECT` request carrying the
//! `:protocol` pseudo-header (`websocket`) on a stream, once the server's
//! SETTINGS have allowed it (`SETTINGS_ENABLE_CONNECT_PROTOCOL`). Such a
//! request has no `Sec-WebSocket-Key`, and a success is a `200`, not a
//! `101`. Upstream, the proxy sends an ordinary HTTP/1.1 Upgrade: a `GET`
//! with `Connection: upgrade`, `Upgrade: websocket` and a key of its own,
//! and turns the upstream's `101` into the client's `200` (without the
//! `Sec-WebSocket-Accept` that answers the proxy's key). From then on the
//! stream and the upstream connection are joined as any tunnel.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use http::{HeaderValue, Method, Request};
use xxhash_rust::xxh64::xxh64;

/// The `:protocol` of an HTTP/2 extended CONNECT request, if `req` is one.
pub fn protocol<B>(req: &Request<B>) -> Option<&hyper::ext::Protocol> {
    (req.method() == Method::CONNECT).then(|| req.extensions().get::<hyper::ext::Protocol>()).flatten()
}

/// A `Sec-WebSocket-Key` for an upstream handshake: 16 bytes in base64.
/// RFC 6455 asks for a fresh nonce per handshake; it proves only that the
/// server speaks WebSocket (it is no secret), so a hash of a process-wide
/// counter and the clock is enough.
pub fn websocket_key() -> HeaderValue {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Relaxed);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let input = [n.to_le_bytes(), (now as u64).to_le_bytes()].concat();
    let nonce = [xxh64(&input, 0).to_le_bytes(), xxh64(&input, 1).to_le_bytes()].concat();
    HeaderValue::from_str(&base64(&nonce)).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `bytes` in base64 with padding (RFC 4648 §4).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (text, encoded) in
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("foobar", "Zm9vYmFy")]
        {
            assert_eq!(base64(text.as_bytes()), encoded);
        }
    }

    #[test]
    fn keys_are_16_bytes_of_base64_and_differ() {
        let (a, b) = (websocket_key(), websocket_key());
        assert_eq!(a.len(), 24);
        assert!(a.to_str().unwrap().ends_with("=="));
        assert_ne!(a, b);
    }

    #[test]
    fn only_connect_with_a_protocol_is_extended_connect() {
        let mut req = Request::builder().method(Method::CONNECT).uri("http://a/").body(()).unwrap();
        assert!(protocol(&req).is_none());
        req.extensions_mut().insert(hyper::ext::Protocol::from_static("websocket"));
        assert_eq!(protocol(&req).unwrap().as_str(), "websocket");
        *req.method_mut() = Method::GET;
        assert!(protocol(&req).is_none());
    }
}
