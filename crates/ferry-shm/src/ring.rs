//! The single-producer single-consumer ring of one ordered pair of ranks (S3).
//!
//! Every slot starts with a 40-byte header whose first word is a sequence number: the producer
//! writes header and payload, then stores `position + 1` into the slot's sequence word with
//! release ordering; the consumer polls that word of the slot at its head. An entry may span
//! several consecutive slots (a chunk of a pipelined large message, see [`Producer::push_span`]):
//! its payload starts on the slot's second cache line and is whole lines long
//! ([`CHUNK_HEADER`]), runs on over the following slots' headers, and the consumer clears those
//! slots' sequence words before handing the slots back, so that payload bytes left there can
//! never pass for a published entry on a later lap. So a small message
//! costs the consumer one cache line (header and up to 24 payload bytes share it) and nobody
//! polls a shared tail index. The consumer publishes its head on a line of its own; the
//! producer reads it only when its cached copy says the ring is full. The producer line and the
//! consumer line never share a cache line (no false sharing).
//!
//! The ring also carries the completion window of single-copy transfers: descriptor `s` is
//! acknowledged by the consumer storing `s + 1` into slot `s % ACK_WINDOW` of the window.
//! Before reading, the consumer claims the word by compare-and-swap; the producer may withdraw
//! an unclaimed descriptor by compare-and-swap too, so exactly one of them wins. A receiver's
//! write offer ([`WriteOffer`], split single copy) is such a descriptor in the other direction.

use std::sync::atomic::{AtomicU64, Ordering};

use ferry_proto::{MsgKey, MsgKind};

use crate::segment::{ACK_WINDOW, RING_CTRL};

/// Bytes of the slot header; payload follows.
pub(crate) const SLOT_HEADER: usize = 40;
/// Where the payload of a chunk (a [`Producer::push_span`] entry) starts: the header keeps a
/// cache line of its own, so that chunk payloads start on a line boundary in the ring and
/// (their capacities being whole lines) at the same line offset of the message as of the ring.
/// Both copies of a pipelined message then move whole, equally aligned lines.
pub(crate) const CHUNK_HEADER: usize = 64;

const R_HEAD: usize = 64;
/// Offset in the slot header of the entry's span (u16): how many consecutive slots it covers.
const H_SPAN: usize = 34;
/// Largest span of one entry (the width of its header field).
pub(crate) const MAX_SPAN: usize = u16::MAX as usize;
const R_ACKS: usize = 128;

/// Entry types.
pub(crate) const T_INLINE: u8 = 1;
pub(crate) const T_FRAG: u8 = 2;
pub(crate) const T_CMA: u8 = 3;
/// The sender gave up a message it had started to send as fragments or had withdrawn from
/// single copy (its operation failed): no more of it follows.
pub(crate) const T_ABORT: u8 = 4;
/// The receiver of a single-copy descriptor offers part of its receive buffer for the sender
/// to write ([`WriteOffer`]): each side then copies half of the message at the same time.
pub(crate) const T_WRITE: u8 = 5;

/// Completion-word state bit: the receiver took descriptor `seq` and is reading it (the word
/// holds `(seq + 1) | ACK_CLAIMED`; `seq + 1` alone means done).
pub(crate) const ACK_CLAIMED: u64 = 1 << 63;
/// Completion-word state bit: the sender withdrew descriptor `seq` before the receiver claimed
/// it; the message follows as fragments.
pub(crate) const ACK_CANCELLED: u64 = 1 << 62;

/// Completion-word state bit, with [`ACK_CANCELLED`]: the sender withdrew descriptor `seq`
/// because its operation failed; no fragments follow and the receiver must not wait for the
/// message (its receive fails, naming the sender).
pub(crate) const ACK_ABORTED: u64 = 1 << 61;

/// Bytes of a single-copy descriptor: pid, address, length, descriptor sequence, then the
/// shared-heap region (generation, 0 for none; descriptor, inode, base, length).
pub(crate) const CMA_DESC: usize = 72;

/// The header of one ring entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub typ: u8,
    pub key: MsgKey,
    pub serial: u64,
    /// Length of the whole message (all fragments).
    pub total_len: u64,
}

/// A ring in shared memory, seen from one process.
#[derive(Clone, Copy)]
pub(crate) struct RingRef {
    base: *mut u8,
    mask: u64,
    slot_bytes: usize,
}

// SAFETY: a RingRef is an address into a shared mapping kept alive by the owning transport's
// Arc<Segment>; the protocol synchronises through atomics.
unsafe impl Send for RingRef {}

impl RingRef {
    /// # Safety
    /// `base` must point to a ring of `slots` (power of two) slots of `slot_bytes` laid out as
    /// in `segment.rs`, valid for as long as the RingRef is used.
    pub(crate) unsafe fn new(base: *mut u8, slots: usize, slot_bytes: usize) -> RingRef {
        RingRef {
            base,
            mask: slots as u64 - 1,
            slot_bytes,
        }
    }

    #[inline]
    fn slot(&self, pos: u64) -> *mut u8 {
        // SAFETY: (pos & mask) < slots, so the slot lies inside the ring.
        unsafe {
            self.base
                .add(RING_CTRL + (pos & self.mask) as usize * self.slot_bytes)
        }
    }

    #[inline]
    fn seq(&self, pos: u64) -> &AtomicU64 {
        // SAFETY: slots are 64-aligned (ring page-aligned, RING_CTRL and slot_bytes multiples
        // of 64); the sequence word is the first word of the slot.
        unsafe { &*(self.slot(pos) as *const AtomicU64) }
    }

    #[inline]
    fn head(&self) -> &AtomicU64 {
        // SAFETY: inside the ring's control area, 8-aligned.
        unsafe { &*(self.base.add(R_HEAD) as *const AtomicU64) }
    }

    /// Completion word for single-copy descriptor `seq`.
    #[inline]
    pub(crate) fn ack(&self, seq: u64) -> &AtomicU64 {
        // SAFETY: ACK_WINDOW words of 8 bytes fit between R_ACKS and RING_CTRL.
        unsafe { &*(self.base.add(R_ACKS + (seq % ACK_WINDOW) as usize * 8) as *const AtomicU64) }
    }

    /// Payload bytes per slot.
    pub(crate) fn payload_cap(&self) -> usize {
        self.slot_bytes - SLOT_HEADER
    }

    /// Payload bytes of a chunk covering `span` slots: whole cache lines after the chunk's
    /// header line (slots are at least two lines, so a chunk carries at least one line).
    #[inline]
    pub(crate) fn chunk_cap(&self, span: usize) -> usize {
        (span * self.slot_bytes - CHUNK_HEADER) & !63
    }
}

/// The sending end of a ring.
pub(crate) struct Producer {
    ring: RingRef,
    tail: u64,
    head_cache: u64,
    slots: u64,
}

impl Producer {
    /// Attaches the producer side, resuming at the consumer's published head (fresh rings
    /// start at 0).
    pub(crate) fn new(ring: RingRef) -> Producer {
        let head = ring.head().load(Ordering::Acquire);
        Producer {
            ring,
            tail: head,
            head_cache: head,
            slots: ring.mask + 1,
        }
    }

    /// The ring (for completion words).
    pub(crate) fn ring(&self) -> &RingRef {
        &self.ring
    }

    /// Whether one more entry fits, refreshing the cached head only when needed.
    #[inline]
    pub(crate) fn has_space(&mut self) -> bool {
        if self.tail - self.head_cache < self.slots {
            return true;
        }
        self.head_cache = self.ring.head().load(Ordering::Acquire);
        self.tail - self.head_cache < self.slots
    }

    /// Appends one entry whose payload is `payload` (at most `payload_cap` bytes). Returns
    /// false, writing nothing, when the ring is full.
    #[inline]
    pub(crate) fn push(&mut self, e: &Entry, payload: &[u8]) -> bool {
        debug_assert!(payload.len() <= self.ring.payload_cap());
        if !self.has_space() {
            return false;
        }
        let slot = self.ring.slot(self.tail);
        // SAFETY: the slot belongs to the producer until its sequence word is published (the
        // consumer has released it: tail - head < slots); header fields are at fixed 8/4-byte
        // aligned offsets inside the slot, the payload fits (checked above).
        unsafe {
            (slot.add(8) as *mut u64).write(e.serial);
            (slot.add(16) as *mut u64).write(e.total_len);
            (slot.add(24) as *mut u32).write(e.key.tag);
            (slot.add(28) as *mut u32).write(e.key.generation);
            slot.add(32).write(e.typ);
            slot.add(33).write(e.key.kind.0);
            (slot.add(H_SPAN) as *mut u16).write(1);
            std::ptr::copy_nonoverlapping(payload.as_ptr(), slot.add(SLOT_HEADER), payload.len());
        }
        self.tail += 1;
        // Publishing with a sequentially consistent read-modify-write (one locked instruction on
        // x86) is what lets the doorbell check that follows skip a separate fence (see
        // `ShmTransport::wake`).
        self.ring
            .seq(self.tail - 1)
            .swap(self.tail, Ordering::SeqCst);
        true
    }

    /// How many consecutive slots are free at the tail without wrapping past the ring's end:
    /// the largest span [`Producer::push_span`] can take right now.
    #[inline]
    pub(crate) fn free_run(&mut self) -> usize {
        let to_end = self.slots - (self.tail & self.ring.mask);
        let mut free = self.slots - (self.tail - self.head_cache);
        if free < to_end {
            self.head_cache = self.ring.head().load(Ordering::Acquire);
            free = self.slots - (self.tail - self.head_cache);
        }
        free.min(to_end) as usize
    }

    /// Payload bytes an entry of `span` slots carries.
    #[inline]
    pub(crate) fn span_cap(&self, span: usize) -> usize {
        self.ring.chunk_cap(span)
    }

    /// Appends one entry covering as many consecutive slots as `payload` needs (at most
    /// [`MAX_SPAN`] and [`Producer::free_run`]): one header, then the payload in one piece.
    /// Returns false, writing nothing, when those slots are not free.
    pub(crate) fn push_span(&mut self, e: &Entry, payload: &[u8]) -> bool {
        let span = (payload.len() + CHUNK_HEADER)
            .div_ceil(self.ring.slot_bytes)
            .max(1);
        if span > MAX_SPAN || span > self.free_run() {
            return false;
        }
        let slot = self.ring.slot(self.tail);
        // SAFETY: the `span` slots from the tail are free (free_run) and consecutive in memory
        // (free_run stops at the ring's end), so header and payload lie inside the producer's
        // part of the ring until the sequence word is published.
        unsafe {
            (slot.add(8) as *mut u64).write(e.serial);
            (slot.add(16) as *mut u64).write(e.total_len);
            (slot.add(24) as *mut u32).write(e.key.tag);
            (slot.add(28) as *mut u32).write(e.key.generation);
            slot.add(32).write(e.typ);
            slot.add(33).write(e.key.kind.0);
            (slot.add(H_SPAN) as *mut u16).write(span as u16);
            std::ptr::copy_nonoverlapping(payload.as_ptr(), slot.add(CHUNK_HEADER), payload.len());
        }
        let first = self.tail;
        self.tail += span as u64;
        // Only the first slot's sequence word is published; see `Consumer::pop` for the others.
        self.ring.seq(first).swap(first + 1, Ordering::SeqCst);
        true
    }
}

/// The receiving end of a ring.
pub(crate) struct Consumer {
    ring: RingRef,
    head: u64,
}

impl Consumer {
    /// Attaches the consumer side at the published head.
    pub(crate) fn new(ring: RingRef) -> Consumer {
        let head = ring.head().load(Ordering::Acquire);
        Consumer { ring, head }
    }

    /// The ring (for completion words).
    pub(crate) fn ring(&self) -> &RingRef {
        &self.ring
    }

    /// Whether an entry is waiting.
    #[inline]
    pub(crate) fn has_data(&self) -> bool {
        self.ring.seq(self.head).load(Ordering::Acquire) == self.head + 1
    }

    /// The entry at the head, if any, without consuming it.
    #[inline]
    pub(crate) fn peek(&self) -> Option<Entry> {
        if !self.has_data() {
            return None;
        }
        let slot = self.ring.slot(self.head);
        // SAFETY: the acquire load above made the producer's header writes visible; the slot
        // is ours until pop().
        unsafe {
            Some(Entry {
                serial: (slot.add(8) as *const u64).read(),
                total_len: (slot.add(16) as *const u64).read(),
                key: MsgKey {
                    tag: (slot.add(24) as *const u32).read(),
                    generation: (slot.add(28) as *const u32).read(),
                    kind: MsgKind(slot.add(33).read()),
                },
                typ: slot.add(32).read(),
            })
        }
    }

    /// How many slots the published head entry covers, bounded by the ring's end (a value a
    /// faulty peer wrote cannot make the consumer read or write outside the ring).
    #[inline]
    pub(crate) fn span(&self) -> usize {
        let slot = self.ring.slot(self.head);
        // SAFETY: the head entry is published (peek succeeded); the span field is a 2-aligned
        // header field of its first slot.
        let span = unsafe { (slot.add(H_SPAN) as *const u16).read() } as usize;
        let to_end = (self.ring.mask + 1 - (self.head & self.ring.mask)) as usize;
        span.clamp(1, to_end)
    }

    /// Payload bytes the head entry can carry if it is a chunk (its span's).
    #[inline]
    pub(crate) fn head_cap(&self) -> usize {
        self.ring.chunk_cap(self.span())
    }

    /// Copies `dst.len()` payload bytes of the head entry, a chunk pushed with
    /// [`Producer::push_span`] (at most its span's capacity).
    #[inline]
    pub(crate) fn read_chunk(&self, dst: &mut [u8]) {
        let n = dst.len().min(self.head_cap());
        let slot = self.ring.slot(self.head);
        // SAFETY: the head entry is published (peek succeeded) and stays ours until pop();
        // CHUNK_HEADER + n is within its span (`chunk_cap`), which ends inside the ring (`span`).
        unsafe { std::ptr::copy_nonoverlapping(slot.add(CHUNK_HEADER), dst.as_mut_ptr(), n) }
    }

    /// Copies `dst.len()` payload bytes of the head entry, a single-slot entry pushed with
    /// [`Producer::push`] (at most a slot's payload).
    #[inline]
    pub(crate) fn read_payload(&self, dst: &mut [u8]) {
        debug_assert!(dst.len() <= self.ring.payload_cap());
        let n = dst.len().min(self.ring.payload_cap());
        let slot = self.ring.slot(self.head);
        // SAFETY: the head entry is published (peek succeeded) and stays ours until pop();
        // n is within the slot's payload area.
        unsafe { std::ptr::copy_nonoverlapping(slot.add(SLOT_HEADER), dst.as_mut_ptr(), n) }
    }

    /// Releases the head entry (all slots of its span) to the producer.
    #[inline]
    pub(crate) fn pop(&mut self) {
        let span = self.span() as u64;
        // The payload of a span ran over the sequence words of its later slots: clear them
        // before the producer may reuse the slots, so stale payload bytes never read as a
        // published entry when the head reaches one of these slots on a later lap.
        for pos in self.head + 1..self.head + span {
            self.ring.seq(pos).store(0, Ordering::Relaxed);
        }
        self.head += span;
        // SeqCst read-modify-write for the same reason as in `Producer::push` (it also orders
        // the clearing stores above before the producer sees the slots free).
        self.ring.head().swap(self.head, Ordering::SeqCst);
    }
}

/// The descriptor sequence a completion word refers to (+1), without state bits.
#[inline]
pub(crate) fn ack_seq(v: u64) -> u64 {
    v & !(ACK_CLAIMED | ACK_CANCELLED | ACK_ABORTED)
}

/// Whether descriptor `seq` may use its completion word: the word's previous user
/// (`seq - ACK_WINDOW`) is completed or withdrawn.
pub(crate) fn window_free(ring: &RingRef, seq: u64) -> bool {
    if seq < ACK_WINDOW {
        return true;
    }
    let v = ring.ack(seq - ACK_WINDOW).load(Ordering::Acquire);
    ack_seq(v) == seq - ACK_WINDOW + 1 && v & ACK_CLAIMED == 0
}

/// What a receiver found when it tried to take a single-copy descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The receiver owns the read; it must [`complete`] the descriptor afterwards.
    Got,
    /// The sender took it back; the message follows as fragments.
    Withdrawn,
    /// The sender took it back because its operation failed; nothing follows.
    Aborted,
}

/// The receiver's side of the claim/withdraw race on completion word `word` of descriptor
/// `seq`: exactly one of [`claim`] and [`withdraw`] succeeds.
pub(crate) fn claim(word: &AtomicU64, seq: u64) -> Claim {
    let mut v = word.load(Ordering::Acquire);
    loop {
        if ack_seq(v) == seq + 1 {
            return if v & ACK_ABORTED != 0 {
                Claim::Aborted
            } else {
                Claim::Withdrawn
            };
        }
        // The word still holds its previous user's final value: offer open.
        match word.compare_exchange(
            v,
            (seq + 1) | ACK_CLAIMED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return Claim::Got,
            Err(now) => v = now,
        }
    }
}

/// Completes claimed descriptor `seq`: the sender may reuse its buffer.
pub(crate) fn complete(word: &AtomicU64, seq: u64) {
    // SeqCst read-modify-write for the same reason as in `Producer::push` (a doorbell check
    // follows).
    word.swap(seq + 1, Ordering::SeqCst);
}

/// Gives back claimed descriptor `seq` unserved: the claimer could not copy (a write offer
/// whose write failed), so the offering side copies that part itself, as if it had been
/// withdrawn before the claim.
pub(crate) fn unclaim(word: &AtomicU64, seq: u64) {
    word.swap((seq + 1) | ACK_CANCELLED, Ordering::SeqCst);
}

/// Bytes of a write offer: the sender's descriptor it answers, the receive buffer's address
/// and length of the part offered, and the offer's own descriptor sequence (its completion word
/// in the receiver's ring to the sender).
pub(crate) const WRITE_OFFER: usize = 32;

/// A receiver's offer to let the sender of descriptor `desc` write the first `len` bytes of the
/// message straight to `addr` in the receiver (its receive buffer). The offer is a descriptor
/// of the receiver's own (sequence `seq` in its ring to the sender): the sender claims it
/// before writing and completes it after, the receiver may withdraw it while it is unclaimed,
/// exactly as for single-copy reads in the other direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriteOffer {
    pub desc: u64,
    pub addr: u64,
    pub len: u64,
    pub seq: u64,
}

/// Encodes a write offer.
pub(crate) fn encode_write(w: &WriteOffer) -> [u8; WRITE_OFFER] {
    let mut d = [0u8; WRITE_OFFER];
    for (i, x) in [w.desc, w.addr, w.len, w.seq].iter().enumerate() {
        d[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
    }
    d
}

/// Decodes a write offer.
pub(crate) fn decode_write(d: &[u8; WRITE_OFFER]) -> WriteOffer {
    let w = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[i * 8..i * 8 + 8]);
        u64::from_le_bytes(b)
    };
    WriteOffer {
        desc: w(0),
        addr: w(1),
        len: w(2),
        seq: w(3),
    }
}

/// The sender's view of descriptor `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    /// Posted, not taken yet: the sender may withdraw it.
    Open,
    /// The receiver is reading the sender's buffer right now.
    Claimed,
    /// The receiver has read it.
    Done,
    /// The sender withdrew it.
    Withdrawn,
}

/// Reads the state of descriptor `seq` from its completion word.
pub(crate) fn offer_state(word: &AtomicU64, seq: u64) -> Offer {
    let v = word.load(Ordering::Acquire);
    if ack_seq(v) != seq + 1 {
        Offer::Open
    } else if v & ACK_CLAIMED != 0 {
        Offer::Claimed
    } else if v & ACK_CANCELLED != 0 {
        Offer::Withdrawn
    } else {
        Offer::Done
    }
}

/// The sender's side of the race: takes back descriptor `seq` unless the receiver claimed it
/// first. `abort` tells the receiver that nothing follows (the operation failed). Returns
/// whether the descriptor is now withdrawn by this call.
pub(crate) fn withdraw(word: &AtomicU64, seq: u64, abort: bool) -> bool {
    let v = word.load(Ordering::Acquire);
    if ack_seq(v) == seq + 1 {
        return false;
    }
    let mark = (seq + 1) | ACK_CANCELLED | if abort { ACK_ABORTED } else { 0 };
    word.compare_exchange(v, mark, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// Encodes a single-copy descriptor read through cross-memory attach.
#[cfg(test)]
pub(crate) fn encode_cma(pid: u32, addr: u64, len: u64, seq: u64) -> [u8; CMA_DESC] {
    encode_desc(&CmaDesc {
        pid,
        addr,
        len,
        seq,
        heap: None,
    })
}

/// Encodes a single-copy descriptor.
pub(crate) fn encode_desc(c: &CmaDesc) -> [u8; CMA_DESC] {
    let h = c.heap.unwrap_or(HeapDesc {
        generation: 0,
        fd: 0,
        ino: 0,
        base: 0,
        len: 0,
    });
    let words = [
        c.pid as u64,
        c.addr,
        c.len,
        c.seq,
        h.generation,
        h.fd,
        h.ino,
        h.base,
        h.len,
    ];
    let mut d = [0u8; CMA_DESC];
    for (i, w) in words.iter().enumerate() {
        d[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    d
}

/// The sender's shared-heap region that holds a single-copy message (`heap.rs`): the receiver
/// maps it once and copies with `memcpy` instead of cross-memory attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeapDesc {
    /// Never 0; unique to one region of one process (`heap.rs`).
    pub generation: u64,
    /// The sender's descriptor of the region's memory file.
    pub fd: u64,
    /// Its inode (a descriptor number can be reused for another file).
    pub ino: u64,
    /// The region's address in the sender.
    pub base: u64,
    /// The region's length.
    pub len: u64,
}

/// A decoded single-copy descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CmaDesc {
    pub pid: u32,
    pub addr: u64,
    pub len: u64,
    pub seq: u64,
    /// Set when the message lies in the sender's shared heap.
    pub heap: Option<HeapDesc>,
}

/// Decodes a single-copy descriptor.
pub(crate) fn decode_cma(d: &[u8; CMA_DESC]) -> CmaDesc {
    let w = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[i * 8..i * 8 + 8]);
        u64::from_le_bytes(b)
    };
    let generation = w(4);
    CmaDesc {
        pid: w(0) as u32,
        addr: w(1),
        len: w(2),
        seq: w(3),
        heap: (generation != 0).then(|| HeapDesc {
            generation,
            fd: w(5),
            ino: w(6),
            base: w(7),
            len: w(8),
        }),
    }
}

pub(crate) mod offer;

#[cfg(test)]
mod tests;
