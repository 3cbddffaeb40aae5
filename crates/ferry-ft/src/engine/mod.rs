//! One process's fault-tolerance engine: the transport, what this rank knows about failures,
//! and the table of its fault-tolerant communicators, each with its own generation, revoked
//! generations, floods and agreements.
//!
//! There is no progress thread. Control messages are received while the program is blocked
//! in an operation on any of its communicators: every operation runs as one combined exchange
//! holding the program's messages plus a standing control receive from every peer this rank
//! shares a communicator with (one flow per pair for all communicators, see [`crate::wire`];
//! the envelope names the communicator) plus the control messages still being sent. Whenever
//! a control message arrives the engine hands it to the protocol of its communicator, sends
//! what the protocol answers, and decides whether the program's operation must be interrupted
//! (a revoke of its communicator generation, or the failure of a rank it involves); an
//! interrupted operation is abandoned in the transport ([`Transport::abandon_exchange`])
//! before its error is returned.
//!
//! The concerns live in submodules: `table` (the communicators, their ids and generations),
//! `control` (control messages in and out: notices, revokes, agreements), `drive` (running
//! an operation together with the control traffic) and `absorb` (what a transport error
//! means: a failure to note, a withdrawn message, or the operation's end).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use ferry_core::{MsgKey, MsgKind, OpState, Result, Transport};

use crate::wire;

mod absorb;
mod control;
mod drive;
mod table;

pub(crate) use table::{message_generation, CommId, CommState, COMM_IDS, MAX_GENERATIONS};

/// First message generation of fault-tolerant communicators: above the world's 0, below the
/// data layer's groups (`ferry_data::DATA_GENERATION_BASE`, 2^20) and resize's (2^30).
pub const FT_GENERATION_BASE: u32 = 1 << 19;

/// Decided agreements kept answering peers that may still need them (a rank whose decision
/// was lost with a failed relay asks again).
const KEPT_AGREEMENTS: usize = 4;
/// Floods of earlier generations kept relaying (a slow member may still flood on them).
const KEPT_FLOODS: usize = 2;
/// Messages for agreements, generations or communicators this rank has not reached yet are
/// kept, up to this many (a bounded buffer: a peer cannot be more than a few steps ahead).
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
    /// Communicator the operation belongs to.
    pub comm: CommId,
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
struct Watch {
    buf: Vec<u8>,
    state: OpState,
}

/// The engine (see the module doc).
pub(crate) struct Engine {
    pub t: Box<dyn Transport>,
    pub me: usize,
    ctl_key: MsgKey,
    /// Every world rank known to have failed (detected here, notified, or agreed): a fact
    /// about processes, shared by every communicator.
    pub failed: BTreeSet<usize>,
    /// Who told us about each failure (None: detected here), for error messages.
    told_by: BTreeMap<usize, Option<usize>>,
    /// Members that ended the job (ABORT) because of another failure: named last.
    aborted: BTreeSet<usize>,
    /// Members that ended in an orderly way (their last control message said so).
    left: BTreeSet<usize>,
    /// The communicators in use, by id.
    comms: BTreeMap<CommId, CommState>,
    /// Communicators freed here, kept answering for a while (a member that has not freed
    /// its copy yet may still need this rank's relay or agreement answer).
    retired: VecDeque<CommState>,
    /// Per communicator id: the first generation this process has not used with it, so that
    /// a communicator that reuses an id never matches messages of an earlier one.
    next_gen: Vec<u32>,
    /// Failure notices left to their origin: `(failed rank, communicator, origin)`. The origin
    /// floods the notice on each of its communicators that contain the failed rank; if the
    /// origin dies before this rank saw the notice on that communicator, this rank floods it.
    delegated: Vec<(usize, CommId, usize)>,
    /// Messages for communicators, generations or agreements not reached yet: (from, envelope).
    early: Vec<(usize, Vec<u8>)>,
    watch: BTreeMap<usize, Watch>,
    out: Vec<Outgoing>,
    /// Control messages received (diagnostics).
    pub control_received: u64,
    finished: bool,
    plain: bool,
}

impl Engine {
    /// An engine over `t` whose control traffic has the generation `ctl_generation`, holding
    /// the world communicator (id 0) at generation 0 with members `live` (sorted world ranks,
    /// this rank among them).
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
            failed: BTreeSet::new(),
            told_by: BTreeMap::new(),
            left: BTreeSet::new(),
            aborted: BTreeSet::new(),
            comms: BTreeMap::new(),
            retired: VecDeque::new(),
            next_gen: vec![0; COMM_IDS as usize],
            delegated: Vec::new(),
            early: Vec::new(),
            watch: BTreeMap::new(),
            out: Vec::new(),
            control_received: 0,
            finished: false,
            plain,
            t,
        };
        e.register(0, 0, live);
        e
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

    /// ABORT mode, before this rank exits: tells every peer it watches which rank's failure
    /// ends the job (`failed`, or this rank itself when unknown), so that they name it too.
    pub fn tell_abort(&mut self, failed: Option<usize>) {
        let rank = failed.unwrap_or(self.me) as u32;
        let peers: Vec<usize> = self.watch.keys().copied().collect();
        for p in peers {
            self.out.push(Outgoing {
                peer: p,
                data: wire::envelope(wire::ABORT, 0, 0, &rank.to_le_bytes()),
                state: OpState::New,
            });
        }
        self.flush_sends();
        // The transport delivers what it took (tcp's outbox) in its orderly end.
        self.finished = true;
        let _ = self.t.finish();
    }

    /// Orderly end of the transport (once), for every communicator of the process.
    pub fn finish(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        // Tell the peers this rank watches that its end is no failure; the message is the
        // last of each control flow, so nothing of ours is lost behind it.
        let peers: Vec<usize> = self.watch.keys().copied().collect();
        for p in peers {
            self.out.push(Outgoing {
                peer: p,
                data: wire::envelope(wire::LEAVE, 0, 0, &[]),
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

    /// Gives the control messages still queued a few chances to leave.
    pub fn flush_control(&mut self) {
        self.flush_sends();
    }

    /// Whether the transport was ended (orderly or by an abort).
    pub fn is_finished(&self) -> bool {
        self.finished
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            tracing::warn!("shutdown: {e}");
        }
    }
}
