//! Seeded, replayable simulation of the ring protocol (issue 05, issue 12): one sender and one
//! receiver of a real ring (`ring.rs`, in heap memory) take single protocol steps in an order
//! drawn by a seeded scheduler: pushes into a full ring, single-copy descriptors that the
//! receiver claims and copies in two separate steps (every other one naming a shared-heap
//! region, copied through the receiver's mapping, which outlives the sender and must still be
//! the region's current generation), withdrawals of idle descriptors (the
//! message then follows as a fragment), pipelined messages streamed as chunks of one to
//! several slots (spans) while the receiver copies earlier chunks out, a receiver that leaves
//! the first chunk of a message whose receive is not posted in the ring or takes it early, a
//! receive given up while its message streams in, a failure of the sender's operation
//! (settle: withdraw or wait, and an abort entry that closes a cut-off stream, pushed when the
//! full ring has room) and kills of either side; at a random step, and in
//! `every_step_kill_and_abandon` at every step of some schedules.
//!
//! Checked after every schedule:
//! - ring entries arrive in the order pushed, none lost or duplicated (so a span's stale
//!   payload never passes for an entry);
//! - every message is delivered at most once, whole, with the bytes it had when it was sent: a
//!   half-streamed message is never taken as a whole one;
//! - no copy ever reads a buffer the sender has reused (withdrawn, aborted or completed);
//! - nothing is delivered for a receive that was given up;
//! - without failure or kill every message whose receive was not given up is delivered; after
//!   a sender failure every message is delivered intact or reported failed, none is waited
//!   for forever (a cut-off stream is closed by its abort entry);
//! - exactly one of claim and withdraw wins each descriptor.
//!
//! Split single copy has a simulation of its own (`sim/split.rs`).
//!
//! A failing schedule prints its seed; `FERRY_SIM_SEED=N cargo test -p ferry-shm --lib sim`
//! replays it alone.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use ferry_proto::{MsgKey, MsgKind};

use crate::ring::{
    self, decode_cma, encode_desc, window_free, Claim, CmaDesc, Consumer, Entry, HeapDesc, Offer,
    Producer, RingRef, CMA_DESC, T_ABORT, T_CMA, T_FRAG, T_INLINE,
};
use crate::segment::RING_CTRL;

const SLOTS: usize = 8;
const SLOT_BYTES: usize = 128;
const MSG_BYTES: usize = 24;
const POISON: u8 = 0xee;
/// Largest span (slots) the simulated sender gives one chunk of a pipelined message.
const SIM_SPAN: u64 = 4;

/// xorshift64*: small, fast, and the same sequence everywhere for a seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// How a message is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Inline,
    SingleCopy,
    /// Pipelined: chunks of one or more slots through the ring.
    Stream,
}

/// Length of message `msg` of kind `kind`: a stream takes 2 to 7 chunks of one slot.
fn len_of(kind: Kind, msg: u64) -> usize {
    match kind {
        Kind::Stream => 100 + (msg as usize * 53) % 500,
        _ => MSG_BYTES,
    }
}

/// The bytes message `msg` carries.
fn want(kind: &[Kind], msg: usize) -> Vec<u8> {
    match kind[msg] {
        Kind::Stream => stream_content(msg as u64, len_of(Kind::Stream, msg as u64)),
        _ => content(msg as u64),
    }
}

fn content(msg: u64) -> Vec<u8> {
    (0..MSG_BYTES)
        .map(|i| (msg as u8).wrapping_mul(31).wrapping_add(i as u8) & 0x7f)
        .collect()
}

/// The bytes of stream `msg`: little-endian words of small values, the kind a slot's
/// sequence word holds, so that a span's payload left in the ring and read as a sequence word
/// on a later lap would be taken for a published entry.
fn stream_content(msg: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let word = (msg * 13 + (i / 8) as u64 * 7) % 120 + 1;
            if i % 8 == 0 {
                word as u8
            } else {
                0
            }
        })
        .collect()
}

/// What the receiver does with a stream's chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// Into the posted receive's buffer.
    Posted,
    /// Into a buffer of its own (taken before its receive was posted).
    Early,
    /// Dropped (its receive was given up).
    Discard,
}

/// A stream partly received.
struct Partial {
    msg: usize,
    total: usize,
    received: usize,
    buf: Vec<u8>,
    target: Target,
}

/// Sender state of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    NotYet,
    /// Offered as descriptor `seq`; the buffer is lent out.
    Offered(u64),
    /// The buffer is the sender's again (completed, withdrawn or aborted).
    Returned,
}

/// How the sender behaves after a failed operation; `Broken` reuses buffers without taking
/// descriptors back (the defect of issue 05), to show that the checker notices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settle {
    WithdrawOrWait,
    Broken,
}

#[derive(Debug)]
struct Violation(String);

/// What the schedules exercised, so that the test cannot pass vacuously.
#[derive(Debug, Default, Clone, Copy)]
struct Coverage {
    full_ring: u64,
    claimed: u64,
    withdrawn: u64,
    aborted: u64,
    waited_for_claim: u64,
    lost_race: u64,
    /// Stream chunks pushed, and those that covered more than one slot.
    chunks: u64,
    spans: u64,
    /// First chunks left in the ring (receive not posted) and taken early.
    deferred: u64,
    early: u64,
    /// Streams whose receive was given up while they streamed in, or before.
    discarded: u64,
    /// Cut-off streams (and withdrawn descriptors) closed by an abort entry.
    stream_aborted: u64,
    /// Descriptors naming a shared-heap region copied through the receiver's mapping, and
    /// those copied after the sender died (the mapping outlives it).
    heap_copies: u64,
    heap_after_death: u64,
}

impl Coverage {
    fn add(&mut self, c: &Coverage) {
        self.full_ring += c.full_ring;
        self.claimed += c.claimed;
        self.withdrawn += c.withdrawn;
        self.aborted += c.aborted;
        self.waited_for_claim += c.waited_for_claim;
        self.lost_race += c.lost_race;
        self.chunks += c.chunks;
        self.spans += c.spans;
        self.deferred += c.deferred;
        self.early += c.early;
        self.discarded += c.discarded;
        self.stream_aborted += c.stream_aborted;
        self.heap_copies += c.heap_copies;
        self.heap_after_death += c.heap_after_death;
    }
}

struct Sim {
    /// The ring's memory (the ring points into it).
    _mem: Vec<u64>,
    rng: Rng,
    producer: Producer,
    consumer: Consumer,
    /// Sender buffers, one per message (a reused buffer holds POISON).
    bufs: Vec<Vec<u8>>,
    sent: Vec<Sent>,
    kind: Vec<Kind>,
    next_msg: usize,
    /// The stream being pushed (message, bytes pushed; at least one chunk is out).
    stream: Option<(usize, usize)>,
    /// Messages cut off by the failure whose abort entry is still to be pushed.
    abort_queue: Vec<usize>,
    next_seq: u64,
    /// Ring entries pushed so far (carried in `serial`, checked for FIFO order).
    pushed: u64,
    popped: u64,
    /// Withdrawn descriptors whose fragment is still to be pushed, by message.
    to_fragment: Vec<usize>,
    failed: bool,
    settle: Settle,
    sender_dead: bool,
    receiver_dead: bool,
    /// Receiver: claimed descriptors not yet copied (msg, seq, the region they name).
    copying: Vec<(usize, u64, Option<HeapDesc>)>,
    /// Sender: the generation of each buffer's shared-heap region; reusing a buffer frees
    /// its region and allocates a new one (`heap.rs`).
    generation: Vec<u64>,
    /// Receiver: messages below this have their receive posted.
    posted_upto: usize,
    /// Receiver: receives given up (their messages must never be delivered).
    given_up: Vec<bool>,
    partial: Option<Partial>,
    delivered: BTreeMap<usize, Vec<u8>>,
    reported_failed: Vec<usize>,
    /// Descriptors withdrawn without abort: their message follows as a fragment.
    awaiting_fragment: Vec<usize>,
    /// Withdrawals the sender decided on (it saw the descriptor open) but has not made yet:
    /// the receiver may claim in between, which the withdrawal must notice.
    deciding: Vec<(usize, u64, bool)>,
    cov: Coverage,
}

impl Sim {
    fn new(seed: u64, messages: usize, settle: Settle) -> Sim {
        let mut mem = vec![0u64; (RING_CTRL + SLOTS * SLOT_BYTES) / 8 + 16];
        let off = (mem.as_mut_ptr() as *mut u8).align_offset(64);
        // SAFETY: `mem` outlives every use of the ring (both live in this Sim and the Vec is
        // never resized); the aligned ring fits in it.
        let ring =
            unsafe { RingRef::new((mem.as_mut_ptr() as *mut u8).add(off), SLOTS, SLOT_BYTES) };
        let mut rng = Rng::new(seed);
        let kind: Vec<Kind> = (0..messages)
            .map(|_| match rng.below(3) {
                0 => Kind::SingleCopy,
                1 => Kind::Inline,
                _ => Kind::Stream,
            })
            .collect();
        Sim {
            producer: Producer::new(ring),
            consumer: Consumer::new(ring),
            _mem: mem,
            rng,
            bufs: (0..messages).map(|m| want(&kind, m)).collect(),
            sent: vec![Sent::NotYet; messages],
            kind,
            next_msg: 0,
            stream: None,
            abort_queue: Vec::new(),
            next_seq: 0,
            pushed: 0,
            popped: 0,
            to_fragment: Vec::new(),
            failed: false,
            settle,
            sender_dead: false,
            receiver_dead: false,
            copying: Vec::new(),
            generation: (0..messages as u64).map(|m| 1 + m * 1000).collect(),
            posted_upto: 0,
            given_up: vec![false; messages],
            partial: None,
            delivered: BTreeMap::new(),
            reported_failed: Vec::new(),
            awaiting_fragment: Vec::new(),
            deciding: Vec::new(),
            cov: Coverage::default(),
        }
    }

    fn ring(&self) -> &RingRef {
        self.producer.ring()
    }

    fn word(&self, seq: u64) -> &AtomicU64 {
        self.ring().ack(seq)
    }

    fn entry(&self, typ: u8, msg: usize) -> Entry {
        Entry {
            typ,
            key: MsgKey::new(0, MsgKind(0), msg as u32),
            serial: self.pushed,
            total_len: MSG_BYTES as u64,
        }
    }

    /// The sender reuses a buffer it owns again: whatever a late reader would copy is wrong.
    fn reuse(&mut self, msg: usize) {
        self.sent[msg] = Sent::Returned;
        self.bufs[msg].fill(POISON);
        self.generation[msg] += 1;
    }

    // ----- sender steps ----------------------------------------------------------------

    fn send_next(&mut self) {
        // One fragmented message at a time (the transport's `frag_owner`): a stream under way
        // goes on first, then fragments of withdrawn descriptors.
        if let Some((msg, off)) = self.stream {
            self.push_chunk(msg, off);
            return;
        }
        if let Some(&msg) = self.to_fragment.first() {
            let e = self.entry(T_FRAG, msg);
            let data = content(msg as u64);
            if self.producer.push(&e, &data) {
                self.pushed += 1;
                self.to_fragment.remove(0);
            }
            return;
        }
        if self.failed || self.next_msg >= self.bufs.len() {
            return;
        }
        let msg = self.next_msg;
        match self.kind[msg] {
            Kind::SingleCopy => {
                let seq = self.next_seq;
                if !window_free(self.ring(), seq) {
                    return;
                }
                let addr = msg as u64;
                // Every other single-copy message lies in the sender's shared heap: its
                // descriptor names the region, which the receiver copies from through a
                // mapping that outlives the sender.
                let heap = (msg % 2 == 1).then(|| HeapDesc {
                    generation: self.generation[msg],
                    fd: 3,
                    ino: 7,
                    base: addr,
                    len: MSG_BYTES as u64,
                });
                let desc = encode_desc(&CmaDesc {
                    pid: 1,
                    addr,
                    len: MSG_BYTES as u64,
                    seq,
                    heap,
                });
                let e = self.entry(T_CMA, msg);
                if self.producer.push(&e, &desc) {
                    self.pushed += 1;
                    self.next_seq += 1;
                    self.sent[msg] = Sent::Offered(seq);
                    self.next_msg += 1;
                } else {
                    self.cov.full_ring += 1;
                }
            }
            Kind::Inline => {
                let e = self.entry(T_INLINE, msg);
                let data = self.bufs[msg].clone();
                if self.producer.push(&e, &data) {
                    self.pushed += 1;
                    // The ring holds a copy: the buffer may be reused at once.
                    self.reuse(msg);
                    self.next_msg += 1;
                } else {
                    self.cov.full_ring += 1;
                }
            }
            Kind::Stream => {
                if self.push_chunk(msg, 0) {
                    self.next_msg += 1;
                }
            }
        }
    }

    /// Pushes the next chunk of stream `msg` from byte `off`, over a span of a random number
    /// of slots (bounded by the free run, as the transport's is by `free_run`).
    fn push_chunk(&mut self, msg: usize, off: usize) -> bool {
        let len = self.bufs[msg].len();
        let run = self.producer.free_run();
        if run == 0 {
            self.cov.full_ring += 1;
            return false;
        }
        let span = ((1 + self.rng.below(SIM_SPAN)) as usize).min(run);
        let chunk = self.producer.span_cap(span).min(len - off);
        let e = Entry {
            typ: T_FRAG,
            key: MsgKey::new(0, MsgKind(0), msg as u32),
            serial: self.pushed,
            total_len: len as u64,
        };
        let data = self.bufs[msg][off..off + chunk].to_vec();
        if !self.producer.push_span(&e, &data) {
            return false;
        }
        self.pushed += 1;
        self.cov.chunks += 1;
        if chunk > self.producer.span_cap(1) {
            self.cov.spans += 1;
        }
        if off + chunk == len {
            self.stream = None;
            // Every byte is in the ring: the buffer is the sender's again.
            self.reuse(msg);
        } else {
            self.stream = Some((msg, off + chunk));
        }
        true
    }

    /// Pushes the abort entries of the failure (stops at a full ring; retried later).
    fn flush_aborts(&mut self) {
        while let Some(&msg) = self.abort_queue.first() {
            let e = Entry {
                typ: T_ABORT,
                key: MsgKey::new(0, MsgKind(0), msg as u32),
                serial: self.pushed,
                total_len: self.bufs[msg].len() as u64,
            };
            if !self.producer.push(&e, &[]) {
                return;
            }
            self.pushed += 1;
            self.abort_queue.remove(0);
        }
    }

    /// Polls one outstanding descriptor: completed ones return their buffer; an idle one
    /// may be withdrawn (eager fallback: the message follows as a fragment).
    fn poll_offer(&mut self, withdraw_idle: bool) {
        let offered: Vec<(usize, u64)> = self
            .sent
            .iter()
            .enumerate()
            .filter_map(|(m, s)| match s {
                Sent::Offered(seq) => Some((m, *seq)),
                _ => None,
            })
            .collect();
        if offered.is_empty() {
            return;
        }
        let (msg, seq) = offered[self.rng.below(offered.len() as u64) as usize];
        match ring::offer_state(self.word(seq), seq) {
            Offer::Done => self.reuse(msg),
            Offer::Open
                if withdraw_idle && !self.failed && !self.deciding.iter().any(|d| d.0 == msg) =>
            {
                self.deciding.push((msg, seq, false));
            }
            _ => {}
        }
    }

    /// The sender's operation fails: settle (withdraw what is open, wait for what is
    /// claimed: here, leave claimed ones to later `settle_step`s).
    fn fail(&mut self) {
        self.failed = true;
        // Fragments of withdrawn descriptors not pushed yet will never be, and a stream under
        // way stops: the receiver is told with abort entries (`settle_failed`).
        self.abort_queue.append(&mut self.to_fragment);
        if let Some((msg, _)) = self.stream.take() {
            self.abort_queue.push(msg);
            self.reuse(msg);
        }
    }

    fn settle_step(&mut self) {
        self.flush_aborts();
        for msg in 0..self.sent.len() {
            let Sent::Offered(seq) = self.sent[msg] else {
                continue;
            };
            match self.settle {
                Settle::Broken => self.reuse(msg),
                Settle::WithdrawOrWait => match ring::offer_state(self.word(seq), seq) {
                    Offer::Done | Offer::Withdrawn => self.reuse(msg),
                    Offer::Open => {
                        if !self.deciding.iter().any(|d| d.0 == msg && d.2) {
                            self.deciding.push((msg, seq, true));
                        }
                    }
                    // Claimed: the receiver copies now; wait (unless it died, which the
                    // transport sees through its pidfd).
                    Offer::Claimed => {
                        self.cov.waited_for_claim += 1;
                        if self.receiver_dead {
                            self.reuse(msg);
                        }
                    }
                },
            }
        }
    }

    /// Makes one decided withdrawal: it wins unless the receiver claimed the descriptor since.
    fn withdraw_step(&mut self) {
        if self.deciding.is_empty() {
            return;
        }
        let i = self.rng.below(self.deciding.len() as u64) as usize;
        let (msg, seq, abort) = self.deciding.remove(i);
        if self.sent[msg] != Sent::Offered(seq) || (self.failed && !abort) {
            return;
        }
        if ring::withdraw(self.word(seq), seq, abort) {
            if !abort {
                self.to_fragment.push(msg);
            }
            self.reuse(msg);
        } else {
            self.cov.lost_race += 1;
        }
    }

    // ----- the schedule ----------------------------------------------------------------

    fn run(&mut self, ev: Events) -> Result<(), Violation> {
        let steps = ev.steps(self.bufs.len());
        for step in 0..steps {
            if ev.fail_at == Some(step) {
                self.fail();
            }
            if let Some((sender, at)) = ev.kill {
                if at == step {
                    if sender {
                        self.sender_dead = true;
                    } else {
                        self.receiver_dead = true;
                    }
                }
            }
            if ev.give_up_at == Some(step) && !self.receiver_dead {
                self.give_up_one();
            }
            let pick = self.rng.below(12);
            match pick {
                0..=3 if !self.sender_dead => {
                    if self.failed {
                        self.settle_step();
                    } else {
                        self.send_next();
                    }
                }
                4 if !self.sender_dead => {
                    let withdraw = self.rng.below(3) == 0;
                    self.poll_offer(withdraw)
                }
                5 if !self.sender_dead => self.withdraw_step(),
                6..=8 if !self.receiver_dead => self.receive_one()?,
                9 if !self.receiver_dead => self.copy_one()?,
                10 if !self.receiver_dead => self.post_one(),
                11 if !self.receiver_dead && ev.random_give_ups && self.rng.below(6) == 0 => {
                    self.give_up_one()
                }
                _ => {}
            }
        }
        // Drain without withdrawals: every live side finishes what it can; the receiver posts
        // every receive.
        for _ in 0..(self.bufs.len() * 16 + 64) {
            if !self.sender_dead {
                if self.failed {
                    self.settle_step();
                    self.withdraw_step();
                } else {
                    self.withdraw_step();
                    self.send_next();
                    self.poll_offer(false);
                }
            }
            if !self.receiver_dead {
                self.post_one();
                self.receive_one()?;
                self.copy_one()?;
            }
        }
        self.check_end(ev.fail_at.is_some(), ev.kill.is_some())
    }

    fn check_end(&self, failed: bool, killed: bool) -> Result<(), Violation> {
        for (m, got) in self.delivered.iter() {
            if *got != want(&self.kind, *m) {
                return Err(Violation(format!("message {m} wrong at the end")));
            }
        }
        if !failed && !killed {
            let missing: Vec<usize> = (0..self.bufs.len())
                .filter(|&m| !self.delivered.contains_key(&m) && !self.given_up[m])
                .collect();
            if !missing.is_empty() {
                return Err(Violation(format!("messages {missing:?} never delivered")));
            }
            if !self.reported_failed.is_empty() {
                return Err(Violation("a message failed without any failure".into()));
            }
        }
        if failed && !killed {
            // Every message that went out is delivered, reported failed or given up: a
            // cut-off stream and a withdrawn descriptor's missing fragment are closed by
            // their abort entries, nothing is waited for forever.
            for m in 0..self.next_msg {
                let ok = self.delivered.contains_key(&m)
                    || self.reported_failed.contains(&m)
                    || self.given_up[m];
                if !ok {
                    return Err(Violation(format!(
                        "message {m} neither delivered nor reported failed after the sender's failure"
                    )));
                }
            }
            if let Some(p) = &self.partial {
                return Err(Violation(format!(
                    "stream {} still half received after the live sender's failure settled",
                    p.msg
                )));
            }
        }
        // The sender never keeps a buffer lent out once its failed operation settled, unless
        // the receiver is still copying it (wait) .
        if failed && !self.sender_dead && self.settle == Settle::WithdrawOrWait {
            for (m, s) in self.sent.iter().enumerate() {
                if let Sent::Offered(seq) = s {
                    if ring::offer_state(self.word(*seq), *seq) != Offer::Claimed {
                        return Err(Violation(format!(
                            "message {m} still offered after settling"
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

mod receiver;
mod schedules;
mod split;

use schedules::Events;
