//! How a ferry [`MsgKey`] becomes an MPI tag (M2 over MPI).
//!
//! A key has 72 bits (32-bit generation, 8-bit kind, 32-bit tag); an MPI tag has as many bits
//! as the library's `MPI_TAG_UB` allows (31 with Open MPI and MPICH, at least 15 by the
//! standard). The mapping is a pure function of the key and `MPI_TAG_UB`, so sender and
//! receiver agree without talking:
//!
//! - **exact** (the common case): with `b` usable bits, the top bit is 0 and the other `b-1`
//!   bits hold `kind | generation | tag` in fixed fields (2 bits of kind, up to 8 of generation,
//!   the rest for the tag: kind < 4, generation < 256, tag < 2^20 with 31 bits). Different keys
//!   give different MPI tags, so MPI's own matching keeps flows apart and no header is sent.
//! - **hashed** (keys that do not fit): the top bit is 1 and the other bits are a hash of the
//!   key; the message carries a [`HEADER_LEN`]-byte header with the full key, and the receiver
//!   puts messages whose header names another key aside until their receive is posted.
//!
//! Serial order within a flow (M2) is MPI's non-overtaking rule: every message of one flow has
//! the same source, communicator and MPI tag.

use ferry_proto::{MsgKey, MsgKind};

/// Bytes of the key header that travels in front of the payload in hashed mode.
pub const HEADER_LEN: usize = 12;

/// The MPI tag of one key and whether its messages carry the key header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WireTag {
    /// Tag passed to MPI, within `0..=MPI_TAG_UB`.
    pub tag: i32,
    /// Whether the key did not fit and messages carry a [`HEADER_LEN`]-byte key header.
    pub hashed: bool,
}

/// The field layout of MPI tags for one value of `MPI_TAG_UB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagMap {
    /// Bits of the tag field.
    tag_bits: u32,
    /// Bits of the generation field.
    gen_bits: u32,
    /// Value of the top usable bit (the "hashed" flag).
    flag: i32,
}

/// Bits given to the kind field: the four kinds ferry defines today.
const KIND_BITS: u32 = 2;

impl TagMap {
    /// The layout for a library whose largest tag is `tag_ub`; `None` if `tag_ub` is below what
    /// the MPI standard guarantees (32767), which only a broken library reports.
    pub fn new(tag_ub: i32) -> Option<TagMap> {
        if tag_ub < 32767 {
            return None;
        }
        // Usable bits: the largest b with 2^b - 1 <= tag_ub.
        let bits = 63 - (tag_ub as u64 + 1).leading_zeros();
        let exact_bits = bits - 1;
        let gen_bits = ((exact_bits - KIND_BITS) / 3).min(8);
        let tag_bits = exact_bits - KIND_BITS - gen_bits;
        Some(TagMap {
            tag_bits,
            gen_bits,
            flag: 1i32 << exact_bits,
        })
    }

    /// The layout for a library whose largest tag is `tag_ub` when the top usable bit is kept
    /// for the rests of split messages (both share one communicator, see the transport's
    /// `MPI_COMM_WORLD` mode), and that bit. The tag field keeps the width [`TagMap::new`]
    /// gives it and the generation field gives up the bit: tags grow with collectives and
    /// sequence numbers, generations only with recoveries. `None` when `tag_ub` leaves no
    /// generation bit.
    pub fn with_rest_bit(tag_ub: i32) -> Option<(TagMap, i32)> {
        let full = TagMap::new(tag_ub)?;
        // The full layout's hashed flag is the top usable bit; it becomes the rest bit, and
        // the next one down is the hashed flag.
        let rest_bit = full.flag;
        let exact_bits = rest_bit.trailing_zeros() - 1;
        let gen_bits = exact_bits.checked_sub(KIND_BITS + full.tag_bits)?;
        if gen_bits == 0 {
            return None;
        }
        let map = TagMap {
            tag_bits: full.tag_bits,
            gen_bits,
            flag: 1i32 << exact_bits,
        };
        Some((map, rest_bit))
    }

    /// Largest user tag that maps exactly (others are hashed).
    pub fn max_exact_tag(&self) -> u32 {
        (1u32 << self.tag_bits) - 1
    }

    /// The MPI tag of `key`. Inlined: every message maps its key, and the exact case is a
    /// few shifts (the hashed one is out of line).
    #[inline]
    pub fn wire(&self, key: MsgKey) -> WireTag {
        let fits = u32::from(key.kind.0) < (1 << KIND_BITS)
            && key.generation < (1 << self.gen_bits)
            && key.tag < (1 << self.tag_bits);
        if fits {
            let v = (u32::from(key.kind.0) << (self.gen_bits + self.tag_bits))
                | (key.generation << self.tag_bits)
                | key.tag;
            // v < 2^(exact_bits) <= 2^30, so it is a non-negative i32.
            WireTag {
                tag: v as i32,
                hashed: false,
            }
        } else {
            self.hashed(key)
        }
    }

    /// The hashed tag of a key too large for an exact one.
    #[cold]
    #[inline(never)]
    fn hashed(&self, key: MsgKey) -> WireTag {
        let h = fnv1a(&encode_header(key)) as u32;
        let mask = (self.flag - 1) as u32;
        WireTag {
            tag: self.flag | (h & mask) as i32,
            hashed: true,
        }
    }
}

impl TagMap {
    /// The key whose messages travel with exact MPI tag `tag`; `None` for hashed tags (their
    /// key is in the message's header) and for values outside the tag space. The inverse of
    /// [`TagMap::wire`] for keys that fit: the receiver uses it to keep aside a message it
    /// took off MPI's queue before any receive asked for it.
    pub fn exact_key(&self, tag: i32) -> Option<MsgKey> {
        if tag < 0 || tag >= self.flag {
            return None;
        }
        let v = tag as u32;
        let tag_mask = (1u32 << self.tag_bits) - 1;
        let gen_mask = (1u32 << self.gen_bits) - 1;
        let kind = v >> (self.gen_bits + self.tag_bits);
        Some(MsgKey::new(
            (v >> self.tag_bits) & gen_mask,
            MsgKind(kind as u8),
            v & tag_mask,
        ))
    }
}

/// The key header of hashed-mode messages: generation and tag little-endian, then the kind.
pub fn encode_header(key: MsgKey) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&key.generation.to_le_bytes());
    h[4..8].copy_from_slice(&key.tag.to_le_bytes());
    h[8] = key.kind.0;
    h
}

/// Reads a key header; `None` if the message is too short to hold one.
pub fn decode_header(msg: &[u8]) -> Option<MsgKey> {
    let h = msg.get(..HEADER_LEN)?;
    let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    Some(MsgKey::new(word(0), MsgKind(h[8]), word(4)))
}

/// FNV-1a, 64 bit, with a final avalanche step so that keys differing in one field spread over
/// all tag bits. Deterministic across processes (unlike std's randomly seeded hasher), which the
/// sender and the receiver need to agree on hashed tags.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_for_common_and_minimal_tag_ub() {
        let m = TagMap::new(i32::MAX).unwrap();
        assert_eq!(m.max_exact_tag(), (1 << 20) - 1);
        let minimal = TagMap::new(32767).unwrap();
        assert_eq!(minimal.flag, 1 << 14);
        assert!(minimal.max_exact_tag() >= 255);
        assert!(TagMap::new(1000).is_none());
    }

    #[test]
    fn rest_bit_layout_keeps_the_tag_field_and_stays_below_the_rest_bit() {
        for ub in [32767, 65535, (1 << 29) - 1, i32::MAX] {
            let full = TagMap::new(ub).unwrap();
            let (m, rest) = TagMap::with_rest_bit(ub).unwrap();
            assert_eq!(m.max_exact_tag(), full.max_exact_tag());
            assert_eq!(m.gen_bits + 1, full.gen_bits);
            assert!(
                rest > 0 && (rest as i64) * 2 - 1 <= ub as i64,
                "{rest} for {ub}"
            );
            for key in [
                MsgKey::new(0, MsgKind::USER, 0),
                MsgKey::new(3, MsgKind(3), m.max_exact_tag()),
                MsgKey::new(0, MsgKind::USER, u32::MAX),
                MsgKey::new(1 << 20, MsgKind::DATA, 3),
            ] {
                let w = m.wire(key);
                // Exact and hashed tags stay below the rest bit, and a rest tag (exact tag
                // with the bit set) stays within MPI_TAG_UB.
                assert!(w.tag >= 0 && w.tag < rest, "{w:?} for ub {ub}");
                assert!((w.tag | rest) <= ub);
                if !w.hashed {
                    assert_eq!(m.exact_key(w.tag), Some(key));
                }
                assert_eq!(m.exact_key(w.tag | rest), None);
            }
        }
        assert_eq!(
            TagMap::with_rest_bit(i32::MAX).unwrap().0.max_exact_tag(),
            (1 << 20) - 1
        );
    }

    #[test]
    fn exact_keys_are_distinct_and_in_range() {
        let m = TagMap::new(i32::MAX).unwrap();
        let mut seen = std::collections::HashSet::new();
        for kind in 0..4u8 {
            for generation in [0u32, 1, 255] {
                for tag in [0u32, 1, 7, (1 << 20) - 1] {
                    let w = m.wire(MsgKey::new(generation, MsgKind(kind), tag));
                    assert!(!w.hashed);
                    assert!(w.tag >= 0 && w.tag < (1 << 30));
                    assert!(
                        seen.insert(w.tag),
                        "collision for {kind} {generation} {tag}"
                    );
                }
            }
        }
    }

    #[test]
    fn keys_that_do_not_fit_are_hashed_into_the_upper_half() {
        for ub in [32767, 65535, (1 << 29) - 1, i32::MAX] {
            let m = TagMap::new(ub).unwrap();
            for key in [
                MsgKey::new(0, MsgKind::USER, u32::MAX),
                MsgKey::new(1 << 20, MsgKind::DATA, 3),
                MsgKey::new(0, MsgKind(200), 0),
            ] {
                let w = m.wire(key);
                assert!(w.hashed);
                assert!(w.tag >= m.flag && w.tag <= ub, "{w:?} for ub {ub}");
                assert_eq!(m.wire(key), w, "mapping must be deterministic");
            }
        }
    }

    fn any_key() -> impl proptest::strategy::Strategy<Value = MsgKey> {
        use proptest::prelude::*;
        (any::<u32>(), any::<u8>(), any::<u32>(), 0u32..3).prop_map(|(g, k, t, small)| {
            // Mix small fields (exact mode) with arbitrary ones (hashed mode).
            if small > 0 {
                MsgKey::new(g % 256, MsgKind(k % 4), t % (1 << 20))
            } else {
                MsgKey::new(g, MsgKind(k), t)
            }
        })
    }

    proptest::proptest! {
        /// Two different keys never share an MPI tag unless at least one of them is hashed (and
        /// then the header tells them apart); every tag is within 0..=MPI_TAG_UB.
        #[test]
        fn distinct_exact_keys_get_distinct_tags(
            a in any_key(),
            b in any_key(),
            ub in proptest::sample::select(vec![32767, 65535, (1 << 29) - 1, i32::MAX]),
        ) {
            let m = TagMap::new(ub).unwrap();
            let (wa, wb) = (m.wire(a), m.wire(b));
            proptest::prop_assert!(wa.tag >= 0 && wa.tag <= ub);
            if a != b && !wa.hashed && !wb.hashed {
                proptest::prop_assert_ne!(wa.tag, wb.tag);
            }
            if wa.hashed != wb.hashed {
                // Exact and hashed tags live in disjoint halves.
                proptest::prop_assert_ne!(wa.tag, wb.tag);
            }
            proptest::prop_assert_eq!(decode_header(&encode_header(a)), Some(a));
            // The exact tag of a key gives the key back; a hashed tag gives none.
            if wa.hashed {
                proptest::prop_assert_eq!(m.exact_key(wa.tag), None);
            } else {
                proptest::prop_assert_eq!(m.exact_key(wa.tag), Some(a));
            }
        }
    }

    #[test]
    fn header_round_trips() {
        let k = MsgKey::new(0xdead_beef, MsgKind(9), 0x0102_0304);
        let mut msg = encode_header(k).to_vec();
        msg.extend_from_slice(b"payload");
        assert_eq!(decode_header(&msg), Some(k));
        assert_eq!(decode_header(&msg[..5]), None);
    }
}
