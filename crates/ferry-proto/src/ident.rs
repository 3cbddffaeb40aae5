//! Message identifiers (M2; seed 000 §4.5.4).
//!
//! A *flow* is every message from one rank to another with the same [`MsgKey`]. Within a flow the
//! sender numbers messages 0, 1, 2, ...; the receiver numbers its receives the same way, so the
//! n-th receive of a flow takes the n-th message of that flow whatever order the network delivers
//! them in (for example after a connection was evicted and re-opened).

use crate::fasthash::FastMap;

/// What layer a message belongs to. Keeps user traffic, collectives and control traffic of the
/// same communicator from ever matching each other.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MsgKind(pub u8);

impl MsgKind {
    /// Point-to-point messages of the user program.
    pub const USER: MsgKind = MsgKind(0);
    /// Messages of collective operations (barrier, broadcast, reductions, ...).
    pub const COLLECTIVE: MsgKind = MsgKind(1);
    /// Data-layer transitions (container switches).
    pub const DATA: MsgKind = MsgKind(2);
    /// Library control traffic (shutdown, key-value store, membership).
    pub const CONTROL: MsgKind = MsgKind(3);
}

/// The part of a message identifier that the program chooses: communicator generation, kind and
/// tag. Source and destination complete it into a flow.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MsgKey {
    /// Generation of the communicator (group) the message belongs to; a new group gets a new
    /// generation so that stale messages of an old group never match.
    pub generation: u32,
    /// Layer the message belongs to.
    pub kind: MsgKind,
    /// Program- or algorithm-chosen tag.
    pub tag: u32,
}

impl MsgKey {
    /// A key of kind [`MsgKind::USER`] in generation 0, the common case for point-to-point code.
    pub const fn user(tag: u32) -> MsgKey {
        MsgKey {
            generation: 0,
            kind: MsgKind::USER,
            tag,
        }
    }

    /// A key with every field given.
    pub const fn new(generation: u32, kind: MsgKind, tag: u32) -> MsgKey {
        MsgKey {
            generation,
            kind,
            tag,
        }
    }
}

/// Serial-number bookkeeping for one rank: the next serial to send on each outgoing flow and the
/// next serial to expect on each incoming flow.
#[derive(Debug, Default, Clone)]
pub struct FlowTable {
    next_send: FastMap<(usize, MsgKey), u64>,
    next_recv: FastMap<(usize, MsgKey), u64>,
}

impl FlowTable {
    /// An empty table: every flow starts at serial 0.
    pub fn new() -> FlowTable {
        FlowTable::default()
    }

    /// Takes the serial number for the next message to `dest` with `key`.
    pub fn take_send_serial(&mut self, dest: usize, key: MsgKey) -> u64 {
        let counter = self.next_send.entry((dest, key)).or_insert(0);
        let serial = *counter;
        *counter += 1;
        serial
    }

    /// Takes the serial number the next receive from `source` with `key` must match.
    pub fn take_recv_serial(&mut self, source: usize, key: MsgKey) -> u64 {
        let counter = self.next_recv.entry((source, key)).or_insert(0);
        let serial = *counter;
        *counter += 1;
        serial
    }

    /// The serial the next receive of flow (`source`, `key`) will take: how many receives of
    /// the flow were posted so far.
    pub fn next_recv(&self, source: usize, key: MsgKey) -> u64 {
        self.next_recv.get(&(source, key)).copied().unwrap_or(0)
    }

    /// Every flow's counters: (peer, key, next send serial, next receive serial), sorted.
    pub fn counters(&self) -> Vec<(usize, MsgKey, u64, u64)> {
        let mut all: std::collections::BTreeMap<(usize, MsgKey), (u64, u64)> =
            std::collections::BTreeMap::new();
        for (&k, &n) in &self.next_send {
            all.entry(k).or_default().0 = n;
        }
        for (&k, &n) in &self.next_recv {
            all.entry(k).or_default().1 = n;
        }
        all.into_iter()
            .map(|((p, k), (s, r))| (p, k, s, r))
            .collect()
    }

    /// Sets the counters of flow (`peer`, `key`) (a restart resuming from a checkpoint).
    pub fn set_counters(&mut self, peer: usize, key: MsgKey, next_send: u64, next_recv: u64) {
        self.next_send.insert((peer, key), next_send);
        self.next_recv.insert((peer, key), next_recv);
    }

    /// The receive counters of every flow from `source` (key, next serial), sorted by key.
    pub fn recv_counters_from(&self, source: usize) -> Vec<(MsgKey, u64)> {
        let mut v: Vec<(MsgKey, u64)> = self
            .next_recv
            .iter()
            .filter(|((s, _), _)| *s == source)
            .map(|((_, k), &n)| (*k, n))
            .collect();
        v.sort_unstable();
        v
    }

    /// The serial the next send of flow (`dest`, `key`) will take.
    pub fn next_send(&self, dest: usize, key: MsgKey) -> u64 {
        self.next_send.get(&(dest, key)).copied().unwrap_or(0)
    }

    /// Every outgoing flow with state: (peer, key, next send serial), in no particular order.
    pub fn send_flows(&self) -> impl Iterator<Item = (usize, MsgKey, u64)> + '_ {
        self.next_send.iter().map(|(&(p, k), &n)| (p, k, n))
    }

    /// Number of outgoing flows with state.
    pub fn send_len(&self) -> usize {
        self.next_send.len()
    }

    /// Forgets the send counter of flow (`dest`, `key`): its next message takes serial 0.
    pub fn forget_send(&mut self, dest: usize, key: MsgKey) {
        self.next_send.remove(&(dest, key));
    }

    /// Forgets the receive counter of flow (`source`, `key`): its next receive takes serial 0.
    pub fn forget_recv(&mut self, source: usize, key: MsgKey) {
        self.next_recv.remove(&(source, key));
    }

    /// Whether flow (`source`, `key`) has a receive counter.
    pub fn has_recv(&self, source: usize, key: MsgKey) -> bool {
        self.next_recv.contains_key(&(source, key))
    }

    /// Forgets every flow whose key `retired` selects (their messages were all sent and
    /// received and none will follow), keeping the table bounded.
    pub fn retire_where(&mut self, retired: impl Fn(&MsgKey) -> bool) {
        self.next_send.retain(|(_, k), _| !retired(k));
        self.next_recv.retain(|(_, k), _| !retired(k));
    }

    /// Number of flows (outgoing plus incoming) with state.
    pub fn len(&self) -> usize {
        self.next_send.len() + self.next_recv.len()
    }

    /// Whether no flow has state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every flow of generations older than `generation` (their messages can no longer
    /// be wanted once a communicator is replaced), keeping the table bounded.
    pub fn retire_generations_before(&mut self, generation: u32) {
        self.next_send
            .retain(|(_, k), _| k.generation >= generation);
        self.next_recv
            .retain(|(_, k), _| k.generation >= generation);
    }
}

/// Receive-side numbering for a transport that delivers every sender's messages in the order
/// they were sent (a FIFO channel per pair: the in-memory backend, messages to self).
///
/// There a message's place in its flow is known on arrival, so the sender keeps no counter and
/// puts no serial on the wire: the receiver numbers the arrivals of each flow 0, 1, 2, ... and
/// its posted receives the same way, exactly as [`FlowTable`] would. A flow's entry lives only
/// while something of it is outstanding (a message that arrived and was not taken yet, or a
/// receive posted whose message has not arrived or not been taken yet). Once every arrival was
/// taken by a receive the entry is forgotten, and the flow starts again at 0 on both sides,
/// consistently: the sender's next message is the next arrival, which the receiver numbers 0,
/// and the receiver's next receive takes serial 0. A program that uses a new tag for every
/// message therefore keeps the table at the size of what is in flight (issue 05, "bounded
/// state"), with no handshake.
///
/// Not for transports whose channel can reorder two messages of one flow (the shared-memory
/// rings let a small message pass a large one that waits; tcp resends after a reconnect).
#[derive(Debug, Default, Clone)]
pub struct FifoFlows {
    flows: FastMap<(usize, MsgKey), FifoFlow>,
}

/// The outstanding part of one flow.
#[derive(Debug, Default, Clone, Copy)]
struct FifoFlow {
    /// Messages that arrived (the next arrival's serial).
    arrived: u64,
    /// Receives posted (the next receive's serial).
    posted: u64,
    /// Receives that took their message.
    taken: u64,
}

impl FifoFlows {
    /// An empty table.
    pub fn new() -> FifoFlows {
        FifoFlows::default()
    }

    /// Numbers the next message of flow (`source`, `key`) to arrive; call in arrival order.
    pub fn arrive(&mut self, source: usize, key: MsgKey) -> u64 {
        let f = self.flows.entry((source, key)).or_default();
        let serial = f.arrived;
        f.arrived += 1;
        serial
    }

    /// Takes the serial the next receive of flow (`source`, `key`) must match.
    pub fn post(&mut self, source: usize, key: MsgKey) -> u64 {
        let f = self.flows.entry((source, key)).or_default();
        let serial = f.posted;
        f.posted += 1;
        serial
    }

    /// A receive of flow (`source`, `key`) took its message (or failed after taking it).
    /// Forgets the flow when nothing of it is outstanding any more.
    pub fn taken(&mut self, source: usize, key: MsgKey) {
        let k = (source, key);
        let Some(f) = self.flows.get_mut(&k) else {
            return;
        };
        f.taken += 1;
        if f.taken == f.arrived && f.taken == f.posted {
            self.flows.remove(&k);
        }
    }

    /// Forgets every flow whose key `retired` selects (`Transport::retire_flows`: no message of
    /// those flows will be sent or received any more).
    pub fn retire_where(&mut self, retired: impl Fn(&MsgKey) -> bool) {
        self.flows.retain(|(_, k), _| !retired(k));
    }

    /// Number of flows with state.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// Whether no flow has state.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_count_per_flow_independently() {
        let mut t = FlowTable::new();
        let a = MsgKey::user(1);
        let b = MsgKey::user(2);
        assert_eq!(t.take_send_serial(1, a), 0);
        assert_eq!(t.take_send_serial(1, a), 1);
        assert_eq!(t.take_send_serial(2, a), 0);
        assert_eq!(t.take_send_serial(1, b), 0);
        assert_eq!(t.take_recv_serial(1, a), 0);
        assert_eq!(t.take_recv_serial(1, a), 1);
    }

    #[test]
    fn retiring_generations_resets_only_old_flows() {
        let mut t = FlowTable::new();
        let old = MsgKey::new(1, MsgKind::DATA, 0);
        let new = MsgKey::new(2, MsgKind::DATA, 0);
        t.take_send_serial(0, old);
        t.take_send_serial(0, new);
        t.retire_generations_before(2);
        assert_eq!(t.take_send_serial(0, old), 0);
        assert_eq!(t.take_send_serial(0, new), 1);
    }

    #[test]
    fn retiring_selected_flows_forgets_only_them() {
        let mut t = FlowTable::new();
        let a = MsgKey::new(5, MsgKind::DATA, 1);
        let b = MsgKey::new(6, MsgKind::DATA, 1);
        t.take_send_serial(0, a);
        t.take_recv_serial(1, a);
        t.take_send_serial(0, b);
        assert_eq!(t.len(), 3);
        t.retire_where(|k| k.generation == 5);
        assert_eq!(t.len(), 1);
        assert_eq!(t.take_recv_serial(1, a), 0);
        assert_eq!(t.take_send_serial(0, b), 1);
    }

    #[test]
    fn fifo_flows_forget_a_flow_once_everything_was_taken() {
        let mut t = FifoFlows::new();
        let k = MsgKey::user(9);
        // A receive posted before its message, then one that finds its message waiting.
        assert_eq!(t.post(1, k), 0);
        assert_eq!(t.arrive(1, k), 0);
        assert_eq!(t.arrive(1, k), 1);
        t.taken(1, k);
        assert_eq!(t.len(), 1, "message 1 is still waiting");
        assert_eq!(t.post(1, k), 1);
        t.taken(1, k);
        assert!(t.is_empty());
        // Reused: both sides start again at 0.
        assert_eq!(t.arrive(1, k), 0);
        assert_eq!(t.post(1, k), 0);
        t.taken(1, k);
        assert!(t.is_empty());
        // Other sources and keys are separate flows.
        t.arrive(2, k);
        t.arrive(1, MsgKey::user(10));
        assert_eq!(t.len(), 2);
        t.retire_where(|key| key.tag == 10);
        assert_eq!(t.len(), 1);
    }
}
