//! Deterministic simulation of the TCP protocol endpoint (`ferry_proto::endpoint`): N endpoints
//! over a simulated network in virtual time, driven by a seeded scheduler: random delays and
//! interleavings across connections (each connection stays in order, like TCP), dials that are
//! refused and retried, simultaneous dials, a connection cap that forces the close handshake
//! and re-dials, tiny inboxes and outboxes (refuse, then pull with GET), rendezvous and
//! zero-copy payloads, and a kill of one endpoint at a random step. Like the driver, a node
//! writes the frames its endpoint queued only after it has carried out the actions (sometimes
//! after reading more input first): a connection it drops meanwhile loses them. A TRY written
//! from the program's buffer may be held back (a full socket, with what is queued behind it)
//! until after the send's call ended, failed or was abandoned: the frame must then be written
//! from the endpoint's copy, never from the program's buffer.
//!
//! Checked for every schedule:
//! - every message to a live receiver is delivered exactly once, in flow order, with its bytes;
//! - nothing deadlocks: every operation between live ranks completes, every rank finishes;
//! - every operation waiting on the killed endpoint fails with an error naming it;
//! - nothing is left in the tables once everything is delivered (outbox, inbox, pulls,
//!   receives, connections; flow counters bounded and retired);
//! - an operation the program abandons (its exchange failed) is never reported and its buffer
//!   never read again, yet an abandoned send's message is still delivered, and an abandoned
//!   receive's message is consumed so that the flow's later messages arrive in order;
//! - a dial refused by a dead peer's host declares it dead at once where refusals mean that
//!   (launcher mode), and a stranger claiming a rank served by another transport is dropped;
//! - a rank whose operation times out gives up on peers and ends early: its finish neither
//!   waits for them nor lingers for them, and reports only a timeout; its peers' operations
//!   with it fail naming it, and nothing hangs. Idle connections closed at random times (the
//!   driver short of descriptors) change nothing but the connection count.
//!
//! With flow retirement on (two schedules of three, after as few as one flow), a third of
//! those use a new tag per message between random pairs and then the first tags again, so
//! that retirements are asked in both directions of a pair all through the run, also while
//! the ranks say goodbye, and retired flows start over at serial 0.
//!
//! Laid out by concern: `wire` (the network and the driver), `program` (the ranks' programs),
//! `schedule` (one seeded run and its end checks); the tests are here.
//!
//! `FERRY_SIM_SEEDS` sets the number of schedules (default 20000), `FERRY_SIM_SEED` replays one.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Duration;

use ferry_proto::endpoint::{
    Action, ConnId, ConnectFailure, Endpoint, EndpointConfig, Landed, Lost, OpRef, Payload, RecvId,
    SendBuffers, SendId, SendStatus, Sink,
};
use ferry_proto::frame::{Header, HEADER_LEN};
use ferry_proto::{MsgKey, MsgKind};

mod program;
mod schedule;
mod wire;

use schedule::run_schedule;

#[path = "../seeded/mod.rs"]
mod seeded;

use seeded::{seeds, Rng};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Flow {
    src: usize,
    dst: usize,
    key: MsgKey,
}

/// Length and bytes of message `seq` of a flow: a function of its identity, so a message
/// delivered to the wrong receive shows.
fn message(flow: Flow, seq: u64, eager: usize) -> Vec<u8> {
    let h = (flow.src as u64) << 48 ^ (flow.dst as u64) << 40 ^ (flow.key.tag as u64) << 32 ^ seq;
    let mut r = Rng(h.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let len = match r.below(4) {
        0 => r.below(3) as usize,
        1 => 1 + r.below(eager as u64) as usize,
        _ => eager + 1 + r.below(3 * eager as u64) as usize,
    };
    (0..len).map(|i| (r.next() as u8) ^ (i as u8)).collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpStatus {
    Pending,
    Done,
    Failed,
    /// Given up by the program: must never be reported.
    Abandoned,
}

struct Node {
    ep: Endpoint,
    alive: bool,
    /// Script: ops to post, in order.
    script: VecDeque<Op>,
    sends: HashMap<SendId, (Vec<u8>, OpStatus, usize)>,
    recvs: HashMap<RecvId, (Flow, u64, OpStatus)>,
    /// Payloads read "straight into the receive's buffer".
    direct: HashMap<RecvId, Vec<u8>>,
    /// Failures seen (rank named as origin).
    blamed: Option<usize>,
    finish_called: bool,
    /// Last operation id handed out.
    next_op: u64,
    /// Once it saw a failure, this rank's program gives up the rest of its work and ends
    /// (its peers must then blame the rank that failed, not this one).
    quits: bool,
    /// It did (what was sent to it may stay unreceived).
    quit: bool,
    /// Survives failures (fault-tolerant layer): never quits, its goodbye blames nobody.
    tolerant: bool,
    /// An operation of it failed because its peer had an operation timeout and ended.
    lost_to_time_out: bool,
    /// Peers it gave up on after an operation timeout.
    gave_up_on: Vec<usize>,
    /// It sent a goodbye.
    said_bye: bool,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Send(Flow, u64),
    Recv(Flow, u64),
}

struct Bufs<'a>(&'a HashMap<SendId, (Vec<u8>, OpStatus, usize)>);

impl SendBuffers for Bufs<'_> {
    fn bytes(&self, op: SendId) -> Option<&[u8]> {
        self.0.get(&op).map(|s| s.0.as_slice())
    }
}

#[derive(Debug)]
enum Seg {
    Frame(Header, Vec<u8>),
    Fin,
}

/// A segment the socket has not taken yet (the driver's write queue behind a partial write):
/// it and everything queued after it on its connection wait for [`Ev::WriteHeld`].
struct Held {
    node: usize,
    conn: ConnId,
    pipe: usize,
    /// `None`: the end of the stream (after the frames before it).
    frame: Option<(Header, Payload)>,
}

/// One direction of a connection: segments in flight, delivered in order.
struct Pipe {
    to: (usize, Option<ConnId>),
    last: u64,
    /// The receiving side closed: arriving data resets the sender.
    closed: bool,
}

#[derive(Debug)]
enum Ev {
    Step(usize),
    Timer(usize),
    DialDone {
        node: usize,
        conn: ConnId,
        peer: usize,
    },
    Deliver {
        pipe: usize,
        seg: Seg,
    },
    Reset {
        node: usize,
        conn: ConnId,
    },
    Kill(usize),
    /// Node `n` writes the frames it queued.
    Flush(usize),
    /// Node `n`'s socket takes the frames it held back (see [`Held`]).
    WriteHeld(usize),
    /// The call of node `n` that posted sends returns: TRYs still written from the program's
    /// buffer get their copies.
    CallEnds(usize),
    /// Node `n`'s driver is short of descriptors: the endpoint closes its least recently used
    /// idle connection.
    Evict(usize),
    /// An operation of node `n` times out (`general.operation_timeout_ms`): the driver gives
    /// up on the peers it waited for, the program gets the error and ends.
    TimeOut(usize),
    /// A stranger with the job secret claims to be rank `claims`, which another transport
    /// serves, and dials `node`.
    Ghost {
        node: usize,
        claims: usize,
    },
}

struct Sim {
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    events: HashMap<usize, Ev>,
    nodes: Vec<Node>,
    pipes: Vec<Pipe>,
    /// (node, conn) -> outgoing pipe index.
    out: HashMap<(usize, ConnId), usize>,
    /// Segments a node queued during the actions being carried out, written when they are
    /// done (as the driver writes a pass's frames at its end): a connection dropped meanwhile
    /// loses what it had queued, as the driver's dropped socket does.
    queued: Vec<(usize, ConnId, usize, Seg)>,
    /// Frames a full socket has not taken yet, per node and connection in order.
    held: Vec<Held>,
    /// Picks partial writes and call ends (separate from `rng`, so that schedules without
    /// TRYs written from the program's buffer stay what they were).
    hold_rng: Rng,
    eager: usize,
    killed: Option<usize>,
    /// Ranks that abandoned a receive: their senders may see messages not taken.
    abandoned_recv: std::collections::HashSet<usize>,
    /// Ranks whose operation timed out: they gave up on peers and ended early, so their
    /// peers' operations with them may fail, naming them.
    timed_out: std::collections::HashSet<usize>,
    /// Whether refused dials mean a dead peer (launcher mode).
    refused_is_dead: bool,
    violations: Vec<String>,
    timers: Vec<Option<u64>>,
    /// Print events (FERRY_SIM_TRACE=1, with FERRY_SIM_SEED).
    trace: bool,
}

fn d(us: u64) -> Duration {
    Duration::from_micros(us)
}

#[test]
fn endpoints_survive_seeded_schedules() {
    let mut failed = Vec::new();
    for seed in seeds(20_000) {
        let v = run_schedule(seed, &|_| {});
        if !v.is_empty() {
            failed.push((seed, v));
        }
    }
    if let Some((seed, v)) = failed.first() {
        panic!(
            "{} of the schedules broke a property (seeds {:?}); first: seed {seed}:\n  {}\n\
             replay: FERRY_SIM_SEED={seed} cargo test --release -p ferry-proto --test sim",
            failed.len(),
            failed.iter().take(20).map(|f| f.0).collect::<Vec<_>>(),
            v.join("\n  ")
        );
    }
}

/// The checker catches a broken endpoint: GETs answered twice.
#[test]
fn a_get_answered_twice_is_caught() {
    let caught = (0..500u64)
        .any(|seed| !run_schedule(seed, &|ep| ep.mutations.get_answered_twice = true).is_empty());
    assert!(caught, "no schedule noticed GETs answered twice");
}

/// The checker catches a broken endpoint: a stored message delivered but left in the inbox.
#[test]
fn a_message_left_in_the_inbox_is_caught() {
    let caught = (0..500u64)
        .any(|seed| !run_schedule(seed, &|ep| ep.mutations.inbox_not_emptied = true).is_empty());
    assert!(caught, "no schedule noticed messages left in the inbox");
}

/// The checker catches a broken endpoint: TRY sends held for their answers far longer than
/// one gap between answers.
#[test]
fn an_unbounded_eager_hold_is_caught() {
    let caught = (0..500u64)
        .any(|seed| !run_schedule(seed, &|ep| ep.mutations.eager_hold_unbounded = true).is_empty());
    assert!(caught, "no schedule noticed TRY sends held too long");
}

/// Schedules that once broke a property, replayed on every run whatever `FERRY_SIM_SEEDS` says.
const REGRESSION_SEEDS: &[u64] = &[51571, 26858, 67267, 44433];

/// Replays [`REGRESSION_SEEDS`]. 51571: two ranks that quit after a failure each still owe the other a large (announced)
/// message that no receive will take; each waited in its finish for the other to pull, so
/// neither ever said goodbye. 26858 (a new tag per message): a receiver that quit after a
/// failure said goodbye across a flow retirement proposed to it; the sends held for the
/// answer failed as "the connection broke", naming the receiver instead of the rank that
/// failed. 67267 and 44433 (the same, under a connection cap): proposals answered RETIRE_NO
/// and proposed again every few hundred microseconds kept a connection busy for ever, so its
/// peer's close (to make room under the cap) was refused every time and ranks waited for
/// connections that never came.
#[test]
fn regression_seeds_hold() {
    for &seed in REGRESSION_SEEDS {
        let v = run_schedule(seed, &|_| {});
        assert!(v.is_empty(), "seed {seed}:\n  {}", v.join("\n  "));
    }
}
