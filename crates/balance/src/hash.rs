//! The hash functions consistent hashing uses: xxHash64 and MurmurHash3.
//!
//! xxHash64 is Envoy's default for ring hash and Maglev. MurmurHash3
//! (x64_128, low 64 bits) is offered for rendezvous hashing because seed 003
//! compares the two. Both are deterministic across platforms, so every node
//! (proxy, simulator, XDP control plane) that hashes the same names builds
//! the same table.

use serde::{Deserialize, Serialize};

/// A selectable 64-bit hash function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HashFunction {
    /// xxHash64 (Yann Collet), seed 0.
    #[default]
    #[serde(alias = "xxhash64", alias = "xx")]
    Xxhash,
    /// MurmurHash3 x64_128 (Austin Appleby), seed 0, low 64 bits.
    #[serde(alias = "murmur", alias = "murmurhash3")]
    Murmur3,
}

impl HashFunction {
    /// Hash `bytes`.
    #[inline]
    pub fn hash(self, bytes: &[u8]) -> u64 {
        match self {
            HashFunction::Xxhash => xxh64(bytes, 0),
            HashFunction::Murmur3 => murmur3_x64_128(bytes, 0) as u64,
        }
    }

    /// Hash a 64-bit key together with a 64-bit salt (used by rendezvous
    /// hashing: key = request hash, salt = endpoint name hash).
    #[inline]
    pub fn hash_pair(self, key: u64, salt: u64) -> u64 {
        let mut buf = [0u8; 16];
        buf[..8].copy_from_slice(&key.to_le_bytes());
        buf[8..].copy_from_slice(&salt.to_le_bytes());
        self.hash(&buf)
    }
}

/// xxHash64 of `bytes` with `seed`.
#[inline]
pub fn xxh64(bytes: &[u8], seed: u64) -> u64 {
    xxhash_rust::xxh64::xxh64(bytes, seed)
}

/// MurmurHash3 x64_128 of `bytes` with `seed`; the low 64 bits (`h1`) are the
/// low half of the result.
pub fn murmur3_x64_128(bytes: &[u8], seed: u32) -> u128 {
    const C1: u64 = 0x87c3_7b91_1142_53d5;
    const C2: u64 = 0x4cf5_ad43_2745_937f;
    let mut h1 = seed as u64;
    let mut h2 = seed as u64;
    let blocks = bytes.len() / 16;
    for i in 0..blocks {
        let b = &bytes[i * 16..i * 16 + 16];
        let mut k1 = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        let mut k2 = u64::from_le_bytes(b[8..].try_into().expect("8 bytes"));
        k1 = k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
        h1 ^= k1;
        h1 = h1.rotate_left(27).wrapping_add(h2).wrapping_mul(5).wrapping_add(0x52dc_e729);
        k2 = k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
        h2 ^= k2;
        h2 = h2.rotate_left(31).wrapping_add(h1).wrapping_mul(5).wrapping_add(0x3849_5ab5);
    }
    let tail = &bytes[blocks * 16..];
    let mut k1 = 0u64;
    let mut k2 = 0u64;
    for (i, &byte) in tail.iter().enumerate() {
        if i < 8 {
            k1 |= (byte as u64) << (8 * i);
        } else {
            k2 |= (byte as u64) << (8 * (i - 8));
        }
    }
    if tail.len() > 8 {
        k2 = k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
        h2 ^= k2;
    }
    if !tail.is_empty() {
        k1 = k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
        h1 ^= k1;
    }
    let len = bytes.len() as u64;
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    ((h2 as u128) << 64) | h1 as u128
}

#[inline]
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// Map a 64-bit hash to a float in the open interval (0, 1).
#[inline]
pub(crate) fn unit_open(h: u64) -> f64 {
    // 52 bits keep `top + 0.5` exactly representable, so the result is
    // strictly inside (0, 1) even for h = u64::MAX.
    ((h >> 12) as f64 + 0.5) * (1.0 / (1u64 << 52) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_matches_reference_vectors() {
        // Published vectors of the reference implementation (seed 0).
        assert_eq!(murmur3_x64_128(b"", 0), 0);
        assert_eq!(
            murmur3_x64_128(b"The quick brown fox jumps over the lazy dog", 0),
            0x7a43_3ca9_c49a_9347_e34b_bc7b_bc07_1b6c
        );
    }

    #[test]
    fn murmur3_matches_an_independent_implementation_at_every_tail_length() {
        let data: Vec<u8> = (0u8..=64).collect();
        for len in 0..data.len() {
            for seed in [0u32, 1, 0xdead_beef] {
                let expected = murmur3::murmur3_x64_128(&mut std::io::Cursor::new(&data[..len]), seed).unwrap();
                assert_eq!(murmur3_x64_128(&data[..len], seed), expected, "len {len} seed {seed}");
            }
        }
    }

    #[test]
    fn xxh64_matches_reference_vectors() {
        assert_eq!(xxh64(b"", 0), 0xef46_db37_51d8_e999);
        assert_eq!(xxh64(b"a", 0), 0xd24e_c4f1_a98c_6e5b);
    }

    #[test]
    fn unit_open_never_reaches_the_ends() {
        assert!(unit_open(0) > 0.0);
        assert!(unit_open(u64::MAX) < 1.0);
    }
}
