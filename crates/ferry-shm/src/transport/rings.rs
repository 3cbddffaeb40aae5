//! Rings opened on first use (X5): a rank maps and initialises the ring of a pair only when it
//! first sends to or receives from that peer, and learns of peers that started sending to it
//! from its sender map, so start-up does no per-pair work and progress drains only the rings
//! in use.

use super::*;

impl ShmTransport {
    /// Opens the ring to segment index `l` on first use, announcing it in `l`'s sender map
    /// before anything is pushed, so `l` finds it without scanning every ring (X5).
    pub(in crate::transport) fn open_tx(&mut self, l: usize) {
        if l == self.me || self.tx[l].is_some() {
            return;
        }
        let me = self.me;
        self.seg
            .sender_map(l, me / 64)
            .fetch_or(1 << (me % 64), Ordering::SeqCst);
        let lay = self.seg.layout;
        // SAFETY: the ring base comes from the segment's layout and lives as long as `seg`,
        // which the transport keeps.
        let ring = unsafe { RingRef::new(self.seg.ring_base(me, l), lay.slots, lay.slot_bytes) };
        self.tx[l] = Some(Producer::new(ring));
        self.note_ring(l);
    }

    /// Opens the ring from segment index `l` on first use.
    pub(in crate::transport) fn open_rx(&mut self, l: usize) {
        if l == self.me || self.rx[l].is_some() {
            return;
        }
        let lay = self.seg.layout;
        // SAFETY: as in `open_tx`.
        let ring =
            unsafe { RingRef::new(self.seg.ring_base(l, self.me), lay.slots, lay.slot_bytes) };
        self.rx[l] = Some(Consumer::new(ring));
        self.active_rx.push(l);
        self.note_ring(l);
    }

    fn note_ring(&mut self, l: usize) {
        self.stats.bump("shm rings opened", 1);
        if !self.peer_open[l] {
            self.peer_open[l] = true;
            self.stats.bump("shm peers with rings", 1);
            if self.seg.shared {
                self.watch[l] = Some(PeerWatch::open(self.pids[l]));
            }
        }
    }

    /// Opens the consumers of peers that announced a ring to this rank since the last look;
    /// whether there were any. Costs one load per 64 ranks.
    pub(in crate::transport) fn discover_senders(&mut self) -> bool {
        let mut found = false;
        for w in 0..self.known_senders.len() {
            let now = self.seg.sender_map(self.me, w).load(Ordering::Acquire);
            let mut new = now & !self.known_senders[w];
            if new == 0 {
                continue;
            }
            self.known_senders[w] = now;
            found = true;
            while new != 0 {
                let b = new.trailing_zeros() as usize;
                new &= new - 1;
                self.open_rx(w * 64 + b);
            }
        }
        found
    }

    /// Number of peers this rank has opened a ring to or from.
    pub fn peers_with_rings(&self) -> usize {
        self.peer_open.iter().filter(|&&o| o).count()
    }
}
