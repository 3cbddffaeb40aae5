//! Per-flow serial counters (M2, seed 000 §4.5.4), with the numbering of
//! `ferry_proto::FlowTable` (every flow from or to a peer counts 0, 1, 2, ... per key) but a
//! cheap hash: on the shared-memory fast path SipHash of the flow key was half of the software
//! cost of a message (two lookups, ~40 ns of ~80 ns measured with `perf`). Keys are chosen by
//! the program and ferry's layers, never by a remote party, so hash flooding is not a concern.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use ferry_proto::MsgKey;

/// A multiply-rotate hasher for small fixed-size keys.
#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    #[inline]
    fn add(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(b));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
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
    #[inline]
    fn finish(&self) -> u64 {
        // Fold the well-mixed high bits into the low ones the table indexes with.
        self.0 ^ (self.0 >> 29)
    }
}

/// Next serial of every flow in one direction (sends or receives).
#[derive(Default)]
pub(crate) struct Flows {
    next: HashMap<(usize, MsgKey), u64, BuildHasherDefault<FastHasher>>,
}

impl Flows {
    /// Takes the serial of the next message of flow (`peer`, `key`).
    #[inline]
    pub(crate) fn take(&mut self, peer: usize, key: MsgKey) -> u64 {
        let c = self.next.entry((peer, key)).or_insert(0);
        let s = *c;
        *c += 1;
        s
    }

    /// Forgets the flows whose key `retired` selects (`Transport::retire_flows`).
    pub(crate) fn retire(&mut self, retired: impl Fn(&MsgKey) -> bool) {
        self.next.retain(|(_, k), _| !retired(k));
    }

    /// Number of flows with state.
    pub(crate) fn len(&self) -> usize {
        self.next.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_proto::{FlowTable, MsgKind};
    use proptest::prelude::*;

    proptest! {
        /// Numbers exactly like ferry_proto's FlowTable for any sequence of flows.
        #[test]
        fn same_numbering_as_flow_table(ops in proptest::collection::vec((0usize..4, 0u32..3, 0u8..3, 0u32..5), 0..300)) {
            let mut ours = Flows::default();
            let mut table = FlowTable::new();
            for (peer, generation, kind, tag) in ops {
                let key = MsgKey::new(generation, MsgKind(kind), tag);
                prop_assert_eq!(ours.take(peer, key), table.take_send_serial(peer, key));
            }
        }
    }
}
