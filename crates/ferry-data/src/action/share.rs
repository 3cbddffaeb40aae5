//! Switches between ranks of one node through shared containers (S3): the new owner copies
//! straight from the old owner's storage, one `memcpy` per box instead of pack, transfer and
//! unpack.
//!
//! Every pair (owner, reader) of a switch whose two ranks share a node, in a container kept in
//! node-shared memory, follows this protocol instead of sending the values (both sides decide
//! alike: same plan, same node numbers, same configuration):
//!
//! 1. The owner offers its current buffer: it stores a fresh epoch in its region's state word,
//!    then sends a control message (region id, buffer offset, epoch, and the owner-side place
//!    of every segment the reader needs). An owner without a shared region (its allocation
//!    failed) says so in the same message, and sends the values as a data message in step 2.
//! 2. The reader maps the region (once per container and peer), checks the state word, copies
//!    its segments, checks the word again, and answers `done`; if it cannot map the region it
//!    answers `nack` and gets the values as a data message in a third step; if the offer is
//!    not valid (withdrawn, out of bounds) it answers `failed`, and both sides report an error.
//! 3. The owner withdraws the offer (state word 0) when every reader has answered, or at once
//!    when the switch fails: it never writes its old buffer before that.
//!
//! So a peer never reads a region outside an offer of the current switch, and an owner that
//! gave up (a failed switch, a dead peer elsewhere, a container dropped) is seen by a reader
//! that is still copying: its second check fails, and it reports an error instead of using
//! what it read. A rank that died cannot make a new offer, so its memory is never read as
//! data of a later switch; recovery (`ferry-ft`) takes lost values from buddies, never from
//! a dead rank's region. Reductions keep the message path (their operands are folded from
//! receive buffers).
//!
//! Each completed copy is reported to the transport (`Transport::note_shared_copy`, by the
//! owner on `done` and by the reader after its copy), so that the monitor counts it as the
//! data message it replaces.

use ferry_core::element::as_bytes;
use ferry_core::element::as_bytes_mut;
use ferry_core::{
    Element, Error, ErrorKind, Exchange, MsgKey, MsgKind, RegionId, Result, SharedMemory,
    SharedRegion, Transport,
};

use super::{ActionSeq, BoxCopy};
use crate::storage::Published;

mod pull;
mod raw;
use pull::{pull, Refusal};
pub(crate) use raw::Bufs;

/// Pairs that move fewer bytes than this in a switch keep the message path: below it a message
/// goes inline through the shm rings (cheap copies), and the protocol's two control messages
/// cost more than they save (measured: a 23 KB halo row between 2 ranks took 0.04 ms as a
/// message, 0.08 ms shared; `docs/PERFORMANCE.md`). It equals the default
/// `shm.single_copy_threshold`, where the message path starts to copy through the kernel.
pub const SHARE_MIN_BYTES: usize = 32 * 1024;

/// Message kind of the sharing protocol's control messages (offers and answers): its own
/// flows, apart from the container's data messages (kind DATA, same tag).
pub(crate) const SHARE_KIND: MsgKind = MsgKind(4);

const CTRL_HEAD: usize = 72;
const PLACE_BYTES: usize = 32;
const CTRL_MAGIC: u64 = 0x4f48_5346; // "FSHO"
const OFFER: u64 = 1;
const NO_OFFER: u64 = 2;
const DONE: u64 = 1;
const NACK: u64 = 2;
const FAILED: u64 = 3;
/// What a reader still needs from an owner after the offers: values as a message in step 2
/// (the owner offered nothing) or step 3 (this rank could not map the owner's region).
const DATA_IN_STEP2: u8 = 1;
const DATA_IN_STEP3: u8 = 2;

/// What a switch on a shared container needs from the container.
pub(crate) struct ShareCtx<'a> {
    /// Maps peers' regions.
    pub mem: &'a dyn SharedMemory,
    /// This rank's offer (None: its storage is on the heap).
    pub offer: Option<Published>,
    /// Peers' regions mapped so far.
    pub maps: &'a mut PeerMaps,
    /// Pairs moving fewer bytes keep the message path ([`SHARE_MIN_BYTES`] by default).
    pub min_bytes: usize,
}

/// The peers' regions a container has mapped, one per peer (a peer that moved its storage to
/// a new region replaces the old mapping).
#[derive(Default)]
pub(crate) struct PeerMaps(Vec<(usize, SharedRegion)>);

impl PeerMaps {
    fn get(&mut self, mem: &dyn SharedMemory, peer: usize, id: &RegionId) -> Result<&SharedRegion> {
        let at = match self.0.iter().position(|(p, _)| *p == peer) {
            Some(i) if self.0[i].1.id() == *id => i,
            Some(i) => {
                self.0[i].1 = mem.map(peer, id)?;
                i
            }
            None => {
                self.0.push((peer, mem.map(peer, id)?));
                self.0.len() - 1
            }
        };
        Ok(&self.0[at].1)
    }

    /// Number of mappings held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// Per-sequence state of the protocol, built at the first shared execution.
pub(crate) struct SharePlan {
    key: MsgKey,
    send_shared: Vec<bool>,
    recv_shared: Vec<bool>,
    /// Control message to each send peer: header (filled per run) and the places.
    ctrl_out: Vec<Vec<u8>>,
    ctrl_in: Vec<Vec<u8>>,
    answer_out: Vec<[u8; 8]>,
    answer_in: Vec<[u8; 8]>,
    /// Per recv peer: what it still needs after the offers (0 nothing, or `DATA_IN_STEP*`).
    need: Vec<u8>,
    /// Per send peer: whether it gets data in step 3 (it answered nack).
    nacked: Vec<bool>,
}

fn put(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

/// The error both sides of a pair report when the other side's message or memory is not
/// what the protocol expects.
fn protocol(rank: usize, peer: usize, why: String) -> Error {
    Error::new(ErrorKind::Protocol, "switch")
        .on_rank(rank)
        .with_peer(peer)
        .with_detail(why)
}

/// A control buffer per peer: room for the header and a place per segment where the pair
/// shares, nothing where it does not.
fn ctrl_bufs(segments: impl Iterator<Item = usize>, shared: &[bool]) -> Vec<Vec<u8>> {
    segments
        .zip(shared)
        .map(|(n, &s)| vec![0u8; if s { CTRL_HEAD + PLACE_BYTES * n } else { 0 }])
        .collect()
}

impl<T: Element> ActionSeq<T> {
    fn share_plan(&mut self, t: &dyn Transport, min_bytes: usize) -> &mut SharePlan {
        if self.share.is_none() {
            let here = t.node_of(t.rank());
            // Reductions fold from receive buffers: they keep the message path.
            let ok = !self.transition.reduces();
            // Both sides of a pair decide alike: same plan (same length), same node numbers.
            let shares = |elems: usize, peer: usize| {
                ok && elems.saturating_mul(std::mem::size_of::<T>()) >= min_bytes
                    && t.node_of(peer) == here
            };
            let tr = &self.transition;
            let send_shared: Vec<bool> = tr.sends.iter().map(|p| shares(p.elems, p.peer)).collect();
            let recv_shared: Vec<bool> = tr.recvs.iter().map(|p| shares(p.elems, p.peer)).collect();
            let mut ctrl_out = ctrl_bufs(tr.sends.iter().map(|p| p.segments.len()), &send_shared);
            let ctrl_in = ctrl_bufs(tr.recvs.iter().map(|p| p.segments.len()), &recv_shared);
            let mut at = vec![CTRL_HEAD; ctrl_out.len()];
            for (i, c) in &self.pack {
                if !send_shared[*i] {
                    continue;
                }
                let buf = &mut ctrl_out[*i];
                let a = at[*i];
                put(buf, a, c.src.off as u64);
                for (d, st) in c.src.st.iter().enumerate() {
                    put(buf, a + 8 + 8 * d, *st as u64);
                }
                at[*i] += PLACE_BYTES;
            }
            let key = MsgKey::new(self.key.generation, SHARE_KIND, self.key.tag);
            self.share = Some(SharePlan {
                key,
                answer_out: vec![[0; 8]; recv_shared.len()],
                answer_in: vec![[0; 8]; send_shared.len()],
                need: vec![0; recv_shared.len()],
                nacked: vec![false; send_shared.len()],
                send_shared,
                recv_shared,
                ctrl_out,
                ctrl_in,
            });
        }
        self.share.as_mut().expect("built above")
    }

    /// Whether this sequence moves anything between ranks of one node (worth the protocol).
    pub(crate) fn shares_with_node(&mut self, t: &dyn Transport, min_bytes: usize) -> bool {
        let p = self.share_plan(t, min_bytes);
        p.send_shared.iter().chain(&p.recv_shared).any(|&s| s)
    }

    /// Runs the switch with the sharing protocol (module documentation). The local copies of
    /// a two-buffer switch run after the first messages went out.
    pub(crate) fn execute_shared(
        &mut self,
        t: &mut dyn Transport,
        mut bufs: Bufs<'_, T>,
        ctx: ShareCtx<'_>,
    ) -> Result<()> {
        let rank = t.rank();
        if bufs.old_len() < self.old_layout.total || bufs.new_len() < self.new_layout.total {
            return Err(out_of_layout().on_rank(rank));
        }
        let generic = self.generic;
        let ShareCtx {
            mem,
            offer,
            maps,
            min_bytes,
        } = ctx;
        self.share_plan(&*t, min_bytes);
        // Step 1: offers (or data, to peers on other nodes) out, offers and data in.
        {
            let plan = self.share.as_mut().expect("built");
            for (i, buf) in plan.ctrl_out.iter_mut().enumerate() {
                if !plan.send_shared[i] {
                    continue;
                }
                let (kind, epoch, id, base, len) = match offer {
                    Some(p) => (OFFER, p.epoch, p.id, p.base, p.len),
                    None => (NO_OFFER, 0, RegionId::default(), 0, 0),
                };
                put(buf, 0, CTRL_MAGIC | kind << 32);
                put(buf, 8, std::mem::size_of::<T>() as u64);
                put(buf, 16, epoch);
                for (k, w) in id.0.iter().enumerate() {
                    put(buf, 24 + 8 * k, *w);
                }
                put(buf, 56, base as u64);
                put(buf, 64, len as u64);
            }
            plan.nacked.iter_mut().for_each(|n| *n = false);
            plan.need.iter_mut().for_each(|n| *n = 0);
        }
        {
            let plan = self.share.as_ref().expect("built");
            pack_where(&self.pack, &mut self.send_bufs, &bufs, generic, |i| {
                !plan.send_shared[i]
            })
            .map_err(|e| e.on_rank(rank))?;
        }
        {
            let plan = self.share.as_mut().expect("built");
            let mut ex = Exchange::new();
            for (i, &peer) in self.send_peers.iter().enumerate() {
                if plan.send_shared[i] {
                    ex.send(peer, plan.key, &plan.ctrl_out[i]);
                } else {
                    ex.send(peer, self.key, as_bytes(&self.send_bufs[i]));
                }
            }
            for ((j, &peer), (buf, ctrl)) in self
                .recv_peers
                .iter()
                .enumerate()
                .zip(self.recv_bufs.iter_mut().zip(plan.ctrl_in.iter_mut()))
            {
                if plan.recv_shared[j] {
                    ex.recv_into(peer, plan.key, ctrl);
                } else {
                    ex.recv_into(peer, self.key, as_bytes_mut(buf));
                }
            }
            let done = match t.progress_exchange(&mut ex) {
                Ok(done) => done,
                Err(e) => {
                    // Nothing of a failed switch may still be offered to a peer.
                    t.abandon_exchange(&mut ex, &e);
                    return Err(e.context("switch"));
                }
            };
            if bufs.is_two() {
                for c in &self.local {
                    if !bufs.local(c, generic) {
                        let e = out_of_layout().on_rank(rank);
                        t.abandon_exchange(&mut ex, &e);
                        return Err(e);
                    }
                }
            }
            if !done {
                t.exchange(&mut ex).map_err(|e| e.context("switch"))?;
            }
        }
        let plan = self.share.as_mut().expect("built");
        unpack_where(&self.unpack, &self.recv_bufs, &mut bufs, generic, |j| {
            !plan.recv_shared[j]
        })
        .map_err(|e| e.on_rank(rank))?;
        let plan = self.share.as_mut().expect("built");
        // Step 2: take the offers, answer them; data from owners that offered nothing.
        let mut failure: Option<Error> = None;
        for (j, &peer) in self.recv_peers.iter().enumerate() {
            if !plan.recv_shared[j] {
                continue;
            }
            let ctrl = &plan.ctrl_in[j];
            let head = get(ctrl, 0);
            let answer = if head == CTRL_MAGIC | NO_OFFER << 32 {
                plan.need[j] = DATA_IN_STEP2;
                0
            } else if head != CTRL_MAGIC | OFFER << 32 {
                let why = format!("rank {peer} sent no valid offer ({head:#x})");
                failure.get_or_insert(protocol(rank, peer, why));
                FAILED
            } else {
                let pulls = self.unpack.iter().filter(|(k, _)| *k == j).map(|(_, c)| c);
                match pull(ctrl, peer, rank, mem, maps, pulls, &mut bufs, generic) {
                    Ok(()) => {
                        let bytes = as_bytes(&self.recv_bufs[j]).len();
                        if let Err(e) = t.note_shared_copy(peer, self.key, bytes, false) {
                            failure.get_or_insert(e);
                        }
                        DONE
                    }
                    Err(Refusal::Map(e)) => {
                        tracing::debug!(
                            "rank {rank}: cannot map rank {peer}'s container, taking a copy: {e}"
                        );
                        plan.need[j] = DATA_IN_STEP3;
                        NACK
                    }
                    Err(Refusal::Invalid(e)) => {
                        failure.get_or_insert(e);
                        FAILED
                    }
                }
            };
            put(&mut plan.answer_out[j], 0, answer);
        }
        let offered = offer.is_some();
        pack_where(&self.pack, &mut self.send_bufs, &bufs, generic, |i| {
            plan.send_shared[i] && !offered
        })
        .map_err(|e| e.on_rank(rank))?;
        {
            let mut ex = Exchange::new();
            for (i, &peer) in self.send_peers.iter().enumerate() {
                if plan.send_shared[i] && !offered {
                    ex.send(peer, self.key, as_bytes(&self.send_bufs[i]));
                }
            }
            for (j, &peer) in self.recv_peers.iter().enumerate() {
                if plan.recv_shared[j] && plan.need[j] != DATA_IN_STEP2 {
                    ex.send(peer, plan.key, &plan.answer_out[j]);
                }
            }
            for ((j, &peer), buf) in self.recv_peers.iter().enumerate().zip(&mut self.recv_bufs) {
                if plan.need[j] == DATA_IN_STEP2 {
                    ex.recv_into(peer, self.key, as_bytes_mut(buf));
                }
            }
            for ((i, &peer), ans) in self
                .send_peers
                .iter()
                .enumerate()
                .zip(plan.answer_in.iter_mut())
            {
                if plan.send_shared[i] && offered {
                    ex.recv_into(peer, plan.key, ans);
                }
            }
            t.exchange(&mut ex).map_err(|e| e.context("switch"))?;
        }
        let mut third = false;
        for (i, &peer) in self.send_peers.iter().enumerate() {
            if !(plan.send_shared[i] && offered) {
                continue;
            }
            match get(&plan.answer_in[i], 0) {
                DONE => {
                    let bytes = as_bytes(&self.send_bufs[i]).len();
                    if let Err(e) = t.note_shared_copy(peer, self.key, bytes, true) {
                        failure.get_or_insert(e);
                    }
                }
                NACK => {
                    plan.nacked[i] = true;
                    third = true;
                }
                other => {
                    let why =
                        format!("rank {peer} could not take this rank's values (answer {other})");
                    failure.get_or_insert(protocol(rank, peer, why));
                }
            }
        }
        third |= plan.need.contains(&DATA_IN_STEP3);
        // Step 3: values as messages for readers that could not map this rank's region.
        if third {
            pack_where(&self.pack, &mut self.send_bufs, &bufs, generic, |i| {
                plan.nacked[i]
            })
            .map_err(|e| e.on_rank(rank))?;
            let mut ex = Exchange::new();
            for (i, &peer) in self.send_peers.iter().enumerate() {
                if plan.nacked[i] {
                    ex.send(peer, self.key, as_bytes(&self.send_bufs[i]));
                }
            }
            for ((j, &peer), buf) in self.recv_peers.iter().enumerate().zip(&mut self.recv_bufs) {
                if plan.need[j] == DATA_IN_STEP3 {
                    ex.recv_into(peer, self.key, as_bytes_mut(buf));
                }
            }
            t.exchange(&mut ex).map_err(|e| e.context("switch"))?;
        }
        unpack_where(&self.unpack, &self.recv_bufs, &mut bufs, generic, |j| {
            plan.need[j] != 0
        })
        .map_err(|e| e.on_rank(rank))?;
        if let Some(e) = failure {
            return Err(e);
        }
        self.runs += 1;
        Ok(())
    }
}

/// A box of the bound plan does not fit the buffers it runs on (the container's storage
/// changed under the sequence).
fn out_of_layout() -> Error {
    Error::invalid(
        "switch",
        "container storage does not match the action sequence's layouts",
    )
}

/// Packs the boxes of the send peers `which(i)` selects from the old buffer into their
/// message buffers.
fn pack_where<T: Element>(
    pack: &[(usize, BoxCopy)],
    out: &mut [Vec<T>],
    bufs: &Bufs<'_, T>,
    generic: bool,
    which: impl Fn(usize) -> bool,
) -> Result<()> {
    for (i, c) in pack {
        if which(*i) && !bufs.pack(c, &mut out[*i], generic) {
            return Err(out_of_layout());
        }
    }
    Ok(())
}

/// Unpacks the messages of the recv peers `which(j)` selects into the new buffer.
fn unpack_where<T: Element>(
    unpack: &[(usize, BoxCopy)],
    msgs: &[Vec<T>],
    bufs: &mut Bufs<'_, T>,
    generic: bool,
    which: impl Fn(usize) -> bool,
) -> Result<()> {
    for (j, c) in unpack {
        if which(*j) && !bufs.unpack(&msgs[*j], c, generic) {
            return Err(out_of_layout());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferry_core::mem::MemTransport;
    use ferry_core::{Error, RegionId, Result, SharedMemory, SharedRegion, Transport};

    use crate::{Container, DataFlow, Instance, Partitioner, Partitioning, Space};

    /// Shared memory that refuses to allocate or to map (on the ranks a test picks).
    struct Refusing {
        inner: Arc<dyn SharedMemory>,
        alloc: bool,
        map: bool,
    }

    impl SharedMemory for Refusing {
        fn alloc(&self, len: usize) -> Result<SharedRegion> {
            if !self.alloc {
                return Err(Error::invalid("shared alloc", "refused by the test"));
            }
            self.inner.alloc(len)
        }
        fn map(&self, owner: usize, id: &RegionId) -> Result<SharedRegion> {
            if !self.map {
                return Err(Error::invalid("shared map", "refused by the test"));
            }
            self.inner.map(owner, id)
        }
    }

    /// Two ranks switch a small container rows -> halo (in place) -> columns (two buffers)
    /// with rank 1 unable to allocate (`alloc` false: it offers nothing) or to map (`map`
    /// false: it answers nack); every cell must arrive all the same.
    fn degraded(alloc: bool, map: bool) {
        MemTransport::run(2, |mut t| {
            let mut inst = Instance::for_transport(&t).unwrap();
            let inner = t.shared_memory().unwrap();
            let one = t.rank() == 1;
            inst.set_shared_memory(Some(Arc::new(Refusing {
                inner,
                alloc: alloc || !one,
                map: map || !one,
            })));
            inst.set_share_min_bytes(0);
            let s = Space::new2(6, 4).unwrap();
            let w = inst.world().clone();
            let rows = Partitioning::new(&s, &w, &Partitioner::Grid { blocks: [1, 2, 1] }).unwrap();
            let halo = Partitioning::derived(&s, &Partitioner::Halo { depth: 1 }, &rows).unwrap();
            let cols = Partitioning::new(&s, &w, &Partitioner::Grid { blocks: [2, 1, 1] }).unwrap();
            let mut c = Container::<u32>::new(&mut inst, "d", &s);
            c.share_layout(&rows, &halo).unwrap();
            c.switch_to(&mut t, &rows, DataFlow::None, None).unwrap();
            assert_eq!(c.in_shared_memory(), alloc || !one, "rank {}", t.rank());
            for r in c.my_ranges().to_vec() {
                for y in r.from()[1]..r.to()[1] {
                    for x in r.from()[0]..r.to()[0] {
                        c.set(&[x, y, 0], (10 * y + x) as u32).unwrap();
                    }
                }
            }
            for p in [&halo, &cols] {
                c.switch_to(&mut t, p, DataFlow::Preserve, None).unwrap();
                for r in c.my_ranges().to_vec() {
                    for y in r.from()[1]..r.to()[1] {
                        for x in r.from()[0]..r.to()[0] {
                            assert_eq!(c.get(&[x, y, 0]).unwrap(), (10 * y + x) as u32);
                        }
                    }
                }
            }
        });
    }

    #[test]
    fn an_owner_without_shared_storage_still_delivers() {
        degraded(false, true);
    }

    #[test]
    fn a_reader_that_cannot_map_still_receives() {
        degraded(true, false);
    }

    /// Ranks as threads of one process, a halo switch in place: each rank writes its received
    /// halo cells into the very buffer its neighbour copies border cells from. Run under Miri
    /// (`.ci/miri`) this is the check that no reference to that buffer is live meanwhile.
    #[test]
    fn in_place_shared_switches_between_threads_deliver_the_halo() {
        let out = MemTransport::run(2, |mut t| {
            let mut inst = Instance::for_transport(&t).unwrap();
            inst.set_shared_memory(t.shared_memory());
            inst.set_share_min_bytes(0);
            let s = Space::new2(6, 4).unwrap();
            let w = inst.world().clone();
            let rows = Partitioning::new(&s, &w, &Partitioner::Grid { blocks: [1, 2, 1] }).unwrap();
            let halo = Partitioning::derived(&s, &Partitioner::Halo { depth: 1 }, &rows).unwrap();
            let mut c = Container::<u32>::new(&mut inst, "h", &s);
            c.share_layout(&rows, &halo).unwrap();
            c.switch_to(&mut t, &rows, DataFlow::None, None).unwrap();
            assert!(c.in_shared_memory());
            for r in c.my_ranges().to_vec() {
                for y in r.from()[1]..r.to()[1] {
                    for x in r.from()[0]..r.to()[0] {
                        c.set(&[x, y, 0], (10 * y + x) as u32).unwrap();
                    }
                }
            }
            let mut there = c.prepare(&halo, DataFlow::Preserve, false).unwrap();
            assert!(there.in_place(), "the halo switch must run in place");
            c.run(&mut t, &mut there, None).unwrap();
            // The first row beyond this rank's block came from the neighbour.
            let y = if t.rank() == 0 { 2 } else { 1 };
            (0..6)
                .map(|x| c.get(&[x, y, 0]).unwrap())
                .collect::<Vec<_>>()
        });
        assert_eq!(out[0], [20, 21, 22, 23, 24, 25]);
        assert_eq!(out[1], [10, 11, 12, 13, 14, 15]);
    }
}
