//! The simulated network and nodes of `sim.rs`: a seeded scheduler in virtual time, pipes that
//! keep each connection in order, nodes that run scripted operations on an endpoint and act on
//! its actions like the driver, and the checks made while a schedule runs (the properties at
//! the end of a run are `sim.rs`'s).
#![allow(dead_code)]

mod program;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Duration;

use ferry_proto::endpoint::{
    Action, ConnId, ConnectFailure, Endpoint, Landed, Lost, OpRef, Payload, RecvId, SendBuffers,
    SendId, SendStatus, Sink,
};
use ferry_proto::frame::{Header, HEADER_LEN};
use ferry_proto::MsgKey;

/// splitmix64: small, fast, and good enough to pick schedules.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Flow {
    pub src: usize,
    pub dst: usize,
    pub key: MsgKey,
}

/// Length and bytes of message `seq` of a flow: a function of its identity, so a message
/// delivered to the wrong receive shows.
pub fn message(flow: Flow, seq: u64, eager: usize) -> Vec<u8> {
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
pub enum OpStatus {
    Pending,
    Done,
    Failed,
    /// Given up by the program: must never be reported.
    Abandoned,
}

pub struct Node {
    pub ep: Endpoint,
    pub alive: bool,
    /// Script: ops to post, in order.
    pub script: VecDeque<Op>,
    pub sends: HashMap<SendId, (Vec<u8>, OpStatus, usize)>,
    pub recvs: HashMap<RecvId, (Flow, u64, OpStatus)>,
    /// Payloads read "straight into the receive's buffer".
    pub direct: HashMap<RecvId, Vec<u8>>,
    /// Failures seen (rank named as origin).
    pub blamed: Option<usize>,
    pub finish_called: bool,
    /// Last operation id handed out.
    pub next_op: u64,
    /// Once it saw a failure, this rank's program gives up the rest of its work and ends
    /// (its peers must then blame the rank that failed, not this one).
    pub quits: bool,
    /// It did (what was sent to it may stay unreceived).
    pub quit: bool,
    /// Survives failures (fault-tolerant layer): never quits, its goodbye blames nobody.
    pub tolerant: bool,
    /// An operation of it failed because its peer had an operation timeout and ended.
    pub lost_to_time_out: bool,
    /// Peers it gave up on after an operation timeout.
    pub gave_up_on: Vec<usize>,
    /// It sent a goodbye.
    pub said_bye: bool,
}

#[derive(Debug, Clone, Copy)]
pub enum Op {
    Send(Flow, u64),
    Recv(Flow, u64),
}

pub struct Bufs<'a>(pub &'a HashMap<SendId, (Vec<u8>, OpStatus, usize)>);

impl SendBuffers for Bufs<'_> {
    fn bytes(&self, op: SendId) -> Option<&[u8]> {
        self.0.get(&op).map(|s| s.0.as_slice())
    }
}

#[derive(Debug)]
pub enum Seg {
    Frame(Header, Vec<u8>),
    Fin,
}

/// One direction of a connection: segments in flight, delivered in order.
pub struct Pipe {
    pub to: (usize, Option<ConnId>),
    pub last: u64,
    /// The receiving side closed: arriving data resets the sender.
    pub closed: bool,
}

#[derive(Debug)]
pub enum Ev {
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

pub struct Sim {
    pub rng: Rng,
    pub now: u64,
    pub seq: u64,
    pub queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    pub events: HashMap<usize, Ev>,
    pub nodes: Vec<Node>,
    pub pipes: Vec<Pipe>,
    /// (node, conn) -> outgoing pipe index.
    pub out: HashMap<(usize, ConnId), usize>,
    /// Segments a node queued during the actions being carried out, written when they are
    /// done (as the driver writes a pass's frames at its end): a connection dropped meanwhile
    /// loses what it had queued, as the driver's dropped socket does.
    pub queued: Vec<(usize, ConnId, usize, Seg)>,
    pub eager: usize,
    pub killed: Option<usize>,
    /// Ranks that abandoned a receive: their senders may see messages not taken.
    pub abandoned_recv: std::collections::HashSet<usize>,
    /// Ranks whose operation timed out: they gave up on peers and ended early, so their
    /// peers' operations with them may fail, naming them.
    pub timed_out: std::collections::HashSet<usize>,
    /// Whether refused dials mean a dead peer (launcher mode).
    pub refused_is_dead: bool,
    pub violations: Vec<String>,
    pub timers: Vec<Option<u64>>,
    /// Print events (FERRY_SIM_TRACE=1, with FERRY_SIM_SEED).
    pub trace: bool,
}

pub fn d(us: u64) -> Duration {
    Duration::from_micros(us)
}

impl Sim {
    pub fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        let id = self.seq as usize;
        self.events.insert(id, ev);
        self.queue.push(Reverse((at, self.seq, id)));
    }

    pub fn violation(&mut self, what: String) {
        if self.violations.len() < 8 {
            self.violations.push(format!("t={}us: {what}", self.now));
        }
    }

    pub fn send_seg(&mut self, pipe: usize, seg: Seg) {
        let delay = match self.rng.below(10) {
            0 => 200 + self.rng.below(3000),
            _ => 5 + self.rng.below(100),
        };
        let at = (self.now + delay).max(self.pipes[pipe].last);
        self.pipes[pipe].last = at;
        self.schedule(at, Ev::Deliver { pipe, seg });
    }

    /// Executes what node `n`'s endpoint asks for.
    pub fn drain(&mut self, n: usize) {
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
                    // After what is queued.
                    if let Some(p) = self.out.remove(&(n, conn)) {
                        self.queued.push((n, conn, p, Seg::Fin));
                    }
                    if matches!(a, Action::Close(_)) {
                        self.close_reading(n, conn);
                    }
                }
                Action::Drop(conn) => {
                    // At once: what is queued is never written.
                    self.queued.retain(|q| (q.0, q.1) != (n, conn));
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
                Action::Failed(OpRef::Send(op), e) => self.complete_send(n, op, false, Some(e)),
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
    pub fn flush(&mut self, n: usize) {
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

    /// Our receiving side of `conn` is gone (closed or dropped).
    pub fn close_reading(&mut self, n: usize, conn: ConnId) {
        for pipe in self.pipes.iter_mut() {
            if pipe.to == (n, Some(conn)) {
                pipe.closed = true;
            }
        }
    }

    pub fn connect(&mut self, a: usize, ca: ConnId, b: usize) {
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

    pub fn deliver(&mut self, pipe: usize, seg: Seg) {
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

    pub fn ghost(&mut self, n: usize, claims: usize) {
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

    pub fn kill(&mut self, k: usize) {
        if !self.nodes[k].alive {
            return;
        }
        self.nodes[k].alive = false;
        self.killed = Some(k);
        // What it had queued is never written, but its sockets end all the same (also those
        // whose end it had only queued).
        let mut ended: Vec<usize> = Vec::new();
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

    pub fn run(&mut self, limit_us: u64) {
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
