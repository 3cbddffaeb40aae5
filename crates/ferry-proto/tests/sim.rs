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

/// splitmix64: small, fast, and good enough to pick schedules.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

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

impl Sim {
    fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        let id = self.seq as usize;
        self.events.insert(id, ev);
        self.queue.push(Reverse((at, self.seq, id)));
    }

    fn violation(&mut self, what: String) {
        if self.violations.len() < 8 {
            self.violations.push(format!("t={}us: {what}", self.now));
        }
    }

    fn send_seg(&mut self, pipe: usize, seg: Seg) {
        let delay = match self.rng.below(10) {
            0 => 200 + self.rng.below(3000),
            _ => 5 + self.rng.below(100),
        };
        let at = (self.now + delay).max(self.pipes[pipe].last);
        self.pipes[pipe].last = at;
        self.schedule(at, Ev::Deliver { pipe, seg });
    }

    /// Executes what node `n`'s endpoint asks for.
    fn drain(&mut self, n: usize) {
        let now = d(self.now);
        while let Some(a) = self.nodes[n].ep.poll_action() {
            match a {
                Action::Dial { conn, peer } => {
                    let delay = 10 + self.rng.below(300);
                    self.schedule(
                        self.now + delay,
                        Ev::DialDone {
                            node: n,
                            conn,
                            peer,
                        },
                    );
                }
                Action::Transmit {
                    conn,
                    header,
                    payload,
                } => {
                    let behind = self.held.iter().any(|h| (h.node, h.conn) == (n, conn));
                    let borrowed_try = matches!(payload, Payload::Op(op, _)
                        if self.nodes[n].ep.is_eager_borrowed(op));
                    if behind || (borrowed_try && self.hold_rng.chance(40)) {
                        // The socket is full: this frame (a TRY from the program's buffer, or
                        // one queued behind such a frame) waits for room.
                        match self.out.get(&(n, conn)) {
                            Some(&pipe) => {
                                if !behind {
                                    let at = self.now + self.hold_rng.below(600);
                                    self.schedule(at, Ev::WriteHeld(n));
                                }
                                self.held.push(Held {
                                    node: n,
                                    conn,
                                    pipe,
                                    frame: Some((header, payload)),
                                });
                            }
                            None => self.violation(format!(
                                "rank {n}: {:?} frame on connection {conn:?} that is not open",
                                header.ty
                            )),
                        }
                        continue;
                    }
                    let bytes = match payload {
                        Payload::None => Vec::new(),
                        Payload::Shared(v) => v.as_ref().clone(),
                        Payload::Op(op, len) => {
                            let node = &mut self.nodes[n];
                            let b = match node.sends.get(&op) {
                                Some((b, OpStatus::Pending, _)) if b.len() == len => b.clone(),
                                other => {
                                    let what = format!(
                                        "rank {n}: zero-copy DATA of send {op:?} that is {:?}",
                                        other.map(|o| o.1)
                                    );
                                    self.violation(what);
                                    continue;
                                }
                            };
                            self.nodes[n].ep.on_op_written(op, now);
                            b
                        }
                    };
                    if header.ty == ferry_proto::frame::FrameType::Bye
                        && header.serial != 0
                        && self.nodes[n].tolerant
                    {
                        self.violation(format!(
                            "rank {n} tolerates failures but its goodbye blames rank {}",
                            header.serial - 1
                        ));
                    }
                    use ferry_proto::frame::FrameType as F;
                    let node = &mut self.nodes[n];
                    if header.ty == F::Bye {
                        node.said_bye = true;
                    } else if node.said_bye
                        && node.gave_up_on.contains(&(header.dest as usize))
                        && matches!(header.ty, F::Try | F::Add | F::Announce | F::Data)
                    {
                        self.violation(format!(
                            "rank {n}: {:?} to rank {} after its goodbye, which gave up on it",
                            header.ty, header.dest
                        ));
                    }
                    if bytes.len() as u64 != header.payload_len() {
                        self.violation(format!(
                            "rank {n}: frame {header:?} with {} bytes",
                            bytes.len()
                        ));
                    }
                    match self.out.get(&(n, conn)) {
                        Some(&p) => self.queued.push((n, conn, p, Seg::Frame(header, bytes))),
                        None => self.violation(format!(
                            "rank {n}: {:?} frame on connection {conn:?} that is not open",
                            header.ty
                        )),
                    }
                }
                Action::ShutdownWrite(conn) | Action::Close(conn) => {
                    // After what is queued (and held back).
                    if let Some(p) = self.out.remove(&(n, conn)) {
                        if self.held.iter().any(|h| (h.node, h.conn) == (n, conn)) {
                            self.held.push(Held {
                                node: n,
                                conn,
                                pipe: p,
                                frame: None,
                            });
                        } else {
                            self.queued.push((n, conn, p, Seg::Fin));
                        }
                    }
                    if matches!(a, Action::Close(_)) {
                        self.close_reading(n, conn);
                    }
                }
                Action::Drop(conn) => {
                    // At once: what is queued is never written.
                    self.queued.retain(|q| (q.0, q.1) != (n, conn));
                    self.held.retain(|h| (h.node, h.conn) != (n, conn));
                    if let Some(p) = self.out.remove(&(n, conn)) {
                        self.send_seg(p, Seg::Fin);
                    }
                    self.close_reading(n, conn);
                }
                Action::SendDone(op) => self.complete_send(n, op, true, None),
                Action::RecvDone { op, data, len } => {
                    let data = match data {
                        Some(v) => v,
                        None => self.nodes[n].direct.remove(&op).unwrap_or_default(),
                    };
                    if data.len() != len {
                        self.violation(format!(
                            "rank {n}: recv {op:?} len {len} with {} bytes",
                            data.len()
                        ));
                    }
                    self.complete_recv(n, op, Some(data), None);
                }
                Action::Failed(OpRef::Send(op), e) => {
                    // The failed exchange is abandoned: the driver copies what it still writes
                    // from the send's buffer, which is the program's again.
                    self.detach_held(n, op);
                    self.complete_send(n, op, false, Some(e));
                }
                Action::Failed(OpRef::Recv(op), e) => self.complete_recv(n, op, None, Some(e)),
            }
        }
        if self.queued.iter().any(|q| q.0 == n) {
            // Half the time the frames leave at once; otherwise later, so that the node may
            // read more input first (the driver serves every ready socket of a pass before it
            // writes what the pass queued).
            if self.rng.chance(50) {
                self.flush(n);
            } else {
                let at = self.now + self.rng.below(30);
                self.schedule(at, Ev::Flush(n));
            }
        }
        self.arm_timer(n);
    }

    /// Writes what node `n` queued.
    fn flush(&mut self, n: usize) {
        let mut mine = Vec::new();
        self.queued.retain_mut(|q| {
            if q.0 == n {
                mine.push((q.2, std::mem::replace(&mut q.3, Seg::Fin)));
                false
            } else {
                true
            }
        });
        for (p, seg) in mine {
            self.send_seg(p, seg);
        }
    }

    /// Held frames of send `op` of node `n` take a copy of its bytes (the driver does so
    /// when the send is abandoned: its buffer is the program's again).
    fn detach_held(&mut self, n: usize, op: SendId) {
        let Some(bytes) = self.nodes[n].sends.get(&op).map(|s| s.0.clone()) else {
            return;
        };
        let copy = std::sync::Arc::new(bytes);
        self.share_held(n, op, &copy);
    }

    fn share_held(&mut self, n: usize, op: SendId, data: &std::sync::Arc<Vec<u8>>) {
        for h in self.held.iter_mut().filter(|h| h.node == n) {
            if let Some((_, p)) = &mut h.frame {
                if matches!(p, Payload::Op(o, len) if *o == op && *len == data.len()) {
                    *p = Payload::Shared(data.clone());
                }
            }
        }
    }

    /// The socket of node `n` takes what was held back: a frame from the program's buffer
    /// may only be written while its send is pending.
    fn write_held(&mut self, n: usize) {
        if !self.nodes[n].alive {
            return;
        }
        // What the node queued before the held frames goes first.
        self.flush(n);
        let now = d(self.now);
        let mut mine = Vec::new();
        self.held.retain_mut(|h| {
            if h.node == n {
                mine.push((h.pipe, h.frame.take()));
                false
            } else {
                true
            }
        });
        for (pipe, frame) in mine {
            let Some((header, payload)) = frame else {
                self.send_seg(pipe, Seg::Fin);
                continue;
            };
            let bytes = match payload {
                Payload::None => Vec::new(),
                Payload::Shared(v) => v.as_ref().clone(),
                Payload::Op(op, len) => match self.nodes[n].sends.get(&op) {
                    Some((b, OpStatus::Pending, _)) if b.len() == len => {
                        let b = b.clone();
                        self.nodes[n].ep.on_op_written(op, now);
                        b
                    }
                    other => {
                        let what = format!(
                            "rank {n}: held frame from the buffer of send {op:?} that is {:?}",
                            other.map(|o| o.1)
                        );
                        self.violation(what);
                        continue;
                    }
                },
            };
            self.send_seg(pipe, Seg::Frame(header, bytes));
        }
        self.drain(n);
    }

    /// The call of node `n` that posted its sends returns (see [`Ev::CallEnds`]).
    fn call_ends(&mut self, n: usize) {
        if !self.nodes[n].alive {
            return;
        }
        let node = &mut self.nodes[n];
        let copies = node.ep.release_eager(&Bufs(&node.sends));
        for (op, data) in copies {
            self.share_held(n, op, &data);
        }
        self.drain(n);
        self.maybe_finish(n);
    }

    /// Our receiving side of `conn` is gone (closed or dropped).
    fn close_reading(&mut self, n: usize, conn: ConnId) {
        for pipe in self.pipes.iter_mut() {
            if pipe.to == (n, Some(conn)) {
                pipe.closed = true;
            }
        }
    }

    /// Checks that a failure of rank `n`'s operation names the killed rank. `sending`: a send
    /// or finish, which may also fail because its receiver gave the receive up and ended.
    fn check_failure(
        &mut self,
        n: usize,
        what: String,
        e: &ferry_proto::endpoint::EndpointError,
        sending: bool,
    ) {
        if sending && self.abandoned_recv.contains(&e.peer) {
            // The peer gave a receive up and may have finished without taking its message.
            return;
        }
        if self.timed_out.contains(&e.peer) || self.timed_out.contains(&e.origin) {
            // The peer gave up and ended early (its program had an operation timeout). What
            // it had sent on a connection this rank accepts only after its goodbye on another
            // one may then still arrive, and stay stored: nobody receives it any more.
            self.nodes[n].lost_to_time_out = true;
            return;
        }
        match self.killed {
            Some(k) if e.origin == k || e.peer == k => {
                self.nodes[n].blamed = Some(k);
                if e.rank != n {
                    self.violation(format!(
                        "rank {n}: error names rank {} as itself: {e}",
                        e.rank
                    ));
                }
            }
            _ => self.violation(format!("rank {n}: {what} failed without a dead peer: {e}")),
        }
    }

    fn complete_send(
        &mut self,
        n: usize,
        op: SendId,
        ok: bool,
        e: Option<ferry_proto::endpoint::EndpointError>,
    ) {
        let st = self.nodes[n].sends.get(&op).map(|s| s.1);
        if st != Some(OpStatus::Pending) {
            self.violation(format!(
                "rank {n}: send {op:?} completes again (was {st:?})"
            ));
            return;
        }
        if let Some(e) = &e {
            self.check_failure(n, format!("send {op:?}"), e, true);
        }
        if let Some(s) = self.nodes[n].sends.get_mut(&op) {
            s.1 = if ok { OpStatus::Done } else { OpStatus::Failed };
        }
    }

    fn complete_recv(
        &mut self,
        n: usize,
        op: RecvId,
        data: Option<Vec<u8>>,
        e: Option<ferry_proto::endpoint::EndpointError>,
    ) {
        let Some(&(flow, seq, st)) = self.nodes[n].recvs.get(&op) else {
            self.violation(format!("rank {n}: completion of unknown recv {op:?}"));
            return;
        };
        if st != OpStatus::Pending {
            self.violation(format!(
                "rank {n}: recv {op:?} completes again (was {st:?})"
            ));
            return;
        }
        match (data, e) {
            (Some(data), _) => {
                let want = message(flow, seq, self.eager);
                if data != want {
                    self.violation(format!(
                        "rank {n}: recv {seq} of {flow:?} got {} bytes, not message {seq} ({} bytes)",
                        data.len(),
                        want.len()
                    ));
                }
                if let Some(r) = self.nodes[n].recvs.get_mut(&op) {
                    r.2 = OpStatus::Done;
                }
            }
            (None, Some(e)) => {
                self.check_failure(n, format!("recv {seq} of {flow:?}"), &e, false);
                if let Some(r) = self.nodes[n].recvs.get_mut(&op) {
                    r.2 = OpStatus::Failed;
                }
            }
            (None, None) => {}
        }
    }

    fn arm_timer(&mut self, n: usize) {
        if !self.nodes[n].alive {
            return;
        }
        let Some(t) = self.nodes[n].ep.poll_timeout() else {
            return;
        };
        let at = (t.as_micros() as u64).max(self.now);
        if self.timers[n].is_some_and(|old| old <= at && old >= self.now) {
            return;
        }
        self.timers[n] = Some(at);
        self.schedule(at, Ev::Timer(n));
    }

    fn progress(&mut self, n: usize) {
        let node = &self.nodes[n];
        if node.quits && node.blamed.is_some() && node.alive && !node.finish_called {
            self.quit(n);
        }
        let now = d(self.now);
        let node = &mut self.nodes[n];
        let bufs = Bufs(&node.sends);
        node.ep.progress(now, &bufs);
        self.drain(n);
        if self.nodes[n].ep.has_eager_borrowed() && self.hold_rng.chance(20) {
            // A send posted while room was short went out from the program's buffer too.
            let at = self.now + self.hold_rng.below(300);
            self.schedule(at, Ev::CallEnds(n));
        }
        self.maybe_finish(n);
    }

    fn maybe_finish(&mut self, n: usize) {
        let node = &self.nodes[n];
        if !node.alive || node.finish_called || !node.script.is_empty() {
            return;
        }
        let all = node.sends.values().all(|s| s.1 != OpStatus::Pending)
            && node.recvs.values().all(|r| r.2 != OpStatus::Pending);
        if all {
            // Everything this rank wanted is delivered: nothing may be left stored for it.
            let t = node.ep.table_sizes();
            // An abandoned receive stays posted until its message comes (to consume it).
            let gave_up = self.abandoned_recv.contains(&n);
            let quit = node.quit || node.lost_to_time_out;
            if !quit && (t.inbox > 0 || t.overflow > 0 || (t.posted > 0 && !gave_up)) {
                self.violation(format!(
                    "rank {n}: state left after its last receive: {t:?}"
                ));
            }
            // Half the time the endpoint must know on its own which rank failed first (the
            // goodbye names it, and peers blame that rank, not this one).
            let blame = if self.rng.chance(50) {
                self.nodes[n].blamed
            } else {
                None
            };
            let node = &mut self.nodes[n];
            node.finish_called = true;
            node.ep.finish(blame, d(self.now));
            self.drain(n);
        }
    }

    fn step(&mut self, n: usize) {
        if !self.nodes[n].alive {
            return;
        }
        let now = d(self.now);
        // Post one to three ops.
        for _ in 0..1 + self.rng.below(3) {
            let Some(op) = self.nodes[n].script.pop_front() else {
                break;
            };
            let node = &mut self.nodes[n];
            node.next_op += 1;
            let id = node.next_op;
            match op {
                Op::Send(flow, seq) => {
                    let data = message(flow, seq, self.eager);
                    let len = data.len();
                    let op = SendId(id);
                    node.sends
                        .insert(op, (data, OpStatus::Pending, seq as usize));
                    let bufs = Bufs(&node.sends);
                    match node.ep.post_send(op, flow.dst, flow.key, len, now, &bufs) {
                        Ok(SendStatus::Done) => self.complete_send(n, op, true, None),
                        Ok(SendStatus::Pending) => {}
                        Err(e) => self.complete_send(n, op, false, Some(e)),
                    }
                }
                Op::Recv(flow, seq) => {
                    let op = RecvId(id);
                    node.recvs.insert(op, (flow, seq, OpStatus::Pending));
                    if let Err(e) = node.ep.post_recv(op, flow.src, flow.key, now) {
                        self.complete_recv(n, op, None, Some(e));
                    }
                }
            }
            self.drain(n);
        }
        if self.nodes[n].ep.has_eager_borrowed() {
            // The call returns now or a little later (it had receives to wait for).
            let at = self.now + self.hold_rng.below(300);
            self.schedule(at, Ev::CallEnds(n));
        }
        if self.rng.chance(4) {
            self.abandon_one(n);
        }
        if !self.nodes[n].script.is_empty() {
            let at = self.now + self.rng.below(400);
            self.schedule(at, Ev::Step(n));
        }
        self.progress(n);
    }

    /// The program of rank `n` ends after a failure: the rest of its script is dropped and
    /// every pending operation abandoned.
    fn quit(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        node.script.clear();
        node.quit = true;
        let mut sends: Vec<SendId> = node
            .sends
            .iter()
            .filter(|(_, s)| s.1 == OpStatus::Pending)
            .map(|(op, _)| *op)
            .collect();
        sends.sort_unstable();
        for &op in &sends {
            self.detach_held(n, op);
        }
        let node = &mut self.nodes[n];
        for op in sends {
            node.ep.abandon_send(op, &Bufs(&node.sends));
            if let Some(s) = node.sends.get_mut(&op) {
                s.1 = OpStatus::Abandoned;
                s.0.iter_mut().for_each(|b| *b ^= 0x5a);
            }
        }
        let mut recvs: Vec<RecvId> = node
            .recvs
            .iter()
            .filter(|(_, r)| r.2 == OpStatus::Pending)
            .map(|(op, _)| *op)
            .collect();
        recvs.sort_unstable();
        if !recvs.is_empty() {
            self.abandoned_recv.insert(n);
        }
        let node = &mut self.nodes[n];
        for op in recvs {
            node.ep.abandon_recv(op);
            if let Some(r) = node.recvs.get_mut(&op) {
                r.2 = OpStatus::Abandoned;
            }
        }
        self.drain(n);
    }

    /// An operation of rank `n` times out: the driver gives up on (some of) its peers and the
    /// program, having got the error, abandons the rest of its work and ends. Its finish must
    /// neither wait for those peers to take its messages nor linger for them.
    fn time_out(&mut self, n: usize) {
        let node = &self.nodes[n];
        if !node.alive || node.finish_called {
            return;
        }
        let peers: Vec<usize> = (0..self.nodes.len()).filter(|&p| p != n).collect();
        let first = self.rng.below(peers.len() as u64) as usize;
        for (i, &p) in peers.iter().enumerate() {
            if i == first || self.rng.chance(50) {
                self.nodes[n].ep.give_up(p);
                self.nodes[n].gave_up_on.push(p);
            }
        }
        self.timed_out.insert(n);
        self.quit(n);
        self.progress(n);
    }

    /// The program of rank `n` gives up one of its pending operations (its exchange failed).
    fn abandon_one(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        let mut sends: Vec<SendId> = node
            .sends
            .iter()
            .filter(|(_, s)| s.1 == OpStatus::Pending)
            .map(|(op, _)| *op)
            .collect();
        let mut recvs: Vec<RecvId> = node
            .recvs
            .iter()
            .filter(|(_, r)| r.2 == OpStatus::Pending)
            .map(|(op, _)| *op)
            .collect();
        sends.sort_unstable();
        recvs.sort_unstable();
        if !sends.is_empty() && (recvs.is_empty() || self.rng.chance(50)) {
            let op = sends[self.rng.below(sends.len() as u64) as usize];
            self.detach_held(n, op);
            let node = &mut self.nodes[n];
            node.ep.abandon_send(op, &Bufs(&node.sends));
            if let Some(s) = node.sends.get_mut(&op) {
                s.1 = OpStatus::Abandoned;
                // The program may reuse its buffer at once: the endpoint must not read it.
                s.0.iter_mut().for_each(|b| *b ^= 0x5a);
            }
            // Its message still counts as sent: the receiver must get the original bytes.
        } else if !recvs.is_empty() {
            let op = recvs[self.rng.below(recvs.len() as u64) as usize];
            let node = &mut self.nodes[n];
            node.ep.abandon_recv(op);
            if let Some(r) = node.recvs.get_mut(&op) {
                r.2 = OpStatus::Abandoned;
            }
            self.abandoned_recv.insert(n);
        }
        self.drain(n);
    }

    fn connect(&mut self, a: usize, ca: ConnId, b: usize) {
        let now = d(self.now);
        let cb = self.nodes[b].ep.on_accepted(now);
        let ab = self.pipes.len();
        self.pipes.push(Pipe {
            to: (b, Some(cb)),
            last: self.now,
            closed: false,
        });
        self.pipes.push(Pipe {
            to: (a, Some(ca)),
            last: self.now,
            closed: false,
        });
        self.out.insert((a, ca), ab);
        self.out.insert((b, cb), ab + 1);
        self.nodes[a].ep.on_connected(ca, now);
        self.drain(a);
        self.drain(b);
    }

    fn deliver(&mut self, pipe: usize, seg: Seg) {
        let (n, conn) = self.pipes[pipe].to;
        let Some(conn) = conn else { return };
        if !self.nodes[n].alive {
            return;
        }
        let now = d(self.now);
        if self.pipes[pipe].closed {
            if matches!(seg, Seg::Frame(..)) {
                // Data for a closed socket: the kernel resets the sender.
                let back = pipe ^ 1;
                let (m, cm) = self.pipes[back].to;
                if let Some(cm) = cm {
                    let at = self.now + 5 + self.rng.below(50);
                    self.schedule(at, Ev::Reset { node: m, conn: cm });
                }
            }
            return;
        }
        match seg {
            Seg::Fin => {
                self.pipes[pipe].closed = true;
                self.nodes[n].ep.on_conn_lost(conn, Lost::Eof);
            }
            Seg::Frame(h, bytes) => {
                // Round trip through the wire format.
                let enc = h.encode();
                let cap = self.nodes[n].ep.config().max_message_bytes;
                let h = match Header::decode(&enc[..HEADER_LEN], cap) {
                    Ok(h) => h,
                    Err(e) => {
                        self.nodes[n]
                            .ep
                            .on_conn_fault(conn, format!("malformed frame: {e}"));
                        self.drain(n);
                        return;
                    }
                };
                let ep = &mut self.nodes[n].ep;
                match ep.on_header(conn, h, now) {
                    Sink::Done => {}
                    Sink::Recv(op, len) => {
                        if bytes.len() != len {
                            self.violation(format!(
                                "rank {n}: sink of {len} for {} bytes",
                                bytes.len()
                            ));
                        }
                        self.nodes[n].direct.insert(op, bytes);
                        self.nodes[n].ep.on_payload(conn, Landed::Direct, now);
                    }
                    Sink::Owned(_) => ep.on_payload(conn, Landed::Owned(bytes), now),
                    Sink::Discard(_) => ep.on_payload(conn, Landed::Discarded, now),
                }
            }
        }
        self.progress(n);
    }

    fn ghost(&mut self, n: usize, claims: usize) {
        if !self.nodes[n].alive {
            return;
        }
        let now = d(self.now);
        let before = self.nodes[n].ep.counters().strangers;
        let ep = &mut self.nodes[n].ep;
        let conn = ep.on_accepted(now);
        let secret = ep.config().secret.clone();
        let h = ferry_proto::handshake::hello(claims, n, &secret);
        match ep.on_header(conn, h, now) {
            Sink::Owned(_) => ep.on_payload(conn, Landed::Owned(secret.to_vec()), now),
            other => {
                let what = format!("rank {n}: hello of a ghost gets {other:?}");
                self.violation(what);
            }
        }
        let ep = &mut self.nodes[n].ep;
        if ep.is_live(conn) || ep.counters().strangers != before + 1 {
            self.violation(format!(
                "rank {n}: a stranger claiming excluded rank {claims} was not dropped"
            ));
        }
        self.drain(n);
        self.progress(n);
    }

    fn kill(&mut self, k: usize) {
        if !self.nodes[k].alive {
            return;
        }
        self.nodes[k].alive = false;
        self.killed = Some(k);
        // What it had queued is never written, but its sockets end all the same (also those
        // whose end it had only queued).
        let mut ended: Vec<usize> = Vec::new();
        self.held.retain(|h| {
            if h.node == k {
                ended.push(h.pipe);
            }
            h.node != k
        });
        self.queued.retain(|q| {
            if q.0 == k {
                ended.push(q.2);
            }
            q.0 != k
        });
        // Every connection of k ends: its peers read the end of the stream (after what was in
        // flight, as a kernel that closes a dead process's sockets sends FIN; unread input
        // makes it a reset, which the receiver reports the same way).
        let mine: Vec<(usize, ConnId)> =
            self.out.keys().filter(|(n, _)| *n == k).copied().collect();
        for key in mine {
            if let Some(p) = self.out.remove(&key) {
                ended.push(p);
            }
        }
        ended.sort_unstable();
        ended.dedup();
        for p in ended {
            self.send_seg(p, Seg::Fin);
        }
        for pipe in self.pipes.iter_mut() {
            if pipe.to.0 == k {
                pipe.closed = true;
            }
        }
    }

    fn run(&mut self, limit_us: u64) {
        let mut budget = 200_000u32;
        while let Some(Reverse((at, _, id))) = self.queue.pop() {
            budget -= 1;
            if budget == 0 {
                self.violation("livelock: 200000 events without an end".into());
                return;
            }
            if at > limit_us {
                self.violation(format!("still busy after {limit_us} us of virtual time"));
                return;
            }
            self.now = at;
            let Some(ev) = self.events.remove(&id) else {
                continue;
            };
            if self.trace && !(200..=199_000).contains(&budget) {
                eprintln!("{at:>9} {ev:?}");
            }
            match ev {
                Ev::Step(n) => self.step(n),
                Ev::Timer(n) => {
                    if self.timers[n] == Some(at) {
                        self.timers[n] = None;
                    }
                    if self.nodes[n].alive {
                        let node = &mut self.nodes[n];
                        let bufs = Bufs(&node.sends);
                        node.ep.handle_timeout(d(self.now), &bufs);
                        self.drain(n);
                        self.maybe_finish(n);
                        self.arm_timer(n);
                    }
                }
                Ev::DialDone { node, conn, peer } => {
                    if !self.nodes[node].alive {
                        continue;
                    }
                    let dead = !self.nodes[peer].alive;
                    if dead || self.rng.chance(10) {
                        // A dead peer's host refuses; so may a live one that is busy, except in
                        // launcher mode, where its listener exists before anyone dials it.
                        let why = if dead || !self.refused_is_dead {
                            ConnectFailure::Refused("connection refused".into())
                        } else {
                            ConnectFailure::Unreachable("connection timed out".into())
                        };
                        // A dial the endpoint already gave up (its rank began to end) tells
                        // it nothing.
                        let known = self.nodes[node].ep.is_live(conn);
                        let _ = self.nodes[node]
                            .ep
                            .on_connect_failed(conn, why, d(self.now));
                        if dead && self.refused_is_dead && known {
                            let st = self.nodes[node].ep.peer_status(peer);
                            if !matches!(st, Some(ferry_proto::endpoint::PeerStatus::Dead { .. })) {
                                self.violation(format!(
                                    "rank {node}: dial refused by dead rank {peer}, status {st:?}"
                                ));
                            }
                        }
                        self.drain(node);
                    } else {
                        self.connect(node, conn, peer);
                    }
                    self.progress(node);
                }
                Ev::Deliver { pipe, seg } => self.deliver(pipe, seg),
                Ev::Reset { node, conn } => {
                    if self.nodes[node].alive {
                        self.out.remove(&(node, conn));
                        self.nodes[node]
                            .ep
                            .on_conn_lost(conn, Lost::Error("connection reset by peer".into()));
                        self.progress(node);
                    }
                }
                Ev::Kill(k) => self.kill(k),
                Ev::Flush(n) => {
                    if self.nodes[n].alive {
                        self.flush(n);
                    }
                }
                Ev::WriteHeld(n) => self.write_held(n),
                Ev::CallEnds(n) => self.call_ends(n),
                Ev::Evict(n) => {
                    if self.nodes[n].alive {
                        self.nodes[n].ep.evict_idle();
                        self.drain(n);
                    }
                }
                Ev::TimeOut(n) => self.time_out(n),
                Ev::Ghost { node, claims } => self.ghost(node, claims),
            }
        }
    }
}

/// Runs schedule `seed` with `mutate` applied to every endpoint; returns the violations.
fn run_schedule(seed: u64, mutate: &dyn Fn(&mut Endpoint)) -> Vec<String> {
    let mut rng = Rng(seed);
    let n = 2 + rng.below(3) as usize;
    let eager = 16 + rng.below(48) as usize;
    let secret = b"sim-secret".to_vec();
    let cap = 1 + rng.below(n as u64) as usize;
    let refused_is_dead = rng.chance(50);
    // Sometimes the job has one more rank, served by another transport (hybrid): it never
    // takes part, and a stranger claiming to be it is turned away.
    let ghost = rng.chance(20);
    let size = n + usize::from(ghost);
    // TRYs written from the program's buffer: in two schedules of three, from a size drawn
    // apart from `rng` (the schedules with them off stay as they were).
    let mut hold_rng = Rng(seed ^ 0x7e57_d1ec_7e57_d1ec);
    let direct_min = match hold_rng.below(3) {
        0 => usize::MAX,
        _ => hold_rng.below(eager as u64) as usize,
    };
    let mut nodes = Vec::new();
    for r in 0..n {
        let mut cfg = EndpointConfig::new(r, size, &secret);
        cfg.refused_is_dead = refused_is_dead;
        if ghost {
            cfg.excluded = (0..size).map(|p| p == n).collect();
        }
        cfg.eager_bytes = eager;
        cfg.eager_direct_min = direct_min;
        cfg.inbox_messages = 1 + rng.below(3) as usize;
        cfg.inbox_bytes = eager * (1 + rng.below(3) as usize);
        cfg.outbox_bytes = eager * (1 + rng.below(4) as usize);
        cfg.max_message_bytes = 1 << 20;
        cfg.connection_cap = cap;
        cfg.connect_timeout = d(300_000);
        cfg.rndv_grace = d(50);
        cfg.rndv_grace_idle = d(500);
        cfg.probe_after = d(2_000);
        cfg.linger = d(5_000);
        let mut ep = Endpoint::new(cfg);
        mutate(&mut ep);
        nodes.push(Node {
            ep,
            alive: true,
            script: VecDeque::new(),
            sends: HashMap::new(),
            recvs: HashMap::new(),
            direct: HashMap::new(),
            blamed: None,
            finish_called: false,
            next_op: 0,
            quits: rng.chance(50),
            quit: false,
            tolerant: false,
            lost_to_time_out: false,
            gave_up_on: Vec::new(),
            said_bye: false,
        });
    }
    // Workload: a few flows, each a few messages; every rank's script interleaves its sends and
    // receives at random while keeping each flow's order.
    let mut per_node: Vec<Vec<VecDeque<Op>>> = (0..n).map(|_| Vec::new()).collect();
    let flows = 1 + rng.below(2 * n as u64) as usize;
    for _ in 0..flows {
        let src = rng.below(n as u64) as usize;
        let dst = if rng.chance(10) {
            src
        } else {
            (src + 1 + rng.below(n as u64 - 1) as usize) % n
        };
        let kind = if rng.chance(20) {
            MsgKind::CONTROL
        } else {
            MsgKind::USER
        };
        let key = MsgKey::new(0, kind, rng.below(3) as u32);
        let flow = Flow { src, dst, key };
        if per_node[src]
            .iter()
            .any(|q| matches!(q.front(), Some(Op::Send(f, _)) if *f == flow))
        {
            continue;
        }
        let count = 1 + rng.below(6);
        per_node[src].push((0..count).map(|s| Op::Send(flow, s)).collect());
        per_node[dst].push((0..count).map(|s| Op::Recv(flow, s)).collect());
    }
    for node in nodes.iter_mut() {
        if !node.quits && rng.chance(30) {
            node.tolerant = true;
            node.ep.tolerate_failures();
        }
    }
    for (r, mut queues) in per_node.into_iter().enumerate() {
        while queues.iter().any(|q| !q.is_empty()) {
            let live: Vec<usize> = (0..queues.len())
                .filter(|&i| !queues[i].is_empty())
                .collect();
            let i = live[rng.below(live.len() as u64) as usize];
            if let Some(op) = queues[i].pop_front() {
                nodes[r].script.push_back(op);
            }
        }
    }
    let mut sim = Sim {
        rng: Rng(rng.next()),
        now: 0,
        seq: 0,
        queue: BinaryHeap::new(),
        events: HashMap::new(),
        timers: vec![None; n],
        nodes,
        pipes: Vec::new(),
        out: HashMap::new(),
        queued: Vec::new(),
        held: Vec::new(),
        hold_rng,
        eager,
        killed: None,
        abandoned_recv: Default::default(),
        timed_out: Default::default(),
        refused_is_dead,
        violations: Vec::new(),
        trace: std::env::var_os("FERRY_SIM_TRACE").is_some(),
    };
    for r in 0..n {
        let at = sim.rng.below(300);
        sim.schedule(at, Ev::Step(r));
    }
    if ghost {
        let node = sim.rng.below(n as u64) as usize;
        let at = sim.rng.below(3_000);
        sim.schedule(at, Ev::Ghost { node, claims: n });
    }
    if sim.rng.chance(40) {
        let k = sim.rng.below(n as u64) as usize;
        let at = sim.rng.below(3_000);
        sim.schedule(at, Ev::Kill(k));
    }
    if sim.rng.chance(10) {
        let r = sim.rng.below(n as u64) as usize;
        let at = sim.rng.below(3_000);
        sim.schedule(at, Ev::TimeOut(r));
    }
    if sim.rng.chance(30) {
        for _ in 0..1 + sim.rng.below(3) {
            let r = sim.rng.below(n as u64) as usize;
            let at = sim.rng.below(4_000);
            sim.schedule(at, Ev::Evict(r));
        }
    }
    sim.run(600_000_000);
    check_end(&mut sim);
    sim.violations
}

/// Whether rank `r`'s finish may fail with `e`: it names the killed rank, a peer that gave a
/// receive up or timed out, or `r` timed out itself and reports that.
fn finish_error_expected(sim: &Sim, r: usize, e: &ferry_proto::endpoint::EndpointError) -> bool {
    sim.killed.is_some_and(|k| e.origin == k || e.peer == k)
        || sim.abandoned_recv.contains(&e.peer)
        || sim.timed_out.contains(&e.peer)
        || (sim.timed_out.contains(&r) && e.kind == ferry_proto::endpoint::ErrorKind::Timeout)
}

fn check_end(sim: &mut Sim) {
    let killed = sim.killed;
    if sim.trace {
        for (r, node) in sim.nodes.iter().enumerate() {
            let peers: Vec<_> = (0..sim.nodes.len())
                .map(|p| node.ep.peer_status(p))
                .collect();
            eprintln!(
                "rank {r} alive {}: {:?} {peers:?}",
                node.alive,
                node.ep.table_sizes()
            );
            eprintln!("    {}", node.ep.debug_state());
        }
    }
    for r in 0..sim.nodes.len() {
        if !sim.nodes[r].alive {
            continue;
        }
        let node = &sim.nodes[r];
        let mut v = Vec::new();
        if !node.script.is_empty() {
            v.push(format!("rank {r}: {} ops never posted", node.script.len()));
        }
        for (op, s) in &node.sends {
            if s.1 == OpStatus::Pending {
                v.push(format!(
                    "rank {r}: send {op:?} (message {}) never completed",
                    s.2
                ));
            }
        }
        for (op, (flow, seq, st)) in &node.recvs {
            if *st == OpStatus::Pending {
                v.push(format!(
                    "rank {r}: recv {op:?} ({seq} of {flow:?}) never completed"
                ));
            }
        }
        match node.ep.finished() {
            None => v.push(format!("rank {r}: finish never completed")),
            Some(Err(e)) if !finish_error_expected(sim, r, &e) => {
                v.push(format!("rank {r}: finish failed: {e}"))
            }
            _ => {}
        }
        let t = node.ep.table_sizes();
        let owed_to_killed = killed.is_some();
        if t.outbox > 0
            || t.inbox > 0
            || t.overflow > 0
            || (t.remote > 0 && !owed_to_killed)
            || t.posted > 0
            || t.sends > 0
            || t.conns > 0
        {
            v.push(format!("rank {r}: tables not empty at the end: {t:?}"));
        }
        for s in v {
            sim.violation(s);
        }
    }
    for r in 0..sim.nodes.len() {
        if sim.nodes[r].alive {
            let ep = &mut sim.nodes[r].ep;
            ep.retire_generations_before(1);
            let t = ep.table_sizes();
            if t.flows != 0 {
                sim.violation(format!(
                    "rank {r}: {} flow counters after retiring generation 0",
                    t.flows
                ));
            }
        }
    }
}

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("FERRY_SIM_SEED") {
        return vec![s.trim().parse().expect("FERRY_SIM_SEED is a number")];
    }
    let count: u64 = std::env::var("FERRY_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    (0..count).collect()
}

#[test]
fn endpoints_survive_seeded_schedules() {
    let mut failed = Vec::new();
    for seed in seeds() {
        let v = run_schedule(seed, &|_| {});
        if !v.is_empty() {
            failed.push((seed, v));
        }
    }
    if let Some((seed, v)) = failed.first() {
        panic!(
            "{} of the schedules broke a property; first: seed {seed}:\n  {}\n\
             replay: FERRY_SIM_SEED={seed} cargo test --release -p ferry-proto --test sim",
            failed.len(),
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

/// Schedules that once broke a property, replayed on every run whatever `FERRY_SIM_SEEDS` says.
const REGRESSION_SEEDS: &[u64] = &[51571];

/// Replays [`REGRESSION_SEEDS`]. 51571: two ranks that quit after a failure each still owe the other a large (announced)
/// message that no receive will take; each waited in its finish for the other to pull, so
/// neither ever said goodbye.
#[test]
fn regression_seeds_hold() {
    for &seed in REGRESSION_SEEDS {
        let v = run_schedule(seed, &|_| {});
        assert!(v.is_empty(), "seed {seed}:\n  {}", v.join("\n  "));
    }
}
