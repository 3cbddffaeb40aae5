//! Seeded, replayable simulation of split single copy (`transport/split.rs`, issue 05): a
//! sender (rank 0) and a receiver (rank 1) joined by two real rings (`ring.rs`, in heap
//! memory), one carrying the sender's single-copy descriptors, the other the receiver's write
//! offers, take single protocol steps in an order drawn by a seeded scheduler. Every decision
//! on a completion word is made by `ring::offer` (the functions `split.rs` and `failure.rs`
//! call) or by the ring's claim/withdraw/complete, so the schedules check the code that runs.
//!
//! Modelled: messages sent in exchanges (batches) of one to four; the receiver claims a
//! descriptor, offers the first part of its receive buffer (when the offer ring and its
//! completion window have room, else it reads the whole message), reads the second part, then
//! polls the offer until the sender wrote, refused (it was driving another exchange) or gave the
//! offer back after a failed write, or until a drawn number of polls passes and it withdraws the
//! offer and reads that part itself. The sender claims an offer, writes and reports in separate
//! steps (the receiver runs in between), withdraws idle descriptors (the message then follows
//! as a fragment), and refuses offers no send of its current exchange answers. Either side's
//! exchange fails at a drawn step and settles (`take_back` on each thing it lent out, one step
//! at a time); either side is killed at a drawn step (and at every step in
//! `every_step_split_kill_and_fail`); a survivor notices the death only as the transport does
//! (a failed cross-memory copy, a claim held by a dead process, or its liveness check while it
//! waits for nothing else).
//!
//! Memory: every send and receive buffer is a region named in the descriptors and offers by
//! (message, generation); a side that returns from an exchange, completed or failed, gives its
//! buffers back to the program, which reuses them (poison, next generation). Copying through a
//! name of an older generation is a use after return.
//!
//! Checked during and after every schedule:
//! - no write into a receive buffer after its receive returned (failed or not), no read of a
//!   send buffer after its sender returned;
//! - each part of a message is copied exactly once, by exactly one side (the sender's write or
//!   the receiver's read; a whole read or a fragment for an unsplit message), and never twice
//!   even in a failed exchange;
//! - every received message has the bytes it was sent with; a message not received belongs to
//!   an exchange the receiver reports failed;
//! - exactly one of the sender's claim (or refusal) and the receiver's withdrawal wins each
//!   offer;
//! - nobody waits forever: every live side finishes all its exchanges, and an exchange fails
//!   for a death only after that death, naming the rank that died.
//!
//! A failing schedule prints its seed; `FERRY_SIM_SEED=N cargo test -p ferry-shm --lib sim`
//! replays it alone.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use ferry_proto::{MsgKey, MsgKind};

use super::{Rng, Violation};
use crate::ring::offer::{self, Poll, Serve, TakeBack};
use crate::ring::{
    self, decode_cma, decode_write, encode_desc, encode_write, window_free, Claim, CmaDesc,
    Consumer, Entry, Offer, Producer, RingRef, WriteOffer, CMA_DESC, T_CMA, T_WRITE, WRITE_OFFER,
};
use crate::segment::RING_CTRL;

/// Slots per ring: small, so that the offer ring fills and a split falls back to a whole read.
const SLOTS: usize = 4;
const SLOT_BYTES: usize = 128;
/// The simulated page: the sender's part ends on a multiple of it (`offer::split_point`).
const PAGE: usize = 8;
const POISON: u8 = 0xee;
pub(super) const SENDER: usize = 0;
pub(super) const RECEIVER: usize = 1;

/// A ring in heap memory.
struct RingMem {
    _mem: Vec<u64>,
    ring: RingRef,
}

impl RingMem {
    fn new() -> RingMem {
        let mut mem = vec![0u64; (RING_CTRL + SLOTS * SLOT_BYTES) / 8 + 16];
        let off = (mem.as_mut_ptr() as *mut u8).align_offset(64);
        // SAFETY: `mem` lives as long as the RingMem and is never resized; the aligned ring
        // (control area and slots) fits in it.
        let ring =
            unsafe { RingRef::new((mem.as_mut_ptr() as *mut u8).add(off), SLOTS, SLOT_BYTES) };
        RingMem { _mem: mem, ring }
    }
}

/// A buffer the program lends to an exchange, named by (message, generation).
struct Region {
    bytes: Vec<u8>,
    generation: u64,
}

impl Region {
    /// The program has it back and reuses it.
    fn reuse(&mut self) {
        self.bytes.fill(POISON);
        self.generation += 1;
    }
}

fn name(msg: usize, generation: u64) -> u64 {
    ((msg as u64) << 32) | generation
}

fn unname(addr: u64) -> (usize, u64) {
    ((addr >> 32) as usize, addr & 0xffff_ffff)
}

fn content(msg: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((msg * 31 + i * 7) % 200) as u8 + 1)
        .collect()
}

/// Why an exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cause {
    /// The rank named died.
    PeerDied(usize),
    /// The sender took the message back (its own exchange had failed).
    SenderGaveUp,
    /// A drawn failure of this side's own exchange (any other error).
    Own,
    /// The program gave the receive up: its sender's exchange failed before the message
    /// went out.
    Abandoned,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// The exchange failed: taking back what it lent out, step by step.
    Settling,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Send {
    NotYet,
    Offered(u64),
    /// Withdrawn idle: the message went as a fragment.
    Fragmented,
    Done,
    Settled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recv {
    Waiting,
    /// Claimed, to be read whole.
    Reading(CmaDesc),
    Split {
        d: CmaDesc,
        o: WriteOffer,
        own_read: bool,
        polls: u32,
        idle_after: u32,
    },
    /// The descriptor was withdrawn: a fragment follows.
    AwaitFrag,
    /// Bug::CompleteBeforeOwnRead: the offered part is still to be read.
    LateRead(CmaDesc, WriteOffer),
    /// Its split was finished while the receiver drove another exchange: completed when its
    /// own exchange runs again.
    DoneElsewhere,
    /// Bug::DropForeignSplit: its split was dropped by another exchange.
    Orphaned,
    Delivered,
    Failed,
}

/// A write offer the sender claimed and has not reported yet: it serves one start to end, as
/// `serve_write` does, while the receiver runs.
#[derive(Debug, Clone, Copy)]
struct Writing {
    w: WriteOffer,
    msg: usize,
    /// Generation of the send buffer it writes from.
    src: u64,
    wrote: Option<bool>,
}

/// A defect put into the model on purpose, to show that the checks notice it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bug {
    None,
    /// A failed receiver returns without taking its offers back.
    ReturnWithoutTakeBack,
    /// The receiver completes the sender's descriptor before reading the offered part itself.
    CompleteBeforeOwnRead,
    /// The sender writes even when it lost the offer to the receiver's withdrawal.
    WriteWithoutClaim,
    /// Another exchange finishes a split whatever became of its offer and drops it (the
    /// defect fixed with `offer::finish_elsewhere`).
    DropForeignSplit,
    /// Another exchange that fails settles every split of the rank, not only its own (the
    /// defect fixed in `settle_splits`).
    SettleEverySplit,
}

/// What the schedules exercised, so that the test cannot pass vacuously.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct SplitCoverage {
    pub(super) offers: u64,
    pub(super) whole_reads: u64,
    pub(super) written: u64,
    pub(super) refused: u64,
    pub(super) idle_withdrawn: u64,
    pub(super) lost_to_withdrawal: u64,
    pub(super) failed_writes: u64,
    pub(super) writer_died: u64,
    pub(super) taken_back: u64,
    pub(super) waited_for_writer: u64,
    pub(super) fragments: u64,
    pub(super) dropped: u64,
    pub(super) window_full: u64,
    pub(super) sender_waited_for_split: u64,
    /// Splits finished while the receiver drove another exchange.
    pub(super) done_elsewhere: u64,
    /// Other exchanges of the receiver that failed while it had splits under way.
    pub(super) foreign_failures: u64,
}

impl SplitCoverage {
    pub(super) fn add(&mut self, c: &SplitCoverage) {
        self.offers += c.offers;
        self.whole_reads += c.whole_reads;
        self.written += c.written;
        self.refused += c.refused;
        self.idle_withdrawn += c.idle_withdrawn;
        self.lost_to_withdrawal += c.lost_to_withdrawal;
        self.failed_writes += c.failed_writes;
        self.writer_died += c.writer_died;
        self.taken_back += c.taken_back;
        self.waited_for_writer += c.waited_for_writer;
        self.fragments += c.fragments;
        self.dropped += c.dropped;
        self.window_full += c.window_full;
        self.sender_waited_for_split += c.sender_waited_for_split;
        self.done_elsewhere += c.done_elsewhere;
        self.foreign_failures += c.foreign_failures;
    }
}

/// The events of one schedule.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SplitEvents {
    /// (rank, step): that rank's current exchange fails at that step.
    pub(super) fail: Option<(usize, usize)>,
    /// (rank, step): that rank is killed at that step.
    pub(super) kill: Option<(usize, usize)>,
}

pub(super) struct SplitSim {
    rng: Rng,
    bug: Bug,
    /// Sender to receiver: descriptors.
    desc_ring: RingMem,
    /// Receiver to sender: write offers.
    offer_ring: RingMem,
    s_tx: Producer,
    r_rx: Consumer,
    r_tx: Producer,
    s_rx: Consumer,
    len: Vec<usize>,
    /// Exchanges: (first message, end).
    batches: Vec<(usize, usize)>,
    batch_of: Vec<usize>,
    sbuf: Vec<Region>,
    rbuf: Vec<Region>,
    dead: [bool; 2],
    phase: [Phase; 2],
    /// Each side's current exchange.
    batch: [usize; 2],
    errors: [Vec<(usize, Cause)>; 2],
    sends: Vec<Send>,
    s_seq: u64,
    writing: Option<Writing>,
    /// Fragments of withdrawn descriptors, as the ring would carry them.
    frags: BTreeMap<usize, Vec<u8>>,
    recvs: Vec<Recv>,
    r_seq: u64,
    /// Descriptors of later exchanges, not claimed yet.
    pending: BTreeMap<usize, CmaDesc>,
    given_up: Vec<bool>,
    delivered: BTreeMap<usize, Vec<u8>>,
    /// Copies into each receive buffer: of the offered part, of the rest, of the whole.
    first: Vec<u32>,
    second: Vec<u32>,
    whole: Vec<u32>,
    /// Per offer: (claims won, withdrawals and refusals won).
    wins: BTreeMap<u64, (u32, u32)>,
    pub(super) cov: SplitCoverage,
}

impl SplitSim {
    pub(super) fn new(seed: u64, messages: usize, bug: Bug) -> SplitSim {
        let mut rng = Rng::new(seed ^ 0x5b11_7c0b);
        let len: Vec<usize> = (0..messages).map(|_| 1 + rng.below(120) as usize).collect();
        let mut batches = Vec::new();
        let mut batch_of = vec![0; messages];
        let mut m = 0;
        while m < messages {
            let end = (m + 1 + rng.below(4) as usize).min(messages);
            batch_of[m..end].fill(batches.len());
            batches.push((m, end));
            m = end;
        }
        let desc_ring = RingMem::new();
        let offer_ring = RingMem::new();
        SplitSim {
            s_tx: Producer::new(desc_ring.ring),
            r_rx: Consumer::new(desc_ring.ring),
            r_tx: Producer::new(offer_ring.ring),
            s_rx: Consumer::new(offer_ring.ring),
            desc_ring,
            offer_ring,
            rng,
            bug,
            sbuf: (0..messages)
                .map(|m| Region {
                    bytes: content(m, len[m]),
                    generation: 1,
                })
                .collect(),
            rbuf: (0..messages)
                .map(|m| Region {
                    bytes: vec![0; len[m]],
                    generation: 1,
                })
                .collect(),
            len,
            batches,
            batch_of,
            dead: [false; 2],
            phase: [Phase::Running; 2],
            batch: [0; 2],
            errors: [Vec::new(), Vec::new()],
            sends: vec![Send::NotYet; messages],
            s_seq: 0,
            writing: None,
            frags: BTreeMap::new(),
            recvs: vec![Recv::Waiting; messages],
            r_seq: 0,
            pending: BTreeMap::new(),
            given_up: vec![false; messages],
            delivered: BTreeMap::new(),
            first: vec![0; messages],
            second: vec![0; messages],
            whole: vec![0; messages],
            wins: BTreeMap::new(),
            cov: SplitCoverage::default(),
        }
    }

    /// Completion word of the sender's descriptor `seq`.
    fn dword(&self, seq: u64) -> &AtomicU64 {
        self.desc_ring.ring.ack(seq)
    }

    /// Completion word of the receiver's offer `seq`.
    fn oword(&self, seq: u64) -> &AtomicU64 {
        self.offer_ring.ring.ack(seq)
    }

    fn range(&self, side: usize) -> std::ops::Range<usize> {
        match self.batches.get(self.batch[side]) {
            Some(&(a, b)) => a..b,
            None => 0..0,
        }
    }

    fn finished(&self, side: usize) -> bool {
        self.batch[side] >= self.batches.len()
    }

    fn fail(&mut self, side: usize, cause: Cause) {
        if self.phase[side] == Phase::Running && !self.finished(side) {
            self.phase[side] = Phase::Settling;
            let b = self.batch[side];
            self.errors[side].push((b, cause));
        }
    }

    fn win(&mut self, seq: u64, claim: bool) -> Result<(), Violation> {
        let w = self.wins.entry(seq).or_default();
        if claim {
            w.0 += 1;
        } else {
            w.1 += 1;
        }
        if w.0 + w.1 > 1 {
            return Err(Violation(format!(
                "offer {seq}: {} claims and {} withdrawals won",
                w.0, w.1
            )));
        }
        Ok(())
    }

    /// What a cross-memory read of `range` of the send buffer named `addr` returns: None if
    /// the sender is dead (ESRCH).
    fn read_send(
        &self,
        addr: u64,
        range: std::ops::Range<usize>,
    ) -> Result<Option<Vec<u8>>, Violation> {
        let (m, generation) = unname(addr);
        if self.dead[SENDER] {
            return Ok(None);
        }
        if self.sbuf[m].generation != generation {
            return Err(Violation(format!(
                "the receiver read the send buffer of message {m} after its sender returned"
            )));
        }
        Ok(Some(self.sbuf[m].bytes[range].to_vec()))
    }

    // ----- the sender --------------------------------------------------------------------

    pub(super) fn sender_step(&mut self) -> Result<(), Violation> {
        if self.writing.is_some() {
            return self.write_step();
        }
        if self.phase[SENDER] == Phase::Settling {
            self.sender_settle_step();
            return Ok(());
        }
        if self.finished(SENDER) {
            // Later exchanges: no send of theirs answers an offer.
            return self.serve_step(false);
        }
        match self.rng.below(5) {
            0 | 1 => self.post_step(),
            2 => {
                let idle = self.rng.below(3) == 0;
                self.poll_sends(idle)
            }
            3 => {
                // Now and then the sender drives another exchange (whose sends answer none).
                let this = self.rng.below(8) != 0;
                self.serve_step(this)?
            }
            _ => self.sender_liveness(),
        }
        Ok(())
    }

    fn post_step(&mut self) {
        let Some(m) = self.range(SENDER).find(|&m| self.sends[m] == Send::NotYet) else {
            return;
        };
        let seq = self.s_seq;
        if !window_free(&self.desc_ring.ring, seq) {
            self.cov.window_full += 1;
            return;
        }
        let desc = encode_desc(&CmaDesc {
            pid: 1,
            addr: name(m, self.sbuf[m].generation),
            len: self.len[m] as u64,
            seq,
            heap: None,
        });
        let e = Entry {
            typ: T_CMA,
            key: MsgKey::new(0, MsgKind(0), m as u32),
            serial: m as u64,
            total_len: self.len[m] as u64,
        };
        if self.s_tx.push(&e, &desc) {
            self.s_seq += 1;
            self.sends[m] = Send::Offered(seq);
        }
    }

    /// Looks at the descriptors of the current exchange: finished ones, and (`idle`) one
    /// withdrawn as the transport does after `eager_wait`, the message going as a fragment.
    fn poll_sends(&mut self, idle: bool) {
        for m in self.range(SENDER) {
            let Send::Offered(seq) = self.sends[m] else {
                continue;
            };
            match ring::offer_state(self.dword(seq), seq) {
                Offer::Done => self.sends[m] = Send::Done,
                Offer::Open if idle && ring::withdraw(self.dword(seq), seq, false) => {
                    self.frags.insert(m, self.sbuf[m].bytes.clone());
                    self.sends[m] = Send::Fragmented;
                    self.cov.fragments += 1;
                    return;
                }
                Offer::Claimed => self.cov.sender_waited_for_split += 1,
                _ => {}
            }
        }
        if self
            .range(SENDER)
            .all(|m| matches!(self.sends[m], Send::Done | Send::Fragmented))
        {
            self.sender_returns();
        }
    }

    /// The liveness check of a sender that waits: fails, naming the receiver, if it died.
    fn sender_liveness(&mut self) {
        if self.dead[RECEIVER] {
            // A completion it has not taken yet is taken first (`peer_ready`).
            self.poll_sends(false);
            self.fail(SENDER, Cause::PeerDied(RECEIVER));
        }
    }

    fn sender_returns(&mut self) {
        for m in self.range(SENDER) {
            self.sbuf[m].reuse();
        }
        self.batch[SENDER] += 1;
        self.phase[SENDER] = Phase::Running;
    }

    fn sender_settle_step(&mut self) {
        for m in self.range(SENDER) {
            let Send::Offered(seq) = self.sends[m] else {
                continue;
            };
            let dead = self.dead[RECEIVER];
            if offer::take_back(self.dword(seq), seq, || !dead) != TakeBack::Wait {
                self.sends[m] = Send::Settled;
            }
        }
        if !self
            .range(SENDER)
            .any(|m| matches!(self.sends[m], Send::Offered(_)))
        {
            self.sender_returns();
        }
    }

    /// Takes the offer at the head of the sender's ring; `this`: the exchange the sender
    /// drives is its current one (else another, whose sends answer none).
    fn serve_step(&mut self, this: bool) -> Result<(), Violation> {
        let Some(e) = self.s_rx.peek() else {
            return Ok(());
        };
        if e.typ != T_WRITE {
            return Err(Violation(format!(
                "entry of type {} in the offer ring",
                e.typ
            )));
        }
        let mut raw = [0u8; WRITE_OFFER];
        self.s_rx.read_payload(&mut raw);
        self.s_rx.pop();
        let w = decode_write(&raw);
        let running = this && self.phase[SENDER] == Phase::Running && !self.finished(SENDER);
        let src = self.range(SENDER).find(|&m| {
            let desc = match self.sends[m] {
                Send::Offered(seq) if running => Some(seq),
                _ => None,
            };
            offer::answers(desc, self.len[m], &w)
        });
        let serve = offer::serve(self.oword(w.seq), w.seq, src.is_some());
        let write = match (serve, src) {
            (Serve::Write, Some(msg)) => {
                self.win(w.seq, true)?;
                Some(msg)
            }
            (Serve::Gone, Some(msg)) if self.bug == Bug::WriteWithoutClaim => Some(msg),
            (Serve::Refused, _) => {
                self.cov.refused += 1;
                self.win(w.seq, false)?;
                None
            }
            _ => {
                self.cov.lost_to_withdrawal += 1;
                None
            }
        };
        if let Some(msg) = write {
            self.writing = Some(Writing {
                w,
                msg,
                src: self.sbuf[msg].generation,
                wrote: None,
            });
        }
        Ok(())
    }

    /// The claimed write: copy, then report (the receiver may run in between).
    fn write_step(&mut self) -> Result<(), Violation> {
        let Some(mut wr) = self.writing else {
            return Ok(());
        };
        match wr.wrote {
            None => {
                if self.sbuf[wr.msg].generation != wr.src {
                    return Err(Violation(format!(
                        "the sender wrote from the buffer of message {} after it returned",
                        wr.msg
                    )));
                }
                let (m, generation) = unname(wr.w.addr);
                let n = wr.w.len as usize;
                let ok = if self.dead[RECEIVER] {
                    false
                } else if self.rbuf[m].generation != generation {
                    return Err(Violation(format!(
                        "the sender wrote into the receive buffer of message {m} after its \
                         receive returned"
                    )));
                } else if self.rng.below(16) == 0 {
                    // EFAULT and the like: the receiver reads that part itself.
                    self.cov.failed_writes += 1;
                    false
                } else {
                    let part = self.sbuf[wr.msg].bytes[..n].to_vec();
                    self.rbuf[m].bytes[..n].copy_from_slice(&part);
                    self.first[m] += 1;
                    true
                };
                wr.wrote = Some(ok);
                self.writing = Some(wr);
            }
            Some(ok) => {
                offer::written(self.oword(wr.w.seq), wr.w.seq, ok);
                if ok {
                    self.cov.written += 1;
                }
                self.writing = None;
            }
        }
        Ok(())
    }
}

mod receiver;
mod run;
