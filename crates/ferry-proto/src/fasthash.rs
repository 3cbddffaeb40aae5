//! A fast hasher for the protocol's small integer keys (connection and operation ids, flow
//! keys, message identifiers), which are looked up several times per message: the standard
//! library's SipHash cost a few percent of an 8-byte ping-pong's CPU time on the TCP backend.
//!
//! Multiply-rotate mixing in the style of rustc's FxHash. It gives no protection against keys
//! chosen to collide; that is acceptable here because the keys are either made by this rank or
//! come from peers that passed the job-secret handshake (T8), which are part of the job.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

const K: u64 = 0xf135_7aea_2e62_a9c5;

/// The hasher (see the module documentation).
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(K).rotate_left(26);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ (rest.len() as u64) << 59);
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
}

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A `HashSet` with [`FastHasher`].
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash + ?Sized>(t: &T) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(t)
    }

    #[test]
    fn sequential_ids_spread_over_the_low_bits() {
        // hashbrown picks buckets by the low bits and groups by the top 7: sequential ids
        // (connection and operation ids) must not all land in a few buckets.
        let mut low = FastSet::default();
        let mut top = FastSet::default();
        for i in 0u64..1024 {
            low.insert(hash(&i) & 1023);
            top.insert(hash(&i) >> 57);
        }
        assert!(low.len() > 600, "{} distinct buckets of 1024", low.len());
        // (An identity hash would give one value here and 1024 above.)
        assert!(
            top.len() > 64,
            "{} distinct top-7-bit tags of 128",
            top.len()
        );
    }

    #[test]
    fn maps_work_with_composite_keys() {
        let mut m: FastMap<(usize, u32, u64), usize> = FastMap::default();
        for i in 0..10_000usize {
            m.insert((i % 7, (i % 13) as u32, i as u64), i);
        }
        assert_eq!(m.len(), 10_000);
        assert!((0..10_000usize).all(|i| m[&(i % 7, (i % 13) as u32, i as u64)] == i));
        assert_ne!(hash(&b"abc"[..]), hash(&b"abd"[..]));
    }
}
