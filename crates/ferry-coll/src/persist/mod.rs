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

mod drive;
mod init;
mod raw;
pub(crate) mod schedule;

use std::mem::ManuallyDrop;

use ferry_core::element::as_bytes;
use ferry_core::{Element, Error, ErrorKind, Exchange, MsgKey, RecvOp, Result, SendOp};

use crate::op::ReduceOp;
use crate::{Algorithm, Group};

use raw::RawBuf;
use schedule::Shape;

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

impl<T: Element> Persistent<T> {
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
