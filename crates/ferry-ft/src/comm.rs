//! The communicator: members, generation, modes, and the operations on it.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::io::Write;
use std::rc::Rc;
use std::time::Duration;

use ferry_coll::{Group, ReduceOp};
use ferry_core::{
    Element, Error, ErrorKind, Exchange, MsgKey, MsgKind, Result, Stats, Transport, WaitPolicy,
};

use crate::engine::{CommId, Engine, Interest, FT_GENERATION_BASE, MAX_GENERATIONS};
use crate::{FailureMode, MessageMode, Options};

/// Exit status of a rank that ends the job because of a failure in ABORT mode.
pub const ABORT_EXIT_CODE: i32 = 70;

/// A fault-tolerant communicator (see the crate doc): a group of world ranks, a generation
/// and the modes that say what happens when a member fails.
///
/// Every member calls the same collectives, agreements and recoveries in the same order.
/// A communicator replaced by [`Communicator::shrink`] or [`Communicator::recover`] refuses
/// further operations; use the new one. A process can hold several communicators (made with
/// [`Communicator::dup`] and [`Communicator::split`]), each with its own modes, generation,
/// revoke and agreements; they share the process's transport and its knowledge of failed
/// ranks.
pub struct Communicator {
    pub(crate) eng: Rc<RefCell<Engine>>,
    /// Id of this communicator in the process's table (the same at every member).
    pub(crate) id: CommId,
    /// Generation the communicator was made with (ids are reused with later generations).
    pub(crate) base: u32,
    pub(crate) opts: Options,
    pub(crate) generation: u32,
    /// World rank of each communicator rank (BLANK: gaps included).
    pub(crate) members: Vec<usize>,
    /// BLANK: world ranks that are gaps of this communicator.
    pub(crate) gaps: BTreeSet<usize>,
    /// The live members, for the collectives (message generation of this communicator).
    pub(crate) group: Group,
    pub(crate) my_index: usize,
    /// REBUILD: the launcher's respawn service and what the last rebuild did (see `rebuild`).
    pub(crate) rebuild: crate::rebuild::RebuildState,
}

/// Message generation of generation `g` of the world communicator (control traffic uses
/// [`FT_GENERATION_BASE`] itself).
pub(crate) fn message_generation(g: u32) -> u32 {
    crate::engine::message_generation(0, g)
}

impl Communicator {
    /// A communicator over every rank of the job, generation 0, taking over `transport`.
    ///
    /// Fails with [`ErrorKind::Unsupported`] for REBUILD (it needs a launcher that restarts
    /// failed ranks: [`Communicator::with_respawn`]) and, on the mpi backend, for every mode but ABORT (Open
    /// MPI 4 as packaged has no ULFM: a failed rank takes the MPI job down).
    pub fn new(mut transport: Box<dyn Transport>, opts: Options) -> Result<Communicator> {
        let me = transport.rank();
        let size = transport.size();
        if opts.failure == FailureMode::Rebuild {
            return Err(crate::rebuild::refusal(me));
        }
        let plain = transport.name() == "mpi";
        if plain && opts.failure != FailureMode::Abort {
            return Err(Error::new(ErrorKind::Unsupported, "communicator")
                .on_rank(me)
                .with_detail(format!(
                    "failure mode {:?} needs ULFM, which the MPI library of the mpi backend \
                     does not provide (Open MPI 4): only ABORT is available there; use the \
                     tcp, shm or hybrid backend for fault-tolerant communicators",
                    opts.failure
                )));
        }
        if opts.failure != FailureMode::Abort {
            transport.tolerate_failures();
        }
        let members: Vec<usize> = (0..size).collect();
        let group = Group::new(members.clone(), message_generation(0))?;
        let eng = Engine::new(transport, FT_GENERATION_BASE, members.clone(), plain);
        // From here on this rank's death is a failure the members survive (chaos tests wait
        // for this line before they kill: a death during start-up is not).
        tracing::info!(rank = me, members = size, "ft: communicator ready");
        Ok(Communicator {
            eng: Rc::new(RefCell::new(eng)),
            id: 0,
            base: 0,
            opts,
            generation: 0,
            members,
            gaps: BTreeSet::new(),
            group,
            my_index: me,
            rebuild: Default::default(),
        })
    }

    /// This rank's rank in the communicator (changes with SHRINK).
    pub fn rank(&self) -> usize {
        self.my_index
    }

    /// Number of ranks of the communicator (BLANK: gaps included).
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Number of members not known to be a gap or failed.
    pub fn live_size(&self) -> usize {
        let eng = self.eng.borrow();
        self.members
            .iter()
            .filter(|r| !self.gaps.contains(r) && !eng.failed.contains(r))
            .count()
    }

    /// This process's world rank.
    pub fn world_rank(&self) -> usize {
        self.members[self.my_index]
    }

    /// World rank of each communicator rank.
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// World ranks of the members that are gaps (BLANK) or known to have failed.
    pub fn failed_members(&self) -> Vec<usize> {
        let eng = self.eng.borrow();
        self.members
            .iter()
            .copied()
            .filter(|r| self.gaps.contains(r) || eng.failed.contains(r))
            .collect()
    }

    /// Generation: 0 when the communicator was made, one more after each recovery.
    pub fn generation(&self) -> u32 {
        self.generation - self.base
    }

    /// Id of this communicator, the same at every member: control messages (revoke,
    /// agreement, failure notices) carry it, so they reach this communicator only. The world
    /// communicator is 0; ids of freed communicators are reused.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The modes.
    pub fn options(&self) -> Options {
        self.opts
    }

    /// Switches the all-or-nothing rule for the following collectives; every member must
    /// switch it at the same point (between the same two collectives).
    pub fn set_all_or_nothing(&mut self, on: bool) {
        self.opts.all_or_nothing = on;
    }

    /// Whether this communicator was revoked (by any member).
    pub fn is_revoked(&self) -> bool {
        self.eng.borrow().is_revoked(self.id, self.generation)
    }

    /// The backend's name.
    pub fn backend(&self) -> &'static str {
        self.eng.borrow().t.name()
    }

    /// The transport underneath, bypassing every fault-tolerance rule (measurements and
    /// diagnostics, e.g. timing a plain collective against this communicator's in one run).
    /// Messages sent through it must not use this family's generations
    /// ([`crate::FT_GENERATION_BASE`] and up).
    pub fn raw_transport(&self) -> std::cell::RefMut<'_, Box<dyn Transport>> {
        std::cell::RefMut::map(self.eng.borrow_mut(), |e| &mut e.t)
    }

    /// Communication statistics of the transport.
    pub fn stats(&self) -> Stats {
        self.eng.borrow().t.stats()
    }

    /// Failure of the current operation: ABORT ends the process (the job, with the other
    /// ranks doing the same), the other modes return the error.
    pub(crate) fn fail(&self, eng: &mut Engine, e: Error) -> Error {
        if self.opts.failure == FailureMode::Abort
            && (e.is_peer_failure() || e.kind() == ErrorKind::Revoked)
        {
            eng.tell_abort(e.peer());
            abort_job(&e);
        }
        e
    }

    pub(crate) fn check_current(&self, op: &'static str, eng: &Engine) -> Result<()> {
        let current = eng.comm(self.id).map(|c| c.generation);
        if current != Some(self.generation) {
            let detail = match current {
                Some(g) => format!(
                    "communicator generation {} was replaced by generation {}",
                    self.generation - self.base,
                    g - self.base
                ),
                None if eng.is_finished() => "the transport was ended".to_string(),
                None => format!("communicator {} was freed", self.id),
            };
            return Err(Error::new(ErrorKind::Revoked, op)
                .on_rank(eng.me)
                .with_detail(detail));
        }
        Ok(())
    }

    /// Live members other than this rank.
    fn others(&self) -> Vec<usize> {
        self.group
            .members()
            .iter()
            .copied()
            .filter(|&r| r != self.world_rank())
            .collect()
    }

    fn interest(&self, op: &'static str, peers: &[usize]) -> Interest {
        let ranks = match self.opts.message {
            MessageMode::Cont if self.opts.failure != FailureMode::Abort => peers.to_vec(),
            _ => self.others(),
        };
        Interest {
            comm: self.id,
            generation: self.generation,
            ranks,
            op,
            revocable: true,
            timeout: true,
        }
    }

    /// What a collective involves: every other live member.
    pub(crate) fn collective_interest(&self, op: &'static str) -> Interest {
        let mut interest = self.interest(op, &[]);
        interest.ranks = self.others();
        interest
    }

    /// World rank of communicator rank `r` for an operation `op`: out of range and BLANK gaps
    /// are refused at once.
    fn peer(&self, r: usize, op: &'static str) -> Result<usize> {
        let me = self.world_rank();
        let Some(&w) = self.members.get(r) else {
            return Err(Error::invalid(
                op,
                format!("rank {r} out of range 0..{}", self.members.len()),
            )
            .on_rank(me));
        };
        if self.gaps.contains(&w) {
            return Err(Error::invalid(
                op,
                format!("invalid rank: rank {r} is a gap (world rank {w} failed)"),
            )
            .on_rank(me)
            .with_peer(w));
        }
        Ok(w)
    }

    fn key(&self, tag: u32) -> MsgKey {
        MsgKey::new(
            crate::engine::message_generation(self.id, self.generation),
            MsgKind::USER,
            tag,
        )
    }

    /// Runs `ex` with `peers` (world ranks) under the failure rules of this communicator.
    fn run(&self, op: &'static str, peers: &[usize], ex: &mut Exchange<'_>) -> Result<()> {
        let mut eng = self.eng.borrow_mut();
        self.check_current(op, &eng)?;
        let interest = self.interest(op, peers);
        if let Some(e) = eng.interruption(&interest) {
            return Err(self.fail(&mut eng, e));
        }
        let res = eng.drive(ex, &interest, &|_| true);
        res.map_err(|e| self.fail(&mut eng, e.or_rank(self.world_rank())))
    }

    /// Sends `data` to communicator rank `to` with `tag` (blocks until the payload may be
    /// reused). In CONT mode it fails only if `to` failed; in NOP mode if any member did.
    pub fn send(&self, to: usize, tag: u32, data: &[u8]) -> Result<()> {
        let w = self.peer(to, "send")?;
        let mut ex = Exchange::new();
        ex.send(w, self.key(tag), data);
        self.run("send", &[w], &mut ex)
    }

    /// Receives the next message with `tag` from communicator rank `from` into `buf`. A
    /// receive blocked on a rank that dies returns at once with an error naming it.
    pub fn recv(&self, from: usize, tag: u32, buf: &mut Vec<u8>) -> Result<()> {
        let w = self.peer(from, "recv")?;
        let mut ex = Exchange::new();
        ex.recv(w, self.key(tag), buf);
        self.run("recv", &[w], &mut ex)
    }

    /// Sends and receives several messages at once (`(communicator rank, tag, bytes)`), all
    /// progressed together, so that no order of blocking sends can deadlock; for the data
    /// movement of recovery and halo exchanges. Fails as [`Communicator::send`] and
    /// [`Communicator::recv`] do, naming the failed rank.
    pub fn sendrecv(
        &self,
        sends: &[(usize, u32, &[u8])],
        recvs: &mut [(usize, u32, &mut Vec<u8>)],
    ) -> Result<()> {
        let mut ex = Exchange::new();
        let mut peers = Vec::with_capacity(sends.len() + recvs.len());
        for &(to, tag, data) in sends {
            let w = self.peer(to, "sendrecv")?;
            peers.push(w);
            ex.send(w, self.key(tag), data);
        }
        for (from, tag, buf) in recvs.iter_mut() {
            let w = self.peer(*from, "sendrecv")?;
            peers.push(w);
            ex.recv(w, self.key(*tag), buf);
        }
        peers.sort_unstable();
        peers.dedup();
        self.run("sendrecv", &peers, &mut ex)
    }

    /// Runs a collective over the live members; with the all-or-nothing option, follows it
    /// by an agreement on "every member succeeded" (F5).
    fn collective<R>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut dyn Transport, &Group) -> Result<R>,
    ) -> Result<R> {
        let mut eng = self.eng.borrow_mut();
        self.check_current(op, &eng)?;
        let interest = self.collective_interest(op);
        let early = eng.interruption(&interest);
        let res = match early {
            Some(e) => Err(e),
            None => {
                let mut link = Link {
                    eng: &mut eng,
                    interest,
                };
                f(&mut link, &self.group).map_err(|e| e.or_rank(self.world_rank()))
            }
        };
        if !self.opts.all_or_nothing || self.opts.failure == FailureMode::Abort {
            return res.map_err(|e| self.fail(&mut eng, e));
        }
        let d = eng.agree(self.id, u64::from(res.is_ok()))?;
        match res {
            Ok(r) if d.value & 1 == 1 => Ok(r),
            Ok(_) => {
                let failed: Vec<u32> = d.failed.iter().copied().collect();
                let mut e = Error::new(ErrorKind::PeerFailed, op)
                    .on_rank(self.world_rank())
                    .with_detail(format!(
                        "all-or-nothing: the collective failed on another member \
                         (failed ranks {failed:?}); its result here is discarded"
                    ));
                if let Some(&f) = failed.first() {
                    e = e.with_peer(f as usize);
                } else {
                    e = Error::new(ErrorKind::Revoked, op)
                        .on_rank(self.world_rank())
                        .with_detail("all-or-nothing: the collective failed on another member");
                }
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// The live members as a group (world ranks in communicator order, this generation's
    /// message generation): partitionings of the data layer over this communicator use it,
    /// so that data of an old generation never matches on a new one.
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// Runs `f` with a transport through which every exchange follows this communicator's
    /// failure rules, as a collective over the live members (a member's failure or a revoke
    /// interrupts it; with the all-or-nothing option every member succeeds or every one
    /// fails). For the data layer's switches, see [`crate::data`].
    pub fn with_transport<R>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut dyn Transport) -> Result<R>,
    ) -> Result<R> {
        self.collective(op, |t, _| f(t))
    }

    /// Blocks until every live member entered the barrier.
    pub fn barrier(&self) -> Result<()> {
        self.collective("barrier", |t, g| ferry_coll::barrier(t, g))
    }

    /// Copies communicator rank `root`'s `buf` to every live member.
    pub fn broadcast(&self, root: usize, buf: &mut Vec<u8>) -> Result<()> {
        let w = self.peer(root, "broadcast")?;
        let gi = self
            .group
            .index_of(w)
            .ok_or_else(|| Error::invalid("broadcast", format!("rank {root} is not live")))?;
        self.collective("broadcast", |t, g| ferry_coll::broadcast(t, g, gi, buf))
    }

    /// Combines every live member's `data` element-wise with `op`, the result in every
    /// member's `data`. With the all-or-nothing option, `data` holds the result only if every
    /// surviving member succeeded; otherwise every one fails.
    pub fn allreduce<T: Element>(&self, data: &mut [T], op: &ReduceOp<T>) -> Result<()> {
        self.collective("allreduce", |t, g| ferry_coll::allreduce(t, g, data, op))
    }

    /// Makes every pending and future operation on this communicator fail at every member
    /// with [`ErrorKind::Revoked`] (agreement and recovery still work). Returns once the
    /// notice has left this rank.
    pub fn revoke(&self) -> Result<()> {
        let mut eng = self.eng.borrow_mut();
        self.check_current("revoke", &eng)?;
        eng.revoke(self.id, self.generation);
        Ok(())
    }

    /// Fault-tolerant agreement among the live members on the AND of `value` and on the set
    /// of failed world ranks: every survivor returns the same, even if members die during it.
    pub fn agree(&self, value: u64) -> Result<(u64, Vec<usize>)> {
        let mut eng = self.eng.borrow_mut();
        self.check_current("agree", &eng)?;
        let d = eng.agree(self.id, value)?;
        Ok((d.value, d.failed.iter().map(|&r| r as usize).collect()))
    }

    /// The communicator over the survivors (ULFM's shrink): every survivor gets the same
    /// members in the same relative order and generation `generation() + 1`, whatever its
    /// own idea of who failed; messages of this generation never match on the new one.
    pub fn shrink(&self) -> Result<Communicator> {
        self.rebuild_as(false)
    }

    /// Recovery in the communicator's failure mode: SHRINK compacts (as
    /// [`Communicator::shrink`]), BLANK keeps the size with the failed ranks as gaps, REBUILD
    /// replaces the failed ranks by new processes (see [`crate::rebuild`]).
    pub fn recover(&self) -> Result<Communicator> {
        match self.opts.failure {
            FailureMode::Blank => self.rebuild_as(true),
            FailureMode::Shrink => self.rebuild_as(false),
            FailureMode::Rebuild if self.id == 0 => self.rebuild_with_replacements(),
            FailureMode::Rebuild => Err(Error::new(ErrorKind::Unsupported, "recover")
                .on_rank(self.world_rank())
                .with_detail("only the world communicator can be rebuilt")),
            m => Err(Error::new(ErrorKind::Unsupported, "recover")
                .on_rank(self.world_rank())
                .with_detail(format!("failure mode {m:?} has no recovery"))),
        }
    }

    pub(crate) fn rebuild_as(&self, keep_gaps: bool) -> Result<Communicator> {
        let me = self.world_rank();
        let mut eng = self.eng.borrow_mut();
        self.check_current("shrink", &eng)?;
        if self.generation >= MAX_GENERATIONS {
            return Err(Error::new(ErrorKind::ResourceExhausted, "shrink")
                .on_rank(me)
                .with_detail("too many generations"));
        }
        let d = eng.agree(self.id, u64::MAX)?;
        if d.failed.contains(&(me as u32)) {
            return Err(Error::new(ErrorKind::PeerFailed, "shrink")
                .on_rank(me)
                .with_peer(me)
                .with_detail("the survivors declared this rank failed"));
        }
        let dead = |r: &usize| d.failed.contains(&(*r as u32));
        let live: Vec<usize> = self
            .group
            .members()
            .iter()
            .copied()
            .filter(|r| !dead(r))
            .collect();
        let generation = self.generation + 1;
        let (members, gaps) = if keep_gaps {
            let mut gaps = self.gaps.clone();
            gaps.extend(self.members.iter().copied().filter(dead));
            (self.members.clone(), gaps)
        } else {
            (live.clone(), BTreeSet::new())
        };
        let mut sorted = live.clone();
        sorted.sort_unstable();
        eng.enter_generation(self.id, generation, sorted);
        let group = Group::new(live, crate::engine::message_generation(self.id, generation))?;
        let my_index = members
            .iter()
            .position(|&r| r == me)
            .ok_or_else(|| Error::invalid("shrink", "this rank is not a member"))?;
        eng.retain(self.id);
        Ok(Communicator {
            eng: self.eng.clone(),
            id: self.id,
            base: self.base,
            opts: self.opts,
            generation,
            members,
            gaps,
            group,
            my_index,
            rebuild: self.rebuild.carried(),
        })
    }

    /// Orderly end of the process's communication: the transport delivers what it still
    /// owes and shuts down, for every communicator of the process (also done when the last
    /// communicator of the process is dropped). To end one communicator, use
    /// [`Communicator::free`].
    pub fn finish(self) -> Result<()> {
        self.eng.borrow_mut().finish()
    }
}

impl Drop for Communicator {
    /// Gives up this handle; with the last handle of the communicator (all its generations)
    /// its id is free (see [`Communicator::free`]).
    fn drop(&mut self) {
        if let Ok(mut eng) = self.eng.try_borrow_mut() {
            eng.release(self.id);
        }
    }
}

/// ABORT: this rank ends, naming the failure; the job ends as every rank does the same.
fn abort_job(e: &Error) -> ! {
    let _ = writeln!(std::io::stderr(), "ferry: ABORT: {e}");
    let _ = std::io::stderr().flush();
    std::process::exit(ABORT_EXIT_CODE)
}

/// The transport as the collectives see it: every exchange runs through the engine.
pub(crate) struct Link<'e> {
    pub(crate) eng: &'e mut Engine,
    pub(crate) interest: Interest,
}

impl Transport for Link<'_> {
    fn rank(&self) -> usize {
        self.eng.t.rank()
    }

    fn size(&self) -> usize {
        self.eng.t.size()
    }

    fn name(&self) -> &'static str {
        self.eng.t.name()
    }

    fn node_of(&self, rank: usize) -> usize {
        self.eng.t.node_of(rank)
    }

    fn progress_exchange(&mut self, _ex: &mut Exchange<'_>) -> Result<bool> {
        // Nothing bypasses the engine: a failure met here would skip its bookkeeping and leave
        // the exchange posted in the transport (not abandoned). Callers (the data layer's
        // switches) go on to `exchange`, which runs under the failure rules.
        Ok(false)
    }

    fn wait_for_input(&mut self, timeout: Duration) -> Result<()> {
        self.eng.t.wait_for_input(timeout)
    }

    fn wait_policy(&self) -> WaitPolicy {
        self.eng.t.wait_policy()
    }

    fn exchange(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        self.eng.drive(ex, &self.interest, &|_| true)
    }

    fn stats(&self) -> Stats {
        self.eng.t.stats()
    }
}
