//! Reliable broadcast among the members over the log-distance overlay (see the module
//! documentation of [`super`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use super::agree::sorted;
use super::tree::Live;
use super::wire::{decode_flood, encode_flood, FtDecodeError};

/// Test-only protocol faults, to show that the simulation catches a broken flood.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FloodMutations {
    /// Forward to the nearest neighbour only.
    pub single_neighbour: bool,
}

/// Serials seen from one origin: everything below `below`, plus `above`.
#[derive(Default)]
struct Seen {
    below: u64,
    above: BTreeSet<u64>,
}

impl Seen {
    /// Records `serial`; false if it was seen before.
    fn insert(&mut self, serial: u64) -> bool {
        if serial < self.below || !self.above.insert(serial) {
            return false;
        }
        while self.above.remove(&self.below) {
            self.below += 1;
        }
        true
    }
}

/// A broadcast this rank has forwarded, kept so it can be forwarded again around a neighbour
/// that dies.
struct Relay {
    bytes: Vec<u8>,
    /// Ranks known to have it: the origin, the rank it came from, and every rank it was sent to.
    covered: BTreeSet<u32>,
}

/// Reliable broadcast (revoke, failure notices) among `members`: a payload originated by a live
/// rank, or received by any live rank, reaches every live member exactly once, in
/// N⌈log2 N⌉ messages. The broadcasts this rank has seen are kept (for re-forwarding after a
/// failure) until the object is dropped.
pub struct Flood {
    me: u32,
    /// Sorted, distinct, shared.
    members: Arc<[u32]>,
    member: bool,
    dead: BTreeSet<u32>,
    next_serial: u64,
    seen: BTreeMap<u32, Seen>,
    relays: Vec<Relay>,
    out: VecDeque<(u32, Vec<u8>)>,
    /// Test-only faults.
    #[doc(hidden)]
    pub mutations: FloodMutations,
}

impl Flood {
    /// A flood endpoint for `me` among `members` (sorted and deduplicated here). If `me` is not
    /// a member it neither sends nor delivers.
    pub fn new(me: u32, members: &[u32]) -> Flood {
        Self::new_shared(me, sorted(members))
    }

    /// [`Flood::new`] with the member list shared (sorted and deduplicated first if it is not
    /// already).
    pub fn new_shared(me: u32, members: Arc<[u32]>) -> Flood {
        let members = if members.windows(2).all(|w| w[0] < w[1]) {
            members
        } else {
            sorted(&members)
        };
        Flood {
            me,
            member: members.binary_search(&me).is_ok(),
            members,
            dead: BTreeSet::new(),
            next_serial: 0,
            seen: BTreeMap::new(),
            relays: Vec::new(),
            out: VecDeque::new(),
            mutations: FloodMutations::default(),
        }
    }

    /// Broadcasts `payload` to every other member; this rank does not deliver it to itself.
    /// A payload of 4 GiB or more cannot be framed and is not sent.
    pub fn originate(&mut self, payload: &[u8]) {
        if !self.member || u32::try_from(payload.len()).is_err() {
            return;
        }
        let serial = self.next_serial;
        self.next_serial += 1;
        self.seen.entry(self.me).or_default().insert(serial);
        let bytes = encode_flood(self.me, serial, payload);
        self.relay(bytes, [self.me].into());
    }

    /// Handles a message `from` a peer: `Some((origin, payload))` the first time a broadcast
    /// arrives (deliver it), `None` for a repeat.
    pub fn on_message(
        &mut self,
        from: u32,
        bytes: &[u8],
    ) -> Result<Option<(u32, Vec<u8>)>, FtDecodeError> {
        let msg = decode_flood(bytes)?;
        for rank in [from, msg.origin, self.me] {
            if self.members.binary_search(&rank).is_err() {
                return Err(FtDecodeError::NotAMember { from, rank });
            }
        }
        if from == self.me {
            return Err(FtDecodeError::Unexpected {
                from,
                why: "a flood message from this rank to itself",
            });
        }
        if !self.seen.entry(msg.origin).or_default().insert(msg.serial) {
            return Ok(None);
        }
        let delivered = (msg.origin, msg.payload.to_vec());
        if msg.origin != self.me {
            self.relay(bytes.to_vec(), [msg.origin, from, self.me].into());
        }
        Ok(Some(delivered))
    }

    /// The runtime learned that `rank` is dead: later broadcasts skip it, and every broadcast
    /// sent to it (or received from it) goes to its replacement among the neighbours.
    pub fn on_failure(&mut self, rank: u32) {
        if !self.member
            || rank == self.me
            || self.members.binary_search(&rank).is_err()
            || !self.dead.insert(rank)
        {
            return;
        }
        let targets = self.targets();
        for relay in &mut self.relays {
            if !relay.covered.contains(&rank) {
                continue;
            }
            for &t in &targets {
                if relay.covered.insert(t) {
                    self.out.push_back((t, relay.bytes.clone()));
                }
            }
        }
    }

    /// The next message to send: (destination world rank, bytes).
    pub fn poll_transmit(&mut self) -> Option<(u32, Vec<u8>)> {
        self.out.pop_front()
    }

    fn targets(&self) -> Vec<u32> {
        let live = Live::new(&self.members, &self.dead);
        let mut t = live
            .position(self.me)
            .map(|p| live.neighbours(p))
            .unwrap_or_default();
        if self.mutations.single_neighbour {
            t.truncate(1);
        }
        t
    }

    fn relay(&mut self, bytes: Vec<u8>, mut covered: BTreeSet<u32>) {
        for t in self.targets() {
            if covered.insert(t) {
                self.out.push_back((t, bytes.clone()));
            }
        }
        self.relays.push(Relay { bytes, covered });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pump(fl: &mut [Flood], dead: &BTreeSet<u32>, got: &mut [Vec<(u32, Vec<u8>)>]) -> usize {
        let mut sent = 0;
        loop {
            let mut moved = false;
            for i in 0..fl.len() {
                if dead.contains(&fl[i].me) {
                    continue;
                }
                while let Some((to, bytes)) = fl[i].poll_transmit() {
                    moved = true;
                    sent += 1;
                    if dead.contains(&to) {
                        continue;
                    }
                    let from = fl[i].me;
                    let j = fl.iter().position(|f| f.me == to).unwrap();
                    if let Some(d) = fl[j].on_message(from, &bytes).unwrap() {
                        got[j].push(d);
                    }
                }
            }
            if !moved {
                return sent;
            }
        }
    }

    #[test]
    fn every_member_delivers_once_in_n_log_n_messages() {
        let members: Vec<u32> = (0..16).collect();
        let mut fl: Vec<Flood> = members.iter().map(|&r| Flood::new(r, &members)).collect();
        let mut got = vec![Vec::new(); 16];
        fl[5].originate(b"revoke 1");
        let sent = pump(&mut fl, &BTreeSet::new(), &mut got);
        assert!(sent <= 16 * 4, "{sent} messages");
        for (i, g) in got.iter().enumerate() {
            let want = if i == 5 { 0 } else { 1 };
            assert_eq!(g.len(), want, "rank {i}: {g:?}");
        }
        assert_eq!(got[0][0], (5, b"revoke 1".to_vec()));
    }

    #[test]
    fn a_dead_neighbour_is_routed_around_once_noticed() {
        let members: Vec<u32> = (0..8).collect();
        let mut fl: Vec<Flood> = members.iter().map(|&r| Flood::new(r, &members)).collect();
        for f in fl.iter_mut() {
            f.mutations.single_neighbour = true;
        }
        let dead: BTreeSet<u32> = [3].into();
        let mut got = vec![Vec::new(); 8];
        fl[2].originate(b"x");
        pump(&mut fl, &dead, &mut got);
        assert!(got[4].is_empty(), "the ring is cut at 3");
        for f in fl.iter_mut() {
            f.on_failure(3);
        }
        pump(&mut fl, &dead, &mut got);
        for (i, g) in got.iter().enumerate() {
            let want = usize::from(i != 2 && i != 3);
            assert_eq!(g.len(), want, "rank {i}");
        }
    }

    #[test]
    fn seen_serials_compact() {
        let mut s = Seen::default();
        assert!(s.insert(1));
        assert!(s.insert(0));
        assert!(!s.insert(1));
        assert_eq!((s.below, s.above.len()), (2, 0));
    }

    #[test]
    fn bad_messages_are_errors() {
        let mut f = Flood::new(1, &[0, 1, 2]);
        assert!(matches!(
            f.on_message(7, &encode_flood(0, 0, b"")),
            Err(FtDecodeError::NotAMember { rank: 7, .. })
        ));
        assert!(matches!(
            f.on_message(0, &encode_flood(9, 0, b"")),
            Err(FtDecodeError::NotAMember { rank: 9, .. })
        ));
        assert!(f.on_message(0, &[0xFB]).is_err());
        assert_eq!(
            f.on_message(0, &encode_flood(0, 0, b"a")).unwrap(),
            Some((0, b"a".to_vec()))
        );
        assert_eq!(f.on_message(2, &encode_flood(0, 0, b"a")).unwrap(), None);
    }
}
