//! Request IDs and W3C trace context (<https://www.w3.org/TR/trace-context/>),
//! stamped on a request before it is routed.
//!
//! A listener with `request_id` keeps the ID a request carries in its
//! header, or makes one (a random UUID, version 4); the ID goes upstream, to
//! the access log, and back to the client when configured. A listener with
//! `traceparent` passes a valid `traceparent` on with the same trace ID and
//! flags and a new parent ID (the proxy's hop is a span of its own), with
//! `tracestate` untouched; a missing or invalid one starts a new trace
//! (sampled), and the `tracestate` that belonged to the invalid one is
//! dropped. Random bits come from the worker's generator ([`Rng`]): no
//! system call per request.

use fulcrum_balance::Rng;
use http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::config::Listener;

/// `traceparent`.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// `tracestate`.
pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

const HEX: &[u8; 16] = b"0123456789abcdef";

/// What stamping told of a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stamp {
    /// The request ID (received or made), with a listener that has them.
    pub request_id: Option<HeaderValue>,
    /// The trace ID (32 lowercase hex digits), with a listener that propagates traces.
    pub trace_id: Option<[u8; 32]>,
}

/// The parts of a valid `traceparent` that a hop keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// 32 lowercase hex digits, not all zero.
    pub trace_id: [u8; 32],
    /// 2 lowercase hex digits.
    pub flags: [u8; 2],
}

fn lower_hex(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// Parse a `traceparent` value by the W3C rules: version, trace ID, parent
/// ID and flags in lowercase hex separated by `-`; version `ff`, an all-zero
/// trace or parent ID, or version `00` with anything after the flags, are
/// invalid. A later version may carry more fields after a `-`.
pub fn parse(value: &[u8]) -> Option<TraceParent> {
    if value.len() < 55 || value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let (version, trace, parent, flags) = (&value[..2], &value[3..35], &value[36..52], &value[53..55]);
    if !(lower_hex(version) && lower_hex(trace) && lower_hex(parent) && lower_hex(flags)) || version == b"ff" {
        return None;
    }
    if trace.iter().all(|&b| b == b'0') || parent.iter().all(|&b| b == b'0') {
        return None;
    }
    let exact = value.len() == 55;
    if !exact && (version == b"00" || value[55] != b'-') {
        return None;
    }
    let mut parsed = TraceParent { trace_id: [0; 32], flags: [0; 2] };
    parsed.trace_id.copy_from_slice(trace);
    parsed.flags.copy_from_slice(flags);
    Some(parsed)
}

/// `out` filled with lowercase hex digits of random bits, not all zero.
fn random_hex(rng: &mut Rng, out: &mut [u8]) {
    loop {
        for chunk in out.chunks_mut(16) {
            let bits = rng.next_u64();
            for (i, b) in chunk.iter_mut().enumerate() {
                *b = HEX[((bits >> (4 * i)) & 15) as usize];
            }
        }
        if out.iter().any(|&b| b != b'0') {
            return;
        }
    }
}

/// The `traceparent` this hop sends: version 00, the trace ID and flags of
/// `parent` (a new trace, sampled, without one), and a new parent ID.
pub fn next_hop(parent: Option<TraceParent>, rng: &mut Rng) -> (HeaderValue, [u8; 32]) {
    let parent = parent.unwrap_or_else(|| {
        let mut trace_id = [0; 32];
        random_hex(rng, &mut trace_id);
        TraceParent { trace_id, flags: *b"01" }
    });
    let mut out = [0u8; 55];
    out[..3].copy_from_slice(b"00-");
    out[3..35].copy_from_slice(&parent.trace_id);
    out[35] = b'-';
    random_hex(rng, &mut out[36..52]);
    out[52] = b'-';
    out[53..].copy_from_slice(&parent.flags);
    let value = HeaderValue::from_bytes(&out).unwrap_or_else(|_| unreachable!("hex digits and dashes"));
    (value, parent.trace_id)
}

/// A new request ID: a random UUID (version 4, RFC 9562).
pub fn request_id(rng: &mut Rng) -> HeaderValue {
    let mut hex = [0u8; 32];
    random_hex(rng, &mut hex);
    hex[12] = b'4';
    hex[16] = HEX[8 | (usize::from(hex[16]) & 3)];
    let mut out = [0u8; 36];
    let mut at = 0;
    for (i, &b) in hex.iter().enumerate() {
        if matches!(i, 8 | 12 | 16 | 20) {
            out[at] = b'-';
            at += 1;
        }
        out[at] = b;
        at += 1;
    }
    HeaderValue::from_bytes(&out).unwrap_or_else(|_| unreachable!("hex digits and dashes"))
}

/// Stamp `headers` as `listener` says: a request ID when it has none, the
/// next hop's `traceparent`.
pub fn stamp(listener: &Listener, headers: &mut HeaderMap, rng: &mut Rng) -> Stamp {
    let mut stamp = Stamp::default();
    if let Some(config) = &listener.request_id {
        let id = match headers.get(&config.header) {
            Some(id) if !id.is_empty() => id.clone(),
            _ => {
                let id = request_id(rng);
                headers.insert(config.header.clone(), id.clone());
                id
            }
        };
        stamp.request_id = Some(id);
    }
    if listener.traceparent {
        let mut all = headers.get_all(&TRACEPARENT).iter();
        let parent = match (all.next(), all.next()) {
            (Some(one), None) => parse(one.as_bytes()),
            _ => None,
        };
        if parent.is_none() {
            headers.remove(&TRACESTATE);
        }
        let (value, trace_id) = next_hop(parent, rng);
        headers.insert(TRACEPARENT, value);
        stamp.trace_id = Some(trace_id);
    }
    stamp
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn valid_traceparents_parse_and_invalid_ones_do_not() {
        let p = parse(GOOD.as_bytes()).unwrap();
        assert_eq!(&p.trace_id, b"4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(&p.flags, b"01");
        // A later version may add fields after a dash.
        assert!(parse(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra").is_some());
        let invalid = [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-é1",
        ];
        for bad in invalid {
            assert_eq!(parse(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn random_headers_never_panic_and_what_parses_is_well_formed() {
        let mut rng = Rng::new(11);
        let alphabet = b"0123456789abcdefABF-x \xff";
        let mut parsed = 0;
        for i in 0..50_000 {
            let v: Vec<u8> = if i % 2 == 0 {
                let len = rng.below(70) as usize;
                (0..len).map(|_| alphabet[rng.below(alphabet.len() as u64) as usize]).collect()
            } else {
                // A valid header with a byte or two changed, cut or extended.
                let mut v = GOOD.as_bytes().to_vec();
                for _ in 0..rng.below(3) {
                    let at = rng.below(v.len() as u64) as usize;
                    v[at] = alphabet[rng.below(alphabet.len() as u64) as usize];
                }
                match rng.below(4) {
                    0 => v.truncate(rng.below(56) as usize),
                    1 => v.extend_from_slice(b"-more"),
                    _ => {}
                }
                v
            };
            if let Some(p) = parse(&v) {
                assert!(lower_hex(&p.trace_id) && lower_hex(&p.flags), "{v:?}");
                let (next, _) = next_hop(Some(p), &mut rng);
                assert_eq!(parse(next.as_bytes()).map(|n| n.trace_id), Some(p.trace_id));
                parsed += 1;
            }
        }
        assert!((1_000..25_000).contains(&parsed), "{parsed} parsed: both kinds of input are reached");
    }

    #[test]
    fn a_hop_keeps_the_trace_and_flags_and_makes_a_new_parent() {
        let mut rng = Rng::new(1);
        let parent = parse(GOOD.as_bytes());
        let (value, trace) = next_hop(parent, &mut rng);
        let text = value.to_str().unwrap();
        let next = parse(text.as_bytes()).expect("the header sent is valid");
        assert_eq!((next.trace_id, &trace), (parent.unwrap().trace_id, &parent.unwrap().trace_id));
        assert_eq!(&next.flags, b"01");
        assert_ne!(&text[36..52], &GOOD[36..52], "a new parent ID");
        let (fresh, fresh_trace) = next_hop(None, &mut rng);
        let fresh = parse(fresh.as_bytes()).expect("a new trace is valid");
        assert_eq!((fresh.trace_id, &fresh.flags), (fresh_trace, b"01"));
        assert_ne!(fresh.trace_id, trace);
    }

    #[test]
    fn request_ids_are_version_4_uuids_and_differ() {
        let mut rng = Rng::new(7);
        let a = request_id(&mut rng);
        let b = request_id(&mut rng);
        assert_ne!(a, b);
        let text = a.to_str().unwrap();
        assert_eq!(text.len(), 36);
        let dashes: Vec<usize> = text.match_indices('-').map(|(i, _)| i).collect();
        assert_eq!(dashes, [8, 13, 18, 23]);
        assert_eq!(&text[14..15], "4");
        assert!(matches!(&text[19..20], "8" | "9" | "a" | "b"), "{text}");
        assert!(lower_hex(text.replace('-', "").as_bytes()));
    }

    fn listener(request_id: bool, traceparent: bool) -> Listener {
        let text = format!(
            "[[listener]]\nlisten = \"127.0.0.1:1\"\nroutes = [{{ cluster = \"c\" }}]\ntraceparent = {traceparent}\n{}\n\
             [[cluster]]\nname = \"c\"\nendpoints = [\"127.0.0.1:2\"]\n",
            if request_id { "request_id = { header = \"X-Req\" }" } else { "" }
        );
        crate::config::Config::parse(std::path::Path::new("t.toml"), &text).unwrap().listeners.remove(0)
    }

    #[test]
    fn stamping_keeps_or_makes_ids_and_drops_the_state_of_an_invalid_trace() {
        let mut rng = Rng::new(3);
        let mut h = HeaderMap::new();
        assert_eq!(stamp(&listener(false, false), &mut h, &mut rng), Stamp::default());
        assert!(h.is_empty(), "nothing configured, nothing added");
        let both = listener(true, true);
        h.insert("x-req", HeaderValue::from_static("abc"));
        h.insert(TRACEPARENT, HeaderValue::from_static(GOOD));
        h.insert(TRACESTATE, HeaderValue::from_static("k=v"));
        let s = stamp(&both, &mut h, &mut rng);
        assert_eq!(s.request_id, Some(HeaderValue::from_static("abc")));
        assert_eq!(&s.trace_id.unwrap(), b"4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(h["tracestate"], "k=v");
        let mut h = HeaderMap::new();
        h.insert(TRACEPARENT, HeaderValue::from_static("00-bad"));
        h.insert(TRACESTATE, HeaderValue::from_static("k=v"));
        let s = stamp(&both, &mut h, &mut rng);
        assert_eq!(h["x-req"], s.request_id.unwrap());
        assert!(!h.contains_key(TRACESTATE));
        assert_eq!(parse(h[TRACEPARENT].as_bytes()).unwrap().trace_id, s.trace_id.unwrap());
        let mut two = HeaderMap::new();
        two.append(TRACEPARENT, HeaderValue::from_static(GOOD));
        two.append(TRACEPARENT, HeaderValue::from_static(GOOD));
        let s = stamp(&both, &mut two, &mut rng);
        assert_ne!(&s.trace_id.unwrap(), b"4bf92f3577b34da6a3ce929d0e0e4736", "two traceparents: a new trace");
    }
}
