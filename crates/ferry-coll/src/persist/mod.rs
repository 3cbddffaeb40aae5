//! Persistent collectives: broadcast, gather and allreduce set up once and started many times
//! (seed 004 §4.2.2; MPI 4's `MPI_Bcast_init`).
//!
//! Init fixes everything a repeated call would recompute: the algorithm, this rank's schedule
//! (which peer, which byte range, in which step), the message key, and the buffers, whose sizes
//! are checked once. It also meets every peer of the schedule once with a descriptor of the
//! operation: that opens the connections and rings the schedule uses (lazy backends connect on
//! first use), and a peer that initialised a different operation, root, size or algorithm is an
//! error at init instead of corrupt data later.
//!
//! [`Persistent::start`] puts this rank's block in place and posts the first step; it never
//! waits for a peer. The data moves in [`Persistent::wait`], which drives the steps: the
//! backends progress one exchange at a time (tcp's endpoint, for one, keeps per-exchange state
//! between progress calls), so a step is only ever progressed inside `wait`, and other
//! operations may run between `start` and `wait`. Every member waits for its started
//! collectives in the order it started them (as it calls blocking collectives in one order).
//!
//! The collective owns a [`Group`] whose generation nothing else uses (the facade derives one
//! per persistent collective), so its messages never match another operation's, and every start
//! reuses the same flows: the transports keep them in order. Dropping it (after its last
//! `wait`) drops that group, whose token retires the flows (bounded tables).
//!
//! The buffers belong to the collective: read and write them through [`Persistent::data`],
//! [`Persistent::data_mut`] and [`Persistent::output`] while it is not started.

mod raw;
pub(crate) mod schedule;

use std::mem::ManuallyDrop;

use ferry_core::element::as_bytes;
use ferry_core::{
    Element, Error, ErrorKind, Exchange, MsgKey, MsgKind, RecvOp, Result, SendOp, Transport,
};

use crate::op::ReduceOp;
use crate::select::{BCAST_PIPELINE_MIN_BYTES, LINEAR_MAX_P};
use crate::{Algorithm, CollOptions, Group, ReduceOrder};

use raw::RawBuf;
use schedule::{Combine, Region, Shape};

/// Tag of the data messages of every start.
const DATA_TAG: u32 = 0;
/// Tag of the descriptors exchanged at init.
const HELLO_TAG: u32 = 1;
/// Default pipelining segment of the chain and pipeline broadcasts (as `ring.rs`).
const DEFAULT_SEGMENT: usize = 64 * 1024;

/// Which collective a [`Persistent`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PersistentKind {
    /// [`Persistent::broadcast`].
    Broadcast = 1,
    /// [`Persistent::gather`].
    Gather = 2,
    /// [`Persistent::allreduce`].
    Allreduce = 3,
}

impl PersistentKind {
    /// The operation's name in errors (`broadcast`, `gather`, `allreduce`).
    pub fn name(self) -> &'static str {
        match self {
            PersistentKind::Broadcast => "broadcast",
            PersistentKind::Gather => "gather",
            PersistentKind::Allreduce => "allreduce",
        }
    }

    fn from_u8(v: u8) -> Option<PersistentKind> {
        match v {
            1 => Some(PersistentKind::Broadcast),
            2 => Some(PersistentKind::Gather),
            3 => Some(PersistentKind::Allreduce),
            _ => None,
        }
    }
}

/// Where a persistent collective is between calls.
enum State {
    /// Ready to start (buffers accessible).
    Idle,
    /// Started: step `step` is posted as `ex`.
    Active { step: usize, ex: Exchange<'static> },
    /// An earlier start or wait failed; later calls report it.
    Failed {
        kind: ErrorKind,
        peer: Option<usize>,
        why: String,
    },
}

/// A broadcast, gather or allreduce over a fixed group, root, size and algorithm, started
/// many times (see the module documentation). Created by [`Persistent::broadcast`],
/// [`Persistent::gather`] or [`Persistent::allreduce`] on every member, in the same order.
pub struct Persistent<T: Element> {
    kind: PersistentKind,
    group: ManuallyDrop<Group>,
    /// This rank's world rank and group index.
    rank: usize,
    me: usize,
    root: usize,
    algorithm: Algorithm,
    key: MsgKey,
    shape: Shape,
    data: RawBuf<T>,
    stage: RawBuf<T>,
    /// Gather on a root whose staging is not in group order: the blocks in group order.
    out: RawBuf<T>,
    op: Option<ReduceOp<T>>,
    state: State,
    /// Operation vectors, kept so that starts do not allocate.
    sends: Vec<SendOp<'static>>,
    recvs: Vec<RecvOp<'static>>,
    starts: u64,
}

impl<T: Element> std::fmt::Debug for Persistent<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persistent")
            .field("kind", &self.kind)
            .field("rank", &self.rank)
            .field("root", &self.root)
            .field("algorithm", &self.algorithm)
            .field("elements", &self.data.len())
            .field("starts", &self.starts)
            .finish()
    }
}

/// Validated inputs common to the three constructors.
struct Init<'g> {
    group: &'g Group,
    rank: usize,
    me: usize,
}

fn check_group<'g>(t: &dyn Transport, group: &'g Group, name: &'static str) -> Result<Init<'g>> {
    let rank = t.rank();
    let me = group.my_index(rank).map_err(|e| e.context(name))?;
    if let Some(&bad) = group.members().iter().find(|&&m| m >= t.size()) {
        return Err(Error::invalid(
            name,
            format!(
                "group member {bad} is not a rank of this job of {}",
                t.size()
            ),
        )
        .on_rank(rank));
    }
    Ok(Init { group, rank, me })
}

fn check_root(i: &Init<'_>, root: usize, name: &'static str) -> Result<()> {
    if root >= i.group.size() {
        return Err(Error::invalid(
            name,
            format!(
                "root index {root} out of range for a group of {}",
                i.group.size()
            ),
        )
        .on_rank(i.rank));
    }
    Ok(())
}

fn unavailable(alg: Algorithm, name: &'static str, rank: usize, offered: &str) -> Error {
    Error::invalid(
        name,
        format!(
            "algorithm `{}` is not available for a persistent {name} (one of {offered})",
            alg.name()
        ),
    )
    .on_rank(rank)
}

/// Whether the group's topology asks the automatic choice to keep to the chain (X7).
fn on_chain(g: &Group) -> bool {
    g.size() > 2 && g.topology().is_some_and(|t| t.follows_group_order())
}

fn segment(opts: &CollOptions) -> usize {
    if opts.segment_bytes == 0 {
        DEFAULT_SEGMENT
    } else {
        opts.segment_bytes
    }
}

impl<T: Element> Persistent<T> {
    /// A persistent broadcast of `data` from group index `root` over `group`, whose generation
    /// this collective uses alone. Every member passes a buffer of the same length (checked at
    /// init against its schedule peers); the root's contents at each start reach every member.
    /// Algorithms: Auto (the choice of [`crate::broadcast`]), Linear, BinomialTree, Chain,
    /// Pipeline.
    pub fn broadcast(
        t: &mut dyn Transport,
        group: Group,
        root: usize,
        data: Vec<T>,
        opts: &CollOptions,
    ) -> Result<Persistent<T>> {
        const NAME: &str = "broadcast";
        let i = check_group(t, &group, NAME)?;
        check_root(&i, root, NAME)?;
        let p = group.size();
        let len = std::mem::size_of_val(data.as_slice());
        let alg = match opts.algorithm {
            Algorithm::Auto if on_chain(&group) => Algorithm::Chain,
            Algorithm::Auto if p <= 2 => Algorithm::Linear,
            Algorithm::Auto if len >= BCAST_PIPELINE_MIN_BYTES => Algorithm::Pipeline,
            Algorithm::Auto => Algorithm::BinomialTree,
            a @ (Algorithm::Linear
            | Algorithm::BinomialTree
            | Algorithm::Chain
            | Algorithm::Pipeline) => a,
            a => {
                return Err(unavailable(
                    a,
                    NAME,
                    i.rank,
                    "auto, linear, binomial, chain, pipeline",
                ))
            }
        };
        let shape = schedule::broadcast(alg, p, i.me, root, len, segment(opts));
        let (rank, me) = (i.rank, i.me);
        Persistent::assemble(
            t,
            PersistentKind::Broadcast,
            group,
            rank,
            me,
            root,
            alg,
            shape,
            data,
            None,
        )
    }

    /// A persistent gather of every member's `block` (the same length everywhere) at group
    /// index `root`: after each wait the root's [`Persistent::output`] holds member `i`'s
    /// block at `i * block.len()`. Algorithms: Auto (the choice of [`crate::gather`]), Linear,
    /// BinomialTree, Chain.
    pub fn gather(
        t: &mut dyn Transport,
        group: Group,
        root: usize,
        block: Vec<T>,
        opts: &CollOptions,
    ) -> Result<Persistent<T>> {
        const NAME: &str = "gather";
        let i = check_group(t, &group, NAME)?;
        check_root(&i, root, NAME)?;
        let p = group.size();
        let alg = match opts.algorithm {
            Algorithm::Auto if on_chain(&group) => Algorithm::Chain,
            Algorithm::Auto if p <= LINEAR_MAX_P => Algorithm::Linear,
            Algorithm::Auto => Algorithm::BinomialTree,
            a @ (Algorithm::Linear | Algorithm::BinomialTree | Algorithm::Chain) => a,
            a => {
                return Err(unavailable(
                    a,
                    NAME,
                    i.rank,
                    "auto, linear, binomial, chain",
                ))
            }
        };
        if block.len().checked_mul(p).is_none() {
            return Err(Error::invalid(
                NAME,
                format!("{p} blocks of {} elements overflow", block.len()),
            )
            .on_rank(i.rank));
        }
        let shape = schedule::gather(alg, p, i.me, root, block.len(), std::mem::size_of::<T>());
        let (rank, me) = (i.rank, i.me);
        Persistent::assemble(
            t,
            PersistentKind::Gather,
            group,
            rank,
            me,
            root,
            alg,
            shape,
            block,
            None,
        )
    }

    /// A persistent allreduce of `data` with `op`: after each wait every member's
    /// [`Persistent::data`] holds the combination of every member's data at the start, the
    /// same bits everywhere. Algorithms: Auto (BinomialTree, or Chain on a Cartesian group or
    /// when [`ReduceOrder::RankOrderedFold`] is asked for), BinomialTree (the parenthesisation
    /// of [`crate::allreduce_with`]'s binomial tree), Chain (the strict rank-ordered left fold).
    pub fn allreduce(
        t: &mut dyn Transport,
        group: Group,
        data: Vec<T>,
        op: ReduceOp<T>,
        opts: &CollOptions,
    ) -> Result<Persistent<T>> {
        const NAME: &str = "allreduce";
        let i = check_group(t, &group, NAME)?;
        op.check(NAME).map_err(|e| e.on_rank(i.rank))?;
        let ordered = opts.order == ReduceOrder::RankOrderedFold;
        let alg = match opts.algorithm {
            Algorithm::Auto if ordered || on_chain(&group) => Algorithm::Chain,
            Algorithm::Auto => Algorithm::BinomialTree,
            Algorithm::BinomialTree if ordered => {
                return Err(Error::invalid(
                    NAME,
                    "the binomial tree does not give the rank-ordered fold; use chain",
                )
                .on_rank(i.rank))
            }
            a @ (Algorithm::BinomialTree | Algorithm::Chain) => a,
            a => return Err(unavailable(a, NAME, i.rank, "auto, binomial, chain")),
        };
        let shape = schedule::allreduce(
            alg,
            group.size(),
            i.me,
            data.len(),
            std::mem::size_of::<T>(),
        );
        let (rank, me) = (i.rank, i.me);
        Persistent::assemble(
            t,
            PersistentKind::Allreduce,
            group,
            rank,
            me,
            0,
            alg,
            shape,
            data,
            Some(op),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        t: &mut dyn Transport,
        kind: PersistentKind,
        group: Group,
        rank: usize,
        me: usize,
        root: usize,
        algorithm: Algorithm,
        shape: Shape,
        data: Vec<T>,
        op: Option<ReduceOp<T>>,
    ) -> Result<Persistent<T>> {
        let name = kind.name();
        let alloc = |n: usize| -> Result<RawBuf<T>> {
            RawBuf::zeroed(n).ok_or_else(|| {
                Error::new(ErrorKind::ResourceExhausted, name)
                    .with_detail(format!("cannot allocate a staging buffer of {n} elements"))
                    .on_rank(rank)
            })
        };
        let stage = alloc(shape.stage_elems)?;
        let rotated = kind == PersistentKind::Gather && me == root && shape.rot != 0;
        let out = alloc(if rotated { shape.stage_elems } else { 0 })?;
        let key = MsgKey::new(group.generation(), MsgKind::COLLECTIVE, DATA_TAG);
        let mut pc = Persistent {
            kind,
            group: ManuallyDrop::new(group),
            rank,
            me,
            root,
            algorithm,
            key,
            shape,
            data: RawBuf::from_vec(data),
            stage,
            out,
            op,
            state: State::Idle,
            sends: Vec::new(),
            recvs: Vec::new(),
            starts: 0,
        };
        pc.hello(t)?;
        Ok(pc)
    }

    /// This collective's descriptor: kind, algorithm, root, group size, element size and
    /// count, as every member must have it.
    fn descriptor(&self) -> [u8; 26] {
        let mut d = [0u8; 26];
        d[0] = self.kind as u8;
        d[1] = Algorithm::ALL
            .iter()
            .position(|&a| a == self.algorithm)
            .unwrap_or(0) as u8;
        d[2..6].copy_from_slice(&(self.root as u32).to_le_bytes());
        d[6..10].copy_from_slice(&(self.group.size() as u32).to_le_bytes());
        d[10..18].copy_from_slice(&(std::mem::size_of::<T>() as u64).to_le_bytes());
        d[18..26].copy_from_slice(&(self.data.len() as u64).to_le_bytes());
        d
    }

    fn describe(d: &[u8; 26]) -> String {
        let kind = PersistentKind::from_u8(d[0]).map_or("an unknown operation", |k| k.name());
        let alg = Algorithm::ALL.get(d[1] as usize).map_or("?", |a| a.name());
        let u32_at = |i: usize| u32::from_le_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&d[i..i + 8]);
            u64::from_le_bytes(b)
        };
        format!(
            "{kind} ({alg}) from root {} over {} members, {} elements of {} bytes",
            u32_at(2),
            u32_at(6),
            u64_at(18),
            u64_at(10)
        )
    }

    /// Meets every peer of the schedule once (descriptors both ways): opens the connections
    /// the starts use and catches members that initialised something else.
    fn hello(&mut self, t: &mut dyn Transport) -> Result<()> {
        let mut peers: Vec<usize> = self
            .shape
            .steps
            .iter()
            .flat_map(|s| s.recvs.iter().chain(&s.sends).map(|x| x.peer))
            .collect();
        peers.sort_unstable();
        peers.dedup();
        let mine = self.descriptor();
        let mut theirs = vec![[0u8; 26]; peers.len()];
        let key = MsgKey::new(self.group.generation(), MsgKind::COLLECTIVE, HELLO_TAG);
        let members = self.group.members();
        let mut ex = Exchange::new();
        for &p in &peers {
            ex.send(members[p], key, &mine);
        }
        for (&p, buf) in peers.iter().zip(theirs.iter_mut()) {
            ex.recv_into(members[p], key, buf);
        }
        let name = self.kind.name();
        let rank = self.rank;
        t.exchange(&mut ex)
            .map_err(|e| e.context(name).or_rank(rank))?;
        drop(ex);
        for (&p, d) in peers.iter().zip(&theirs) {
            if *d != mine {
                return Err(Error::invalid(
                    name,
                    format!(
                        "persistent collectives do not match: rank {} initialised a {}, this \
                         rank a {}",
                        members[p],
                        Persistent::<T>::describe(d),
                        Persistent::<T>::describe(&mine)
                    ),
                )
                .with_peer(members[p])
                .on_rank(rank));
            }
        }
        Ok(())
    }

    /// Which collective this is.
    pub fn kind(&self) -> PersistentKind {
        self.kind
    }

    /// The algorithm fixed at init (never [`Algorithm::Auto`]).
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// World ranks this rank exchanges messages with on every start, ascending.
    pub fn peers(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .shape
            .steps
            .iter()
            .flat_map(|s| s.recvs.iter().chain(&s.sends))
            .map(|x| self.group.member(x.peer))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Number of completed starts.
    pub fn completed(&self) -> u64 {
        self.starts
    }

    /// Whether a start is under way (not yet waited for).
    pub fn is_active(&self) -> bool {
        matches!(self.state, State::Active { .. })
    }

    fn busy(&self, what: &str) -> Error {
        Error::invalid(
            self.kind.name(),
            format!(
                "{what} while the persistent {} is started; wait first",
                self.kind.name()
            ),
        )
        .on_rank(self.rank)
    }

    /// The data buffer: the broadcast buffer, the gather block, the allreduce vector (after a
    /// wait: the result). An error while started.
    pub fn data(&self) -> Result<&[T]> {
        if self.is_active() {
            return Err(self.busy("reading the buffer"));
        }
        Ok(self.data.as_slice())
    }

    /// The data buffer, writable (e.g. the root's next broadcast contents). An error while
    /// started.
    pub fn data_mut(&mut self) -> Result<&mut [T]> {
        if self.is_active() {
            return Err(self.busy("writing the buffer"));
        }
        Ok(self.data.as_mut_slice())
    }

    /// Gather: on the root, every member's block in group order (`size * block` elements)
    /// after a wait; `None` elsewhere and for the other collectives. An error while started.
    pub fn output(&self) -> Result<Option<&[T]>> {
        if self.is_active() {
            return Err(self.busy("reading the output"));
        }
        if self.kind != PersistentKind::Gather || self.me != self.root {
            return Ok(None);
        }
        Ok(Some(if self.out.len() > 0 {
            self.out.as_slice()
        } else {
            self.stage.as_slice()
        }))
    }

    fn check_transport(&self, t: &dyn Transport, what: &str) -> Result<()> {
        if t.rank() != self.rank {
            return Err(Error::invalid(
                self.kind.name(),
                format!(
                    "{what} on the transport of rank {}, but the collective was set up on rank {}",
                    t.rank(),
                    self.rank
                ),
            )
            .on_rank(t.rank()));
        }
        Ok(())
    }

    fn earlier_failure(&self) -> Option<Error> {
        match &self.state {
            State::Failed { kind, peer, why } => {
                let mut e = Error::new(*kind, self.kind.name())
                    .with_detail(format!("an earlier start failed: {why}"))
                    .on_rank(self.rank);
                if let Some(p) = peer {
                    e = e.with_peer(*p);
                }
                Some(e)
            }
            _ => None,
        }
    }

    /// Starts one round: puts this rank's block in place and posts the first step (moved by
    /// [`Persistent::wait`]); never waits for a peer. Every member starts its persistent
    /// collectives in the same order. Errors: a start while started, a collective that failed
    /// earlier.
    pub fn start(&mut self, t: &mut dyn Transport) -> Result<()> {
        self.check_transport(t, "start")?;
        if let Some(e) = self.earlier_failure() {
            return Err(e);
        }
        if self.is_active() {
            return Err(self.busy("start"));
        }
        if let Some(at) = self.shape.own_at {
            let n = self.data.len();
            let src = self.data.as_slice();
            self.stage.as_mut_slice()[at..at + n].copy_from_slice(src);
        }
        if self.shape.steps.is_empty() {
            self.finish_round();
            return Ok(());
        }
        let ex = self.post(0);
        self.state = State::Active { step: 0, ex };
        Ok(())
    }

    /// Completes the round started last: moves its data and returns when this rank's part is
    /// done (the buffers are then readable). Waiting with nothing started is a no-op. A failed
    /// peer is an error naming it; the collective then reports that failure on every later
    /// call.
    pub fn wait(&mut self, t: &mut dyn Transport) -> Result<()> {
        self.check_transport(t, "wait")?;
        if let Some(e) = self.earlier_failure() {
            return Err(e);
        }
        if !self.is_active() {
            return Ok(());
        }
        self.advance(t)
    }

    /// [`Persistent::start`] then [`Persistent::wait`].
    pub fn run(&mut self, t: &mut dyn Transport) -> Result<()> {
        self.start(t)?;
        self.wait(t)
    }

    /// The exchange of step `i`, over this collective's own buffers.
    fn post(&mut self, i: usize) -> Exchange<'static> {
        let mut ex = Exchange::from_parts(
            std::mem::take(&mut self.sends),
            std::mem::take(&mut self.recvs),
        );
        let members = self.group.members();
        let step = &self.shape.steps[i];
        for x in &step.sends {
            let buf = match x.region {
                Region::Data => &self.data,
                Region::Stage => &self.stage,
            };
            // SAFETY: the range lies inside the buffer (the schedule is built from its length);
            // the buffer is a heap allocation owned by `self` that is neither freed, moved nor
            // written while this exchange lives (accessors refuse while started; `advance`
            // drops or abandons the exchange before touching the buffers; `Drop` sees only an
            // exchange no backend has progressed); no receive of this step overlaps the range
            // (`schedule::tests::ranges_of_a_step_never_overlap`).
            let bytes = unsafe { buf.bytes(x.bytes.clone()) };
            ex.send(members[x.peer], self.key, bytes);
        }
        for x in &step.recvs {
            let buf = match x.region {
                Region::Data => &self.data,
                Region::Stage => &self.stage,
            };
            // SAFETY: as above; in addition no other operation of this step touches this range,
            // so the one mutable view is unique until the exchange completes or is abandoned.
            let bytes = unsafe { buf.bytes_mut(x.bytes.clone()) };
            ex.recv_into(members[x.peer], self.key, bytes);
        }
        ex
    }

    /// Drives the posted step and the ones after it to completion.
    fn advance(&mut self, t: &mut dyn Transport) -> Result<()> {
        loop {
            let State::Active { step, ex } = &mut self.state else {
                return Ok(());
            };
            let step = *step;
            match t.exchange(ex) {
                Ok(()) => {}
                Err(e) => {
                    // A backend that did not say which peer failed: the one this step still
                    // waited for, when there is only one.
                    let e = match ex.pending_peers().as_slice() {
                        [one] if e.peer().is_none() => e.with_peer(*one),
                        _ => e,
                    };
                    return Err(self.fail(t, e));
                }
            }
            let State::Active { ex, .. } = std::mem::replace(&mut self.state, State::Idle) else {
                return Ok(());
            };
            let (s, r) = ex.into_parts();
            self.sends = s;
            self.recvs = r;
            if let Some(c) = self.shape.steps[step].combine {
                self.combine(c);
            }
            if step + 1 == self.shape.steps.len() {
                self.finish_round();
                return Ok(());
            }
            let ex = self.post(step + 1);
            self.state = State::Active { step: step + 1, ex };
        }
    }

    fn combine(&mut self, c: Combine) {
        let Some(op) = &self.op else { return };
        let data = self.data.as_mut_slice();
        let stage = self.stage.as_mut_slice();
        match c {
            Combine::Right => op.apply(data, stage),
            Combine::Left => {
                op.apply(stage, data);
                data.copy_from_slice(stage);
            }
        }
    }

    fn finish_round(&mut self) {
        if self.out.len() > 0 {
            // Binomial gather to a root other than 0: the staging buffer holds the blocks in
            // positions relative to the root.
            let p = self.group.size();
            let n = self.data.len();
            let rot = self.shape.rot;
            let stage = self.stage.as_slice();
            let out = self.out.as_mut_slice();
            for i in 0..p {
                let v = (i + p - rot) % p;
                out[i * n..(i + 1) * n].copy_from_slice(&stage[v * n..(v + 1) * n]);
            }
        }
        self.starts += 1;
    }

    /// Gives up the posted step after `e` and remembers the failure.
    fn fail(&mut self, t: &mut dyn Transport, e: Error) -> Error {
        let name = self.kind.name();
        let e = if e.op() == name {
            e.or_rank(self.rank)
        } else {
            e.context(name).or_rank(self.rank)
        };
        if let State::Active { mut ex, .. } = std::mem::replace(&mut self.state, State::Idle) {
            // After this no peer reads from or writes into the buffers (backend contract).
            t.abandon_exchange(&mut ex, &e);
            let (s, r) = ex.into_parts();
            self.sends = s;
            self.recvs = r;
        }
        self.state = State::Failed {
            kind: e.kind(),
            peer: e.peer(),
            why: e.to_string(),
        };
        e
    }

    /// The bytes of this rank's data buffer (diagnostics, tests).
    pub fn data_bytes(&self) -> Result<&[u8]> {
        self.data().map(as_bytes)
    }
}

impl<T: Element> Drop for Persistent<T> {
    fn drop(&mut self) {
        // The posted exchange (if any) goes before the buffers it refers to.
        let state = std::mem::replace(&mut self.state, State::Idle);
        if matches!(state, State::Active { .. }) {
            // Started but never waited for: the posted step never reached the backend (only
            // `wait` progresses it), so the buffers may go; but peers may have sent this round's
            // messages, so the flows are not retired (their group is leaked).
            return;
        }
        // SAFETY: `group` is dropped exactly once, here, and not used afterwards.
        unsafe { ManuallyDrop::drop(&mut self.group) };
    }
}
