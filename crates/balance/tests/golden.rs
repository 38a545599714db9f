//! Golden vectors: a fixed endpoint list and fixed keys map to fixed
//! endpoints. Written once from this implementation and checked forever, so
//! that a change in hashing or table construction (which would reshuffle
//! every user's sessions on upgrade) cannot pass unnoticed.

mod common;

use common::{assign, endpoints, from_toml, key};
use fulcrum_balance::hash::xxh64;
use fulcrum_balance::{Maglev, RingHash};

fn ids(text: &str) -> Vec<u64> {
    let eps = endpoints(7);
    let mut b = from_toml(text, &eps, 0);
    assign(b.as_mut(), (0..24).map(key)).into_iter().map(|id| id.0).collect()
}

#[test]
fn maglev_keys_map_to_fixed_endpoints() {
    assert_eq!(ids("kind = \"maglev\""), MAGLEV);
}

#[test]
fn maglev_table_is_fixed() {
    let m = Maglev::new(&endpoints(7), 65537, None, 0).unwrap();
    let head: Vec<u32> = m.table()[..16].to_vec();
    assert_eq!(head, MAGLEV_TABLE_HEAD);
    // A digest of the whole table, so that any entry changing is caught.
    let bytes: Vec<u8> = m.table().iter().flat_map(|s| s.to_le_bytes()).collect();
    assert_eq!(xxh64(&bytes, 0), MAGLEV_TABLE_DIGEST);
}

#[test]
fn ring_hash_keys_map_to_fixed_endpoints() {
    assert_eq!(ids("kind = \"ring-hash\""), RING_XXHASH);
    assert_eq!(ids("kind = \"ring-hash\"\nhash = \"murmur3\""), RING_MURMUR3);
    let r = RingHash::new(&endpoints(7), 1024, 8_388_608, Default::default(), None, 0).unwrap();
    assert_eq!(r.ring_size(), 1792);
}

#[test]
fn rendezvous_keys_map_to_fixed_endpoints() {
    assert_eq!(ids("kind = \"rendezvous\""), RENDEZVOUS_XXHASH);
    assert_eq!(ids("kind = \"rendezvous\"\nhash = \"murmur3\""), RENDEZVOUS_MURMUR3);
}

const MAGLEV: [u64; 24] = [2, 5, 0, 5, 3, 4, 0, 2, 3, 2, 0, 4, 4, 2, 2, 2, 0, 3, 0, 3, 3, 1, 4, 4];
const MAGLEV_TABLE_HEAD: [u32; 16] = [2, 5, 2, 3, 0, 3, 0, 5, 0, 2, 2, 4, 5, 4, 1, 6];
const MAGLEV_TABLE_DIGEST: u64 = 9311614933585478388;
const RING_XXHASH: [u64; 24] = [6, 6, 5, 4, 4, 6, 5, 4, 4, 5, 4, 3, 6, 5, 4, 0, 6, 2, 1, 6, 5, 6, 2, 6];
const RING_MURMUR3: [u64; 24] = [4, 4, 2, 5, 3, 4, 4, 2, 6, 6, 5, 4, 4, 0, 2, 4, 4, 2, 3, 6, 0, 3, 3, 4];
const RENDEZVOUS_XXHASH: [u64; 24] = [6, 2, 4, 0, 2, 3, 3, 3, 5, 6, 1, 6, 5, 4, 4, 0, 0, 2, 3, 4, 6, 2, 1, 1];
const RENDEZVOUS_MURMUR3: [u64; 24] = [5, 1, 2, 1, 6, 5, 0, 2, 2, 3, 6, 6, 2, 1, 3, 2, 3, 0, 5, 2, 5, 4, 2, 3];
