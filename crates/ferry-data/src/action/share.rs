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

use std::sync::atomic::{fence, AtomicU64, Ordering};

use ferry_core::element::as_bytes;
use ferry_core::element::as_bytes_mut;
use ferry_core::{
    Element, Error, ErrorKind, Exchange, MsgKey, MsgKind, RegionId, Result, SharedMemory,
    SharedRegion, Transport,
};

use super::{copy_box, ActionSeq, BoxCopy, Place};
use crate::storage::{Published, HEADER, MAGIC, STATE};
use crate::MAX_DIMS;

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

/// The buffers of one execution: separate old and new, or one buffer (in place).
pub(crate) enum Bufs<'a, T> {
    Two(&'a [T], &'a mut [T]),
    One(&'a mut [T]),
}

impl<T> Bufs<'_, T> {
    fn old(&self) -> &[T] {
        match self {
            Bufs::Two(o, _) => o,
            Bufs::One(d) => d,
        }
    }
    fn new_mut(&mut self) -> &mut [T] {
        match self {
            Bufs::Two(_, n) => n,
            Bufs::One(d) => d,
        }
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

/// Highest element offset a place reaches for a box of extents `ext`, or None if the place
/// (from a peer's message) overflows.
fn reach(p: &Place, ext: [usize; MAX_DIMS]) -> Option<usize> {
    let mut last = p.off;
    for (e, st) in ext.iter().zip(p.st) {
        last = last.checked_add(e.checked_sub(1)?.checked_mul(st)?)?;
    }
    Some(last)
}

/// Copies a box from raw memory (a peer's region) into `dst`, row by row.
///
/// # Safety
/// Every element `s.off + x*s.st[0] + y*s.st[1] + z*s.st[2]` of the box must be readable at
/// `src` for the whole call (the caller checked `reach(s, ext) < available`), and `d` must lie
/// inside `dst` (checked when the sequence was bound).
unsafe fn copy_box_raw<T: Element>(
    src: *const T,
    s: Place,
    dst: &mut [T],
    d: Place,
    ext: [usize; MAX_DIMS],
    generic: bool,
) {
    let [ex, ey, ez] = ext;
    for z in 0..ez {
        for y in 0..ey {
            let so = s.off + y * s.st[1] + z * s.st[2];
            let dof = d.off + y * d.st[1] + z * d.st[2];
            if !generic && s.st[0] == 1 && d.st[0] == 1 {
                let row = &mut dst[dof..dof + ex];
                // SAFETY: the caller guarantees `ex` readable elements from `src + so`; the
                // destination row is a slice of our own buffer, not the peer's region.
                unsafe { std::ptr::copy_nonoverlapping(src.add(so), row.as_mut_ptr(), ex) };
            } else {
                for x in 0..ex {
                    // SAFETY: as above, element by element.
                    dst[dof + x * d.st[0]] = unsafe { src.add(so + x * s.st[0]).read() };
                }
            }
        }
    }
}

/// Why an offer could not be taken.
enum Refusal {
    /// The region cannot be mapped here: take the values as a message.
    Map(Error),
    /// The offer is not valid: the switch fails.
    Invalid(Error),
}

impl<T: Element> ActionSeq<T> {
    fn share_plan(&mut self, t: &dyn Transport, min_bytes: usize) -> &mut SharePlan {
        if self.share.is_none() {
            let here = t.node_of(t.rank());
            // Reductions fold from receive buffers: they keep the message path.
            let ok = !self.transition.reduces();
            // Both sides of a pair decide alike: same plan (same length), same node numbers.
            let big = |elems: usize| elems.saturating_mul(std::mem::size_of::<T>()) >= min_bytes;
            let send_shared: Vec<bool> = self
                .transition
                .sends
                .iter()
                .map(|p| ok && big(p.elems) && t.node_of(p.peer) == here)
                .collect();
            let recv_shared: Vec<bool> = self
                .transition
                .recvs
                .iter()
                .map(|p| ok && big(p.elems) && t.node_of(p.peer) == here)
                .collect();
            let mut ctrl_out: Vec<Vec<u8>> = self
                .transition
                .sends
                .iter()
                .zip(&send_shared)
                .map(|(p, &s)| {
                    vec![
                        0u8;
                        if s {
                            CTRL_HEAD + PLACE_BYTES * p.segments.len()
                        } else {
                            0
                        }
                    ]
                })
                .collect();
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
            let ctrl_in = self
                .transition
                .recvs
                .iter()
                .zip(&recv_shared)
                .map(|(p, &s)| {
                    vec![
                        0u8;
                        if s {
                            CTRL_HEAD + PLACE_BYTES * p.segments.len()
                        } else {
                            0
                        }
                    ]
                })
                .collect();
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

    /// Runs the switch with the sharing protocol (module documentation). `local` runs after
    /// the first messages went out (the local copies of a two-buffer switch).
    pub(crate) fn execute_shared(
        &mut self,
        t: &mut dyn Transport,
        mut bufs: Bufs<'_, T>,
        ctx: ShareCtx<'_>,
    ) -> Result<()> {
        let rank = t.rank();
        if bufs.old().len() < self.old_layout.total || bufs.new_mut().len() < self.new_layout.total
        {
            return Err(Error::invalid(
                "switch",
                "container storage does not match the action sequence's layouts",
            )
            .on_rank(rank));
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
        for (i, c) in &self.pack {
            let plan = self.share.as_ref().expect("built");
            if !plan.send_shared[*i] {
                copy_box(
                    bufs.old(),
                    c.src,
                    &mut self.send_bufs[*i],
                    c.dst,
                    c.ext,
                    generic,
                );
            }
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
            let done = t
                .progress_exchange(&mut ex)
                .map_err(|e| e.context("switch"))?;
            if let Bufs::Two(old, new) = &mut bufs {
                for c in &self.local {
                    copy_box(old, c.src, new, c.dst, c.ext, generic);
                }
            }
            if !done {
                t.exchange(&mut ex).map_err(|e| e.context("switch"))?;
            }
        }
        let plan = self.share.as_mut().expect("built");
        for (j, c) in &self.unpack {
            if !plan.recv_shared[*j] {
                copy_box(
                    &self.recv_bufs[*j],
                    c.src,
                    bufs.new_mut(),
                    c.dst,
                    c.ext,
                    generic,
                );
            }
        }
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
                failure.get_or_insert(
                    Error::new(ErrorKind::Protocol, "switch")
                        .on_rank(rank)
                        .with_peer(peer)
                        .with_detail(format!("rank {peer} sent no valid offer ({head:#x})")),
                );
                FAILED
            } else {
                let pulls = self.unpack.iter().filter(|(k, _)| *k == j).map(|(_, c)| c);
                match pull(ctrl, peer, rank, mem, maps, pulls, bufs.new_mut(), generic) {
                    Ok(()) => DONE,
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
        for (i, c) in &self.pack {
            if plan.send_shared[*i] && offer.is_none() {
                copy_box(
                    bufs.old(),
                    c.src,
                    &mut self.send_bufs[*i],
                    c.dst,
                    c.ext,
                    generic,
                );
            }
        }
        {
            let mut ex = Exchange::new();
            for (i, &peer) in self.send_peers.iter().enumerate() {
                if plan.send_shared[i] && offer.is_none() {
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
                if plan.send_shared[i] && offer.is_some() {
                    ex.recv_into(peer, plan.key, ans);
                }
            }
            t.exchange(&mut ex).map_err(|e| e.context("switch"))?;
        }
        let mut third = false;
        for (i, &peer) in self.send_peers.iter().enumerate() {
            if !(plan.send_shared[i] && offer.is_some()) {
                continue;
            }
            match get(&plan.answer_in[i], 0) {
                DONE => {}
                NACK => {
                    plan.nacked[i] = true;
                    third = true;
                }
                other => {
                    failure.get_or_insert(
                        Error::new(ErrorKind::Protocol, "switch")
                            .on_rank(rank)
                            .with_peer(peer)
                            .with_detail(format!(
                                "rank {peer} could not take this rank's values (answer {other})"
                            )),
                    );
                }
            }
        }
        third |= plan.need.contains(&DATA_IN_STEP3);
        // Step 3: values as messages for readers that could not map this rank's region.
        if third {
            for (i, c) in &self.pack {
                if plan.nacked[*i] {
                    copy_box(
                        bufs.old(),
                        c.src,
                        &mut self.send_bufs[*i],
                        c.dst,
                        c.ext,
                        generic,
                    );
                }
            }
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
        for (j, c) in &self.unpack {
            if plan.need[*j] != 0 {
                copy_box(
                    &self.recv_bufs[*j],
                    c.src,
                    bufs.new_mut(),
                    c.dst,
                    c.ext,
                    generic,
                );
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        self.runs += 1;
        Ok(())
    }
}

/// Takes one offer: maps the owner's region, checks it, copies the reader's boxes.
#[allow(clippy::too_many_arguments)]
fn pull<'c, T: Element>(
    ctrl: &[u8],
    peer: usize,
    rank: usize,
    mem: &dyn SharedMemory,
    maps: &mut PeerMaps,
    pulls: impl Iterator<Item = &'c BoxCopy>,
    new: &mut [T],
    generic: bool,
) -> std::result::Result<(), Refusal> {
    let invalid = |why: String| {
        Refusal::Invalid(
            Error::new(ErrorKind::Protocol, "switch")
                .on_rank(rank)
                .with_peer(peer)
                .with_detail(why),
        )
    };
    let size = std::mem::size_of::<T>();
    if get(ctrl, 8) != size as u64 {
        return Err(invalid(format!(
            "rank {peer} offers elements of {} bytes, this container's have {size}",
            get(ctrl, 8)
        )));
    }
    let epoch = get(ctrl, 16);
    let id = RegionId([get(ctrl, 24), get(ctrl, 32), get(ctrl, 40), get(ctrl, 48)]);
    let base = get(ctrl, 56);
    let region = maps.get(mem, peer, &id).map_err(Refusal::Map)?;
    let len = region.len();
    let base = usize::try_from(base)
        .ok()
        .filter(|&b| b >= HEADER && b <= len && b.is_multiple_of(std::mem::align_of::<T>().max(8)));
    let Some(base) = base else {
        return Err(invalid(format!(
            "rank {peer} offers a buffer outside its region of {len} bytes"
        )));
    };
    // The offered buffer only: a bad place cannot reach the owner's other buffer either.
    let avail = ((len - base) / size).min(usize::try_from(get(ctrl, 64)).unwrap_or(0));
    // SAFETY: the region has at least HEADER bytes (base >= HEADER and base <= len) and is
    // 64-aligned, so both header words are inside it and aligned; they are only accessed
    // atomically.
    let (magic, state) = unsafe {
        (
            &*region.as_ptr().cast::<AtomicU64>(),
            &*region.as_ptr().add(STATE).cast::<AtomicU64>(),
        )
    };
    if magic.load(Ordering::Relaxed) != MAGIC {
        return Err(invalid(format!("rank {peer}'s region is not a container")));
    }
    let withdrawn = || {
        Refusal::Invalid(
            Error::new(ErrorKind::PeerFailed, "switch")
                .on_rank(rank)
                .with_peer(peer)
                .with_detail(format!(
                    "rank {peer} withdrew its values during the switch (its switch failed)"
                )),
        )
    };
    if state.load(Ordering::Acquire) != epoch {
        return Err(withdrawn());
    }
    // SAFETY: `base` is inside the region and aligned for T (checked above).
    let src = unsafe { region.as_ptr().add(base).cast::<T>().cast_const() };
    for (k, c) in pulls.enumerate() {
        let at = CTRL_HEAD + PLACE_BYTES * k;
        if at + PLACE_BYTES > ctrl.len() {
            return Err(invalid(format!(
                "rank {peer}'s offer lists too few segments"
            )));
        }
        let field = |n: usize| usize::try_from(get(ctrl, at + 8 * n)).unwrap_or(usize::MAX);
        let s = Place {
            off: field(0),
            st: [field(1), field(2), field(3)],
        };
        if reach(&s, c.ext).is_none_or(|last| last >= avail) {
            return Err(invalid(format!(
                "rank {peer}'s segment {k} reaches beyond its buffer of {avail} elements"
            )));
        }
        // SAFETY: every element of the box is below `avail`, inside the region, which this
        // mapping keeps alive; the owner does not write it while the offer stands (checked
        // again below: a withdrawn offer makes the copy an error, never data); `c.dst` was
        // checked against the new layout at bind time.
        unsafe { copy_box_raw(src, s, new, c.dst, c.ext, generic) };
    }
    // The second look: whatever the copy read must predate a withdrawal we do not see.
    fence(Ordering::Acquire);
    if state.load(Ordering::Relaxed) != epoch {
        return Err(withdrawn());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_from_a_peer_are_checked_without_overflow() {
        let p = Place {
            off: 3,
            st: [1, 10, 100],
        };
        assert_eq!(reach(&p, [4, 2, 1]), Some(3 + 3 + 10));
        let huge = Place {
            off: usize::MAX - 1,
            st: [1, 1, 1],
        };
        assert_eq!(reach(&huge, [3, 1, 1]), None);
        assert_eq!(reach(&p, [0, 1, 1]), None, "an empty box reaches nothing");
    }

    /// An owner's region with 64 f64 (value = index) and an offer of one 4 x 2 box at
    /// element 2 (row stride 8), as the reader sees them.
    fn offer(
        epoch: u64,
    ) -> (
        Vec<ferry_core::shared::HeapShared>,
        SharedRegion,
        Vec<u8>,
        BoxCopy,
    ) {
        let ranks = ferry_core::shared::HeapShared::for_job(2);
        let region = ranks[0].alloc(HEADER + 64 * 8).unwrap();
        // SAFETY: the test owns the fresh region; header words are 64-aligned, data follows.
        unsafe {
            (*region.as_ptr().cast::<AtomicU64>()).store(MAGIC, Ordering::Relaxed);
            (*region.as_ptr().add(STATE).cast::<AtomicU64>()).store(epoch, Ordering::Release);
            let data = region.as_ptr().add(HEADER).cast::<f64>();
            for i in 0..64 {
                data.add(i).write(i as f64);
            }
        }
        let mut ctrl = vec![0u8; CTRL_HEAD + PLACE_BYTES];
        put(&mut ctrl, 0, CTRL_MAGIC | OFFER << 32);
        put(&mut ctrl, 8, 8);
        put(&mut ctrl, 16, epoch);
        for (k, w) in region.id().0.iter().enumerate() {
            put(&mut ctrl, 24 + 8 * k, *w);
        }
        put(&mut ctrl, 56, HEADER as u64);
        put(&mut ctrl, 64, 64);
        for (k, v) in [2u64, 1, 8, 64].iter().enumerate() {
            put(&mut ctrl, CTRL_HEAD + 8 * k, *v);
        }
        let dense = Place {
            off: 0,
            st: [1, 4, 8],
        };
        let c = BoxCopy {
            src: dense,
            dst: dense,
            ext: [4, 2, 1],
        };
        (ranks, region, ctrl, c)
    }

    #[test]
    fn a_reader_copies_a_standing_offer_and_refuses_a_withdrawn_one() {
        let (ranks, region, ctrl, c) = offer(7);
        let mut maps = PeerMaps::default();
        let mut new = vec![0f64; 8];
        let res = pull(
            &ctrl,
            0,
            1,
            &ranks[1],
            &mut maps,
            [&c].into_iter(),
            &mut new,
            false,
        );
        assert!(res.is_ok());
        assert_eq!(new, [2.0, 3.0, 4.0, 5.0, 10.0, 11.0, 12.0, 13.0]);
        assert_eq!(maps.len(), 1, "the mapping is kept for the next switch");
        // The owner withdrew (its switch failed, or it dropped the container).
        // SAFETY: the state word of the owner's region, accessed atomically.
        unsafe { (*region.as_ptr().add(STATE).cast::<AtomicU64>()).store(0, Ordering::Release) };
        let res = pull(
            &ctrl,
            0,
            1,
            &ranks[1],
            &mut maps,
            [&c].into_iter(),
            &mut new,
            false,
        );
        match res {
            Err(Refusal::Invalid(e)) => assert!(e.to_string().contains("withdrew"), "{e}"),
            _ => panic!("a withdrawn offer must be refused"),
        }
    }

    #[test]
    fn offers_out_of_bounds_or_unmappable_are_refused() {
        let (ranks, _region, ctrl, c) = offer(3);
        let mut new = vec![0f64; 8];
        let mut maps = PeerMaps::default();
        let mut far = ctrl.clone();
        put(&mut far, CTRL_HEAD, 60);
        let res = pull(
            &far,
            0,
            1,
            &ranks[1],
            &mut maps,
            [&c].into_iter(),
            &mut new,
            false,
        );
        assert!(
            matches!(res, Err(Refusal::Invalid(_))),
            "box beyond the buffer"
        );
        let mut stale = ctrl.clone();
        put(&mut stale, 16, 2);
        let res = pull(
            &stale,
            0,
            1,
            &ranks[1],
            &mut maps,
            [&c].into_iter(),
            &mut new,
            false,
        );
        assert!(matches!(res, Err(Refusal::Invalid(_))), "an older epoch");
        let mut other = ctrl.clone();
        put(&mut other, 32, 999);
        let mut fresh = PeerMaps::default();
        let res = pull(
            &other,
            0,
            1,
            &ranks[1],
            &mut fresh,
            [&c].into_iter(),
            &mut new,
            false,
        );
        assert!(
            matches!(res, Err(Refusal::Map(_))),
            "no such region: copy instead"
        );
        let mut wide = ctrl;
        put(&mut wide, 8, 4);
        let res = pull(
            &wide,
            0,
            1,
            &ranks[1],
            &mut maps,
            [&c].into_iter(),
            &mut new,
            false,
        );
        assert!(
            matches!(res, Err(Refusal::Invalid(_))),
            "another element size"
        );
        assert!(
            new.iter().all(|&v| v == 0.0),
            "nothing copied from a refused offer"
        );
    }

    #[test]
    fn raw_box_copy_matches_the_slice_copy() {
        let src: Vec<u32> = (0..200).collect();
        let s = Place {
            off: 5,
            st: [1, 12, 60],
        };
        let d = Place {
            off: 2,
            st: [1, 7, 40],
        };
        for generic in [false, true] {
            let mut a = vec![0u32; 150];
            let mut b = vec![0u32; 150];
            copy_box(&src, s, &mut a, d, [6, 3, 2], generic);
            // SAFETY: reach(s, ext) = 5 + 5 + 24 + 60 = 94 < 200.
            unsafe { copy_box_raw(src.as_ptr(), s, &mut b, d, [6, 3, 2], generic) };
            assert_eq!(a, b);
            assert!(a.iter().any(|&v| v != 0));
        }
    }
}
