//! Seeded, replayable simulation of the ring protocol (issue 05): one sender and one receiver
//! of a real ring (`ring.rs`, in heap memory) take single protocol steps in an order drawn by
//! a seeded scheduler: pushes into a full ring, single-copy descriptors that the receiver
//! claims and copies in two separate steps, withdrawals of idle descriptors (the message then
//! follows as a fragment), a failure of the sender's operation (settle: withdraw or wait) and
//! kills of either side at a random step.
//!
//! Checked after every schedule:
//! - ring entries arrive in the order pushed, none lost or duplicated;
//! - every message is delivered at most once, with the bytes it had when it was sent;
//! - no copy ever reads a buffer the sender has reused (withdrawn, aborted or completed);
//! - without failure or kill every message is delivered; after a sender failure every message
//!   is delivered intact or reported failed, none is waited for forever;
//! - exactly one of claim and withdraw wins each descriptor.
//!
//! A failing schedule prints its seed; `FERRY_SIM_SEED=N cargo test -p ferry-shm --lib sim`
//! replays it alone.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use ferry_proto::{MsgKey, MsgKind};

use crate::ring::{
    self, decode_cma, encode_cma, window_free, Claim, Consumer, Entry, Offer, Producer, RingRef,
    CMA_DESC, T_CMA, T_FRAG, T_INLINE,
};
use crate::segment::RING_CTRL;

const SLOTS: usize = 4;
const SLOT_BYTES: usize = 128;
const MSG_BYTES: usize = 24;
const POISON: u8 = 0xee;

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

fn content(msg: u64) -> Vec<u8> {
    (0..MSG_BYTES)
        .map(|i| (msg as u8).wrapping_mul(31).wrapping_add(i as u8) & 0x7f)
        .collect()
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
    single_copy: Vec<bool>,
    next_msg: usize,
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
    /// Receiver: claimed descriptors not yet copied (msg, seq).
    copying: Vec<(usize, u64)>,
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
        let single_copy = (0..messages).map(|_| rng.below(2) == 0).collect();
        Sim {
            producer: Producer::new(ring),
            consumer: Consumer::new(ring),
            _mem: mem,
            rng,
            bufs: (0..messages as u64).map(content).collect(),
            sent: vec![Sent::NotYet; messages],
            single_copy,
            next_msg: 0,
            next_seq: 0,
            pushed: 0,
            popped: 0,
            to_fragment: Vec::new(),
            failed: false,
            settle,
            sender_dead: false,
            receiver_dead: false,
            copying: Vec::new(),
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
    }

    // ----- sender steps ----------------------------------------------------------------

    fn send_next(&mut self) {
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
        if self.single_copy[msg] {
            let seq = self.next_seq;
            if !window_free(self.ring(), seq) {
                return;
            }
            let addr = msg as u64;
            let desc = encode_cma(1, addr, MSG_BYTES as u64, seq);
            let e = self.entry(T_CMA, msg);
            if self.producer.push(&e, &desc) {
                self.pushed += 1;
                self.next_seq += 1;
                self.sent[msg] = Sent::Offered(seq);
                self.next_msg += 1;
            } else {
                self.cov.full_ring += 1;
            }
        } else {
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
        // Fragments of withdrawn descriptors not pushed yet will never be: tell nobody (the
        // transport fails the whole message stream's receive through liveness, not modelled).
        self.to_fragment.clear();
    }

    fn settle_step(&mut self) {
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

    // ----- receiver steps --------------------------------------------------------------

    fn receive_one(&mut self) -> Result<(), Violation> {
        let Some(e) = self.consumer.peek() else {
            return Ok(());
        };
        if e.serial != self.popped {
            return Err(Violation(format!(
                "ring entry {} arrived when {} was due (lost, duplicated or reordered)",
                e.serial, self.popped
            )));
        }
        let msg = e.key.tag as usize;
        match e.typ {
            T_INLINE | T_FRAG => {
                let mut data = vec![0u8; MSG_BYTES];
                self.consumer.read_payload(&mut data);
                self.consumer.pop();
                if e.typ == T_FRAG {
                    if !self.awaiting_fragment.contains(&msg) {
                        return Err(Violation(format!("fragment of message {msg} unasked")));
                    }
                    self.awaiting_fragment.retain(|&m| m != msg);
                }
                self.deliver(msg, data)?;
            }
            T_CMA => {
                let mut raw = [0u8; CMA_DESC];
                self.consumer.read_payload(&mut raw);
                self.consumer.pop();
                let d = decode_cma(&raw);
                match ring::claim(self.word(d.seq), d.seq) {
                    Claim::Got => {
                        self.cov.claimed += 1;
                        self.copying.push((d.addr as usize, d.seq))
                    }
                    Claim::Withdrawn => {
                        self.cov.withdrawn += 1;
                        self.awaiting_fragment.push(msg)
                    }
                    Claim::Aborted => {
                        self.cov.aborted += 1;
                        self.reported_failed.push(msg)
                    }
                }
            }
            other => return Err(Violation(format!("unknown entry type {other}"))),
        }
        self.popped += 1;
        Ok(())
    }

    fn copy_one(&mut self) -> Result<(), Violation> {
        if self.copying.is_empty() {
            return Ok(());
        }
        let i = self.rng.below(self.copying.len() as u64) as usize;
        let (msg, seq) = self.copying.remove(i);
        if self.sender_dead {
            // process_vm_readv fails with ESRCH: an error, not data.
            self.reported_failed.push(msg);
        } else {
            let data = self.bufs[msg].clone();
            if data.contains(&POISON) {
                return Err(Violation(format!(
                    "copy of message {msg} (descriptor {seq}) read a buffer the sender had reused"
                )));
            }
            self.deliver(msg, data)?;
        }
        ring::complete(self.word(seq), seq);
        Ok(())
    }

    fn deliver(&mut self, msg: usize, data: Vec<u8>) -> Result<(), Violation> {
        if data != content(msg as u64) {
            return Err(Violation(format!(
                "message {msg} delivered with wrong bytes"
            )));
        }
        if self.delivered.insert(msg, data).is_some() {
            return Err(Violation(format!("message {msg} delivered twice")));
        }
        Ok(())
    }

    // ----- the schedule ----------------------------------------------------------------

    fn run(
        &mut self,
        fail_at: Option<usize>,
        kill: Option<(bool, usize)>,
    ) -> Result<(), Violation> {
        let steps = 400 + self.bufs.len() * 20;
        for step in 0..steps {
            if fail_at == Some(step) {
                self.fail();
            }
            if let Some((sender, at)) = kill {
                if at == step {
                    if sender {
                        self.sender_dead = true;
                    } else {
                        self.receiver_dead = true;
                    }
                }
            }
            let pick = self.rng.below(10);
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
                _ => {}
            }
        }
        // Drain without withdrawals: every live side finishes what it can.
        for _ in 0..(self.bufs.len() * 8 + 64) {
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
                self.receive_one()?;
                self.copy_one()?;
            }
        }
        self.check_end(fail_at.is_some(), kill.is_some())
    }

    fn check_end(&self, failed: bool, killed: bool) -> Result<(), Violation> {
        for (m, want) in self.delivered.iter() {
            if *want != content(*m as u64) {
                return Err(Violation(format!("message {m} wrong at the end")));
            }
        }
        if !failed && !killed {
            if self.delivered.len() != self.bufs.len() {
                let missing: Vec<usize> = (0..self.bufs.len())
                    .filter(|m| !self.delivered.contains_key(m))
                    .collect();
                return Err(Violation(format!("messages {missing:?} never delivered")));
            }
            if !self.reported_failed.is_empty() {
                return Err(Violation("a message failed without any failure".into()));
            }
        }
        if failed && !killed {
            // Every message that went out is delivered or reported failed, except withdrawn
            // ones whose fragment the failed sender never pushed (the receiver learns of
            // those through the sender's liveness, outside this model).
            for m in 0..self.next_msg {
                let ok = self.delivered.contains_key(&m)
                    || self.reported_failed.contains(&m)
                    || self.awaiting_fragment.contains(&m);
                if !ok {
                    return Err(Violation(format!(
                        "message {m} neither delivered nor reported failed after the sender's failure"
                    )));
                }
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

/// Runs schedule `seed`; returns the violation, if any, and what it exercised.
fn schedule(seed: u64, settle: Settle) -> Result<Coverage, Violation> {
    let mut pick = Rng::new(seed ^ 0x5eed);
    let messages = 1 + pick.below(40) as usize;
    let fail_at = (pick.below(3) == 0).then(|| pick.below(300) as usize);
    let kill = (pick.below(4) == 0).then(|| (pick.below(2) == 0, pick.below(300) as usize));
    let mut sim = Sim::new(seed, messages, settle);
    sim.run(fail_at, kill)?;
    Ok(sim.cov)
}

fn seeds() -> Vec<u64> {
    match std::env::var("FERRY_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(s) => vec![s],
        None => (0..5000).collect(),
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "thousands of schedules; the ring steps run under Miri in ring.rs"
)]
fn ring_protocol_holds_under_random_schedules() {
    let mut total = Coverage::default();
    let all = seeds();
    for &seed in &all {
        match schedule(seed, Settle::WithdrawOrWait) {
            Ok(c) => {
                total.full_ring += c.full_ring;
                total.claimed += c.claimed;
                total.withdrawn += c.withdrawn;
                total.aborted += c.aborted;
                total.waited_for_claim += c.waited_for_claim;
                total.lost_race += c.lost_race;
            }
            Err(Violation(v)) => panic!("schedule {seed} (replay: FERRY_SIM_SEED={seed}): {v}"),
        }
    }
    eprintln!("{} schedules: {total:?}", all.len());
    if all.len() > 1 {
        let c = total;
        assert!(
            c.full_ring > 0
                && c.claimed > 0
                && c.withdrawn > 0
                && c.aborted > 0
                && c.waited_for_claim > 0
                && c.lost_race > 0,
            "the schedules missed a protocol path: {c:?}"
        );
    }
}

/// The checker is not blind: a sender that reuses its buffers after a failure without taking
/// its descriptors back (issue 05's defect) is caught by some schedule.
#[test]
#[cfg_attr(miri, ignore = "thousands of schedules")]
fn broken_settle_is_caught() {
    let caught = (0..5000u64).find(|&s| schedule(s, Settle::Broken).is_err());
    assert!(
        caught.is_some(),
        "no schedule noticed reuse of lent buffers"
    );
}

/// A few schedules, small enough for Miri (checks the ring's raw-pointer accesses and the
/// atomics' use under its model).
#[test]
fn a_few_schedules() {
    for seed in 0..8 {
        if let Err(Violation(v)) = schedule(seed, Settle::WithdrawOrWait) {
            panic!("schedule {seed}: {v}");
        }
    }
}
