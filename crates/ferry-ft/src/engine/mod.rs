//! One process's fault-tolerance engine: the transport, what this rank knows about failures,
//! and the control protocols (flood of notices, agreements) of its communicator family.
//!
//! There is no progress thread. Control messages are received while the program is blocked
//! in an operation of the family: every operation runs as one combined exchange holding the
//! program's messages plus a standing control receive from every live member (one flow per
//! pair, see [`crate::wire`]) plus the control messages still being sent. Whenever a control
//! message arrives the engine feeds it to its protocol, sends what the protocol answers, and
//! decides whether the program's operation must be interrupted (a revoke of its generation,
//! or the failure of a rank it involves); an interrupted operation is abandoned in the
//! transport ([`Transport::abandon_exchange`]) before its error is returned.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use ferry_core::{
    Error, ErrorKind, Exchange, MsgKey, MsgKind, OpState, RecvBuf, RecvOp, Result, SendOp,
    Transport,
};
use ferry_proto::ft::{peek_instance, Agreement, Decision, Flood};

use crate::wire::{self, Notice};

/// First message generation of fault-tolerant communicators: above the world's 0, below the
/// data layer's groups (`ferry_data::DATA_GENERATION_BASE`, 2^20) and resize's (2^30).
pub const FT_GENERATION_BASE: u32 = 1 << 19;
/// Communicator generations (shrinks) one family can go through.
pub(crate) const MAX_GENERATIONS: u32 = (1 << 19) - 2;

/// Decided agreements kept answering peers that may still need them (a rank whose decision
/// was lost with a failed relay asks again).
const KEPT_AGREEMENTS: usize = 4;
/// Floods of earlier generations kept relaying (a slow member may still flood on them).
const KEPT_FLOODS: usize = 2;
/// Messages for agreements or generations this rank has not reached yet are kept, up to this
/// many (a bounded buffer: a peer cannot be more than a few steps ahead).
const MAX_EARLY: usize = 4096;

/// Rounds of progress (each at most one short wait) that queued control messages get to leave
/// before the program goes on; a send the transport has taken counts as gone.
const FLUSH_ROUNDS: usize = 50;

/// Transport errors in a row about failures already absorbed before the operation gives up
/// (a backend that keeps reporting a failure the engine cannot remove from the exchange).
const MAX_REPEATS: u32 = 1000;

/// What an operation involves, for deciding when a failure or revoke interrupts it.
#[derive(Debug, Clone)]
pub(crate) struct Interest {
    /// Communicator generation the operation belongs to.
    pub generation: u32,
    /// World ranks whose failure interrupts it (every member for collectives and NOP mode,
    /// the peers for point-to-point in CONT mode). Empty: never interrupted (agreement).
    pub ranks: Vec<usize>,
    /// Operation name for errors.
    pub op: &'static str,
    /// A revoke of the generation interrupts it (program operations; not agreements, which
    /// are how a revoked communicator recovers).
    pub revocable: bool,
    /// Honour the per-operation timeout of the configuration (program operations do;
    /// agreements must not give up on live peers).
    pub timeout: bool,
}

/// A control message on its way out.
struct Outgoing {
    peer: usize,
    data: Vec<u8>,
    state: OpState,
}

/// The standing control receive from one peer.
#[derive(Default)]
struct Slot {
    buf: Vec<u8>,
    state: OpState,
}

/// What one round of progress produced.
enum Event {
    /// Something changed (a control message arrived or left, or the program's part is done).
    Progress,
    /// The transport failed.
    Error(Error),
}

/// The engine (see the module doc).
pub(crate) struct Engine {
    pub t: Box<dyn Transport>,
    pub me: usize,
    ctl_key: MsgKey,
    /// Current generation of the family, its live members (sorted world ranks).
    pub generation: u32,
    live: Vec<usize>,
    /// Every world rank known to have failed (detected here, notified, or agreed).
    pub failed: BTreeSet<usize>,
    /// Who told us about each failure (None: detected here), for error messages.
    told_by: BTreeMap<usize, Option<usize>>,
    pub revoked: BTreeSet<u32>,
    /// Members that ended the job (ABORT) because of another failure: named last.
    aborted: BTreeSet<usize>,
    /// Members that ended in an orderly way (their last control message said so).
    left: BTreeSet<usize>,
    floods: VecDeque<(u32, Flood)>,
    agreements: VecDeque<Agreement>,
    /// Next agreement number within the current generation.
    agree_seq: u64,
    /// Messages for generations or agreements not reached yet: (from, envelope).
    early: Vec<(usize, Vec<u8>)>,
    slots: BTreeMap<usize, Slot>,
    out: Vec<Outgoing>,
    /// Control messages received (diagnostics).
    pub control_received: u64,
    finished: bool,
    plain: bool,
}

impl Engine {
    /// An engine over `t` whose family has the control generation `ctl_generation` and starts
    /// at generation 0 with members `live` (sorted world ranks, this rank among them).
    ///
    /// `plain`: no control traffic at all (backends that cannot survive a failure anyway,
    /// mpi; only ABORT is offered there).
    pub fn new(
        t: Box<dyn Transport>,
        ctl_generation: u32,
        live: Vec<usize>,
        plain: bool,
    ) -> Engine {
        let me = t.rank();
        let mut e = Engine {
            me,
            ctl_key: MsgKey::new(ctl_generation, MsgKind::CONTROL, 0x4654_0000),
            generation: 0,
            live: Vec::new(),
            failed: BTreeSet::new(),
            told_by: BTreeMap::new(),
            revoked: BTreeSet::new(),
            left: BTreeSet::new(),
            aborted: BTreeSet::new(),
            floods: VecDeque::new(),
            agreements: VecDeque::new(),
            agree_seq: 0,
            early: Vec::new(),
            slots: BTreeMap::new(),
            out: Vec::new(),
            control_received: 0,
            finished: false,
            plain,
            t,
        };
        e.enter_generation(0, live);
        e
    }

    /// Moves the family to `generation` with live members `live`: a new flood, standing
    /// receives from exactly the live members, and the early messages for it replayed.
    pub fn enter_generation(&mut self, generation: u32, live: Vec<usize>) {
        self.generation = generation;
        self.agree_seq = 0;
        let members: Vec<u32> = live.iter().map(|&r| r as u32).collect();
        let mut flood = Flood::new(self.me as u32, &members);
        for &f in &self.failed {
            flood.on_failure(f as u32);
        }
        self.floods.push_back((generation, flood));
        while self.floods.len() > KEPT_FLOODS {
            self.floods.pop_front();
        }
        self.slots
            .retain(|p, _| live.binary_search(p).is_ok() && !self.failed.contains(p));
        for &p in live.iter().filter(|_| !self.plain) {
            if p != self.me && !self.failed.contains(&p) && !self.left.contains(&p) {
                self.slots.entry(p).or_default();
            }
        }
        self.live = live;
        let early = std::mem::take(&mut self.early);
        for (from, msg) in early {
            self.on_control(from, msg);
        }
        self.pump();
    }

    /// Floods a notice on the current generation.
    fn originate(&mut self, notice: Notice) {
        if self.plain {
            return;
        }
        let generation = self.generation;
        if let Some((_, f)) = self.floods.iter_mut().find(|(g, _)| *g == generation) {
            f.originate(&notice.encode());
        }
        self.pump();
    }

    /// Revokes the current generation everywhere (F4).
    pub fn revoke(&mut self, generation: u32) {
        if self.revoked.insert(generation) && generation == self.generation {
            self.originate(Notice::Revoked);
            self.flush_sends();
        }
    }

    /// Records that `rank` failed; `by` is the rank that told us (None: seen here). A failure
    /// seen here is flooded to the members.
    pub fn note_failure(&mut self, rank: usize, by: Option<usize>) {
        if rank == self.me || !self.failed.insert(rank) {
            return;
        }
        self.told_by.insert(rank, by);
        tracing::debug!(
            "rank {}: rank {rank} failed ({})",
            self.me,
            by.map_or("detected here".to_string(), |b| format!(
                "notice from rank {b}"
            ))
        );
        self.slots.remove(&rank);
        self.out.retain(|o| o.peer != rank);
        for (_, f) in self.floods.iter_mut() {
            f.on_failure(rank as u32);
        }
        for a in self.agreements.iter_mut() {
            a.on_failure(rank as u32);
        }
        if by.is_none() {
            self.originate(Notice::Failed(rank as u32));
        }
        self.pump();
    }

    /// ABORT mode, before this rank exits: tells every member it watches which rank's failure
    /// ends the job (`failed`, or this rank itself when unknown), so that they name it too.
    pub fn tell_abort(&mut self, failed: Option<usize>) {
        let rank = failed.unwrap_or(self.me) as u32;
        let generation = self.generation;
        let peers: Vec<usize> = self.slots.keys().copied().collect();
        for p in peers {
            self.out.push(Outgoing {
                peer: p,
                data: wire::envelope(wire::ABORT, generation, &rank.to_le_bytes()),
                state: OpState::New,
            });
        }
        self.flush_sends();
        // The transport delivers what it took (tcp's outbox) in its orderly end.
        self.finished = true;
        let _ = self.t.finish();
    }

    /// How this rank learnt about `rank`'s failure, for error messages.
    pub fn how_known(&self, rank: usize) -> String {
        if self.aborted.contains(&rank) {
            return format!("rank {rank} ended the job (ABORT mode)");
        }
        match self.told_by.get(&rank) {
            Some(Some(by)) => format!("rank {rank} failed (notice from rank {by})"),
            Some(None) => format!("rank {rank} failed (detected by this rank)"),
            None => format!("rank {rank} failed"),
        }
    }

    /// Collects what the protocols want to send.
    fn pump(&mut self) {
        let mut new = Vec::new();
        for (g, f) in self.floods.iter_mut() {
            while let Some((to, bytes)) = f.poll_transmit() {
                new.push((to as usize, wire::envelope(wire::FLOOD, *g, &bytes)));
            }
        }
        for a in self.agreements.iter_mut() {
            let g = (a.instance() >> 32) as u32;
            while let Some((to, bytes)) = a.poll_transmit() {
                tracing::trace!(
                    "rank {}: agreement {:#x} -> rank {to}: {:?}",
                    self.me,
                    a.instance(),
                    &bytes[..bytes.len().min(24)]
                );
                new.push((to as usize, wire::envelope(wire::AGREE, g, &bytes)));
            }
        }
        for (to, data) in new {
            if to == self.me
                || self.failed.contains(&to)
                || self.left.contains(&to)
                || to >= self.t.size()
            {
                continue;
            }
            self.out.push(Outgoing {
                peer: to,
                data,
                state: OpState::New,
            });
        }
    }

    /// Feeds one control message from `from` to its protocol.
    fn on_control(&mut self, from: usize, msg: Vec<u8>) {
        self.control_received += 1;
        let Some((kind, generation, body)) = wire::open(&msg) else {
            tracing::warn!(
                "rank {}: malformed control message from rank {from}",
                self.me
            );
            return;
        };
        if kind == wire::ABORT {
            let rank = body
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .map(|b| u32::from_le_bytes(b) as usize);
            // The sender ends because of `rank`; its own end follows this message.
            if let Some(r) = rank.filter(|&r| r < self.t.size()) {
                self.note_failure(r, Some(from));
            }
            self.aborted.insert(from);
            self.note_failure(from, Some(from));
            return;
        }
        if kind == wire::LEAVE {
            self.slots.remove(&from);
            self.out.retain(|o| o.peer != from);
            self.left.insert(from);
            return;
        }
        if generation > self.generation {
            if self.early.len() < MAX_EARLY {
                self.early.push((from, msg));
            }
            return;
        }
        match kind {
            wire::FLOOD => {
                let Some((_, f)) = self.floods.iter_mut().find(|(g, _)| *g == generation) else {
                    return; // a generation long gone
                };
                let delivered = match f.on_message(from as u32, body) {
                    Ok(d) => d,
                    Err(e) => {
                        tracing::warn!("rank {}: flood message from rank {from}: {e}", self.me);
                        return;
                    }
                };
                if let Some((origin, payload)) = delivered {
                    match Notice::decode(&payload) {
                        Some(Notice::Failed(r)) => {
                            self.note_failure(r as usize, Some(origin as usize))
                        }
                        Some(Notice::Revoked) => {
                            self.revoked.insert(generation);
                        }
                        None => {
                            tracing::warn!("rank {}: malformed notice from rank {origin}", self.me)
                        }
                    }
                }
            }
            _ => {
                let Ok(instance) = peek_instance(body) else {
                    tracing::warn!(
                        "rank {}: malformed agreement message from rank {from}",
                        self.me
                    );
                    return;
                };
                tracing::trace!(
                    "rank {}: agreement {instance:#x} <- rank {from}: {:?}",
                    self.me,
                    &body[..body.len().min(24)]
                );
                if let Some(a) = self
                    .agreements
                    .iter_mut()
                    .find(|a| a.instance() == instance)
                {
                    if let Err(e) = a.on_message(from as u32, body) {
                        tracing::warn!("rank {}: agreement message from rank {from}: {e}", self.me);
                    }
                } else if instance >= self.next_instance() && self.early.len() < MAX_EARLY {
                    self.early.push((from, msg));
                }
            }
        }
        self.pump();
    }

    fn next_instance(&self) -> u64 {
        ((self.generation as u64) << 32) | self.agree_seq
    }

    /// Fault-tolerant agreement among the live members of the current generation on the AND
    /// of `value` and on the set of failed ranks (F4). Every survivor returns the same.
    pub fn agree(&mut self, value: u64) -> Result<Decision> {
        let instance = self.next_instance();
        self.agree_seq += 1;
        let members: Vec<u32> = self.live.iter().map(|&r| r as u32).collect();
        let known: BTreeSet<u32> = self
            .failed
            .iter()
            .filter(|r| self.live.binary_search(r).is_ok())
            .map(|&r| r as u32)
            .collect();
        tracing::debug!(
            "rank {}: agreement {}:{} starts (value {value:#x}, known failed {known:?})",
            self.me,
            instance >> 32,
            instance & 0xffff_ffff
        );
        let a = Agreement::new(self.me as u32, &members, instance, value, &known);
        self.agreements.push_back(a);
        while self.agreements.len() > KEPT_AGREEMENTS {
            self.agreements.pop_front();
        }
        // Messages that came before this rank got here.
        let early = std::mem::take(&mut self.early);
        for (from, msg) in early {
            self.on_control(from, msg);
        }
        self.pump();
        let interest = Interest {
            generation: self.generation,
            ranks: Vec::new(),
            op: "agree",
            revocable: false,
            timeout: false,
        };
        let mut ex = Exchange::new();
        self.drive(&mut ex, &interest, &|e: &Engine| {
            e.agreements
                .iter()
                .any(|a| a.instance() == instance && a.decision().is_some())
        })?;
        let d = self
            .agreements
            .iter()
            .find(|a| a.instance() == instance)
            .and_then(|a| a.decision())
            .cloned()
            .ok_or_else(|| Error::new(ErrorKind::Protocol, "agree").on_rank(self.me))?;
        tracing::debug!(
            "rank {}: agreement {}:{} decided {:#x}, failed {:?}",
            self.me,
            instance >> 32,
            instance & 0xffff_ffff,
            d.value,
            d.failed
        );
        for &r in &d.failed {
            if !self.failed.contains(&(r as usize)) {
                // Agreed failures are facts for this rank too (someone saw them).
                self.failed.insert(r as usize);
                self.told_by.insert(r as usize, None);
                self.slots.remove(&(r as usize));
                self.out.retain(|o| o.peer != r as usize);
                for (_, f) in self.floods.iter_mut() {
                    f.on_failure(r);
                }
                for a in self.agreements.iter_mut() {
                    a.on_failure(r);
                }
            }
        }
        self.pump();
        Ok(d)
    }

    /// The error an operation with `interest` gets now, if any: its generation was revoked,
    /// or a rank it involves failed.
    pub fn interruption(&self, interest: &Interest) -> Option<Error> {
        if interest.revocable && self.revoked.contains(&interest.generation) {
            return Some(
                Error::new(ErrorKind::Revoked, interest.op)
                    .on_rank(self.me)
                    .with_detail(format!(
                        "communicator generation {} was revoked",
                        interest.generation
                    )),
            );
        }
        // Root causes first: a rank that ended the job because of another failure comes last.
        let mut dead: Vec<usize> = interest
            .ranks
            .iter()
            .copied()
            .filter(|r| self.failed.contains(r))
            .collect();
        dead.sort_by_key(|r| (self.aborted.contains(r), *r));
        let first = *dead.first()?;
        let detail = dead
            .iter()
            .map(|&r| self.how_known(r))
            .collect::<Vec<_>>()
            .join(", ");
        Some(
            Error::new(ErrorKind::PeerFailed, interest.op)
                .on_rank(self.me)
                .with_peer(first)
                .with_detail(detail),
        )
    }

    /// Runs `user` to completion together with the control traffic, or until `interest` says
    /// it is interrupted. With `until`, runs until that holds instead (agreements: `user` is
    /// empty). An interrupted or failed `user` is abandoned in the transport.
    pub fn drive(
        &mut self,
        user: &mut Exchange<'_>,
        interest: &Interest,
        until: &dyn Fn(&Engine) -> bool,
    ) -> Result<()> {
        let policy = self.t.wait_policy();
        let start = Instant::now();
        let mut last_event = start;
        let mut repeats = 0;
        loop {
            if let Some(e) = self.interruption(interest) {
                tracing::debug!("rank {}: {} interrupted: {e}", self.me, interest.op);
                self.t.abandon_exchange(user, &e);
                return Err(e);
            }
            if user.is_complete() && until(self) {
                self.flush_sends();
                return Ok(());
            }
            if interest.timeout {
                if let Some(limit) = policy.timeout.filter(|&l| start.elapsed() >= l) {
                    let e = ferry_core::transport::operation_timeout_error(self.me, user, limit);
                    self.t.abandon_exchange(user, &e);
                    return Err(e);
                }
            }
            match self.round(user, &policy, &mut last_event) {
                Event::Progress => repeats = 0,
                Event::Error(e) => {
                    repeats += 1;
                    let e = if repeats > MAX_REPEATS {
                        Err(e)
                    } else {
                        self.absorb(user, e, interest)
                    };
                    if let Err(e) = e {
                        self.t.abandon_exchange(user, &e);
                        return Err(e);
                    }
                }
            }
        }
    }

    /// A transport error during a combined exchange: the failure of a peer this rank watches
    /// or talks to is noted (and interrupts the operation only if the interest says so);
    /// anything else ends the operation.
    fn absorb(&mut self, user: &Exchange<'_>, e: Error, interest: &Interest) -> Result<()> {
        let Some(p) = e.peer().filter(|&p| p != self.me && p < self.t.size()) else {
            return Err(e);
        };
        if e.kind() == ErrorKind::Revoked {
            // A live sender took back a message because its operation was abandoned (a
            // revoke, or a failure it saw): tcp's withdrawn announcement, shm's aborted
            // message. It ends a receive of ours from that sender; with none pending it
            // answers a receive this rank abandoned already (the agreement of a recovery
            // often meets it), and stopping there would take the rank out of the recovery.
            let receiving = user
                .recvs
                .iter()
                .any(|r| r.peer == p && r.state != OpState::Done);
            return if receiving { Err(e) } else { Ok(()) };
        }
        if !e.is_peer_failure() || e.kind() == ErrorKind::Timeout {
            return Err(e);
        }
        if self.left.contains(&p) {
            // It ended in an orderly way: not a failure, but this operation needed it.
            return Err(e);
        }
        if self.failed.contains(&p) {
            // Known already (a notice overtook the transport's own report, which some
            // backends deliver once more, e.g. tcp's pending connection error): whether it
            // interrupts the operation is the interest's call.
            return Ok(());
        }
        let user_peer = user.pending_peers().contains(&p);
        let watched = self.slots.contains_key(&p) || self.out.iter().any(|o| o.peer == p);
        if !user_peer && !watched {
            // A failure the engine cannot attribute to any operation it holds: continuing
            // would meet the same error again.
            return Err(e);
        }
        self.note_failure(p, None);
        if user_peer && !interest.ranks.contains(&p) {
            // A program operation with a rank outside the communicator's members cannot
            // exist; stay safe and fail it with the transport's own error.
            return Err(e);
        }
        Ok(())
    }

    /// Gives the control messages still queued a few chances to leave before the program
    /// goes off computing (peers may be waiting for an answer of a decided agreement).
    fn flush_sends(&mut self) {
        for _ in 0..FLUSH_ROUNDS {
            if self.out.iter().all(|o| o.state == OpState::Done) {
                break;
            }
            let mut empty = Exchange::new();
            let mut mark = Instant::now();
            let policy = ferry_core::WaitPolicy {
                spin: Duration::ZERO,
                ..self.t.wait_policy()
            };
            if let Event::Error(e) = self.round(&mut empty, &policy, &mut mark) {
                if e.kind() == ErrorKind::Revoked {
                    // A message withdrawn for a receive abandoned before (see `absorb`).
                    continue;
                }
                if let Some(p) = e.peer().filter(|&p| p != self.me && p < self.t.size()) {
                    if !self.left.contains(&p) && e.is_peer_failure() {
                        self.note_failure(p, None);
                    }
                    // Whatever it was, nothing more goes to that rank from here.
                    self.slots.remove(&p);
                    self.out.retain(|o| o.peer != p);
                } else {
                    break;
                }
            }
        }
    }

    /// One round: builds the combined exchange, progresses it until something happens, then
    /// hands completed control messages to the protocols and keeps the states.
    fn round(
        &mut self,
        user: &mut Exchange<'_>,
        policy: &ferry_core::WaitPolicy,
        last_event: &mut Instant,
    ) -> Event {
        let n_sends = user.sends.len();
        let n_recvs = user.recvs.len();
        let key = self.ctl_key;
        let Engine { t, slots, out, .. } = self;
        let peers: Vec<usize> = slots.keys().copied().collect();
        let (result, send_states, recv_states) = {
            let mut comb = Exchange::new();
            for s in user.sends.iter() {
                comb.sends.push(SendOp {
                    peer: s.peer,
                    key: s.key,
                    data: s.data,
                    state: s.state,
                });
            }
            for o in out.iter() {
                comb.sends.push(SendOp {
                    peer: o.peer,
                    key,
                    data: &o.data,
                    state: o.state,
                });
            }
            for r in user.recvs.iter_mut() {
                let buf = match &mut r.buf {
                    RecvBuf::Vec(v) => RecvBuf::Vec(v),
                    RecvBuf::Slice(s) => RecvBuf::Slice(s),
                };
                comb.recvs.push(RecvOp {
                    peer: r.peer,
                    key: r.key,
                    buf,
                    state: r.state,
                });
            }
            for (p, slot) in slots.iter_mut() {
                comb.recvs.push(RecvOp {
                    peer: *p,
                    key,
                    buf: RecvBuf::Vec(&mut slot.buf),
                    state: slot.state,
                });
            }
            let result =
                progress_until_event(&mut **t, &mut comb, n_sends, n_recvs, policy, last_event);
            let send_states: Vec<OpState> = comb.sends.iter().map(|s| s.state).collect();
            let recv_states: Vec<OpState> = comb.recvs.iter().map(|r| r.state).collect();
            (result, send_states, recv_states)
        };
        for (s, st) in user.sends.iter_mut().zip(&send_states) {
            s.state = *st;
        }
        for (r, st) in user.recvs.iter_mut().zip(&recv_states) {
            r.state = *st;
        }
        for (o, st) in out.iter_mut().zip(&send_states[n_sends..]) {
            o.state = *st;
        }
        out.retain(|o| o.state != OpState::Done);
        let mut arrived = Vec::new();
        for (p, st) in peers.iter().zip(&recv_states[n_recvs..]) {
            if let Some(slot) = slots.get_mut(p) {
                slot.state = *st;
                if *st == OpState::Done {
                    arrived.push((*p, std::mem::take(&mut slot.buf)));
                    slot.state = OpState::New;
                }
            }
        }
        for (from, msg) in arrived {
            self.on_control(from, msg);
        }
        result
    }

    /// Orderly end of the transport (once).
    pub fn finish(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        // Tell the members this rank watches that its end is no failure; the message is the
        // last of each control flow, so nothing of ours is lost behind it.
        let generation = self.generation;
        let peers: Vec<usize> = self.slots.keys().copied().collect();
        for p in peers {
            self.out.push(Outgoing {
                peer: p,
                data: wire::envelope(wire::LEAVE, generation, &[]),
                state: OpState::New,
            });
        }
        self.flush_sends();
        match self.t.finish() {
            // A peer that ended before taking messages of ours did not need them: a dead rank
            // by definition, a finished one because it completed every operation (what is
            // left is control traffic it had no use for, e.g. answers to an agreement it had
            // decided; its LEAVE may still sit unread in the transport). Survivors that still
            // wait got theirs above.
            Err(e) if e.is_peer_failure() && e.peer().is_some_and(|p| p != self.me) => {
                tracing::warn!("rank {}: finish (not an error here): {e}", self.me);
                Ok(())
            }
            other => other,
        }
    }
}

/// Progresses `comb` until the program's part (the first `n_sends`/`n_recvs` operations)
/// completes, a control operation completes, or the transport fails; sleeps in the
/// transport when nothing moves after the polling budget.
fn progress_until_event(
    t: &mut dyn Transport,
    comb: &mut Exchange<'_>,
    n_sends: usize,
    n_recvs: usize,
    policy: &ferry_core::WaitPolicy,
    last_event: &mut Instant,
) -> Event {
    let ctl_pending = |c: &Exchange<'_>| {
        (
            c.sends[n_sends..]
                .iter()
                .filter(|s| s.state != OpState::Done)
                .count(),
            c.recvs[n_recvs..]
                .iter()
                .filter(|r| r.state != OpState::Done)
                .count(),
        )
    };
    let user_done = |c: &Exchange<'_>| {
        c.sends[..n_sends].iter().all(|s| s.state == OpState::Done)
            && c.recvs[..n_recvs].iter().all(|r| r.state == OpState::Done)
    };
    let before = ctl_pending(comb);
    let was_done = user_done(comb);
    let mut polls: u32 = 0;
    loop {
        if let Err(e) = t.progress_exchange(comb) {
            return Event::Error(e);
        }
        if ctl_pending(comb) != before || (user_done(comb) && !was_done) {
            *last_event = Instant::now();
            return Event::Progress;
        }
        polls = polls.wrapping_add(1);
        if last_event.elapsed() < policy.spin {
            std::hint::spin_loop();
            if policy.yield_each_poll || polls.is_multiple_of(64) {
                std::thread::yield_now();
            }
        } else if let Err(e) = t.wait_for_input(Duration::from_millis(10)) {
            return Event::Error(e);
        } else if polls > 1 {
            // Blocked waits return to the caller now and then so that timeouts are seen.
            return Event::Progress;
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            tracing::warn!("shutdown: {e}");
        }
    }
}
