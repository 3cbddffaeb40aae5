//! The retention simulation's harness (see `retain_sim.rs`): a deterministic program over N
//! endpoints with retention on, a simulated network in virtual time, kills (whose listener may
//! outlive the process briefly) and restarts from the start or from a checkpoint.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use ferry_proto::endpoint::{
    Action, ConnId, ConnectFailure, Endpoint, EndpointConfig, Landed, Lost, OpRef, Payload, RecvId,
    RetainConfig, SendBuffers, SendId, SendStatus, Sink,
};
use ferry_proto::frame::Header;
use ferry_proto::MsgKey;

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
}

fn mix(a: u64, b: u64) -> u64 {
    let mut r = Rng(a ^ b.rotate_left(17));
    r.next()
}

pub const EAGER: usize = 256;
pub const RESTART_TIMEOUT: Duration = Duration::from_millis(400);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// The restart runs the program from the start.
    FromStart,
    /// Ranks checkpoint every few rounds; the restart resumes from its last checkpoint.
    Checkpoint(usize),
}

/// Bytes of the message `from` sends `to` in `round` when its state is `state`.
fn message(state: u64, from: usize, to: usize, round: usize) -> Vec<u8> {
    let len = if (round + from + to).is_multiple_of(3) {
        EAGER * 3 + round % 7
    } else {
        8 + (round * 5 + to) % 40
    };
    let mut r = Rng(mix(
        state,
        ((from as u64) << 32) | ((to as u64) << 16) | round as u64,
    ));
    (0..len).map(|_| r.next() as u8).collect()
}

/// The program's state after folding in what it received in a round (sorted by sender).
fn fold(state: u64, got: &[(usize, Vec<u8>)]) -> u64 {
    let mut s = state;
    for (from, bytes) in got {
        s = mix(s, *from as u64 ^ ((bytes.len() as u64) << 8));
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            s = mix(s, u64::from_le_bytes(w));
        }
    }
    s
}

/// What a rank saved at its last checkpoint: round, state, token.
type Saved = (usize, u64, Vec<u8>);

struct Prog {
    round: usize,
    state: u64,
    /// Sends of the current round not complete yet.
    sends: HashMap<SendId, Vec<u8>>,
    /// Receives of the current round: op -> (peer, bytes once done).
    recvs: HashMap<RecvId, (usize, Option<Vec<u8>>)>,
    posted: bool,
    finishing: bool,
    result: Option<Result<(), String>>,
}

impl Prog {
    fn new(round: usize, state: u64) -> Prog {
        Prog {
            round,
            state,
            sends: HashMap::new(),
            recvs: HashMap::new(),
            posted: false,
            finishing: false,
            result: None,
        }
    }
}

struct Bufs<'a>(&'a HashMap<SendId, Vec<u8>>);

impl SendBuffers for Bufs<'_> {
    fn bytes(&self, op: SendId) -> Option<&[u8]> {
        self.0.get(&op).map(|v| v.as_slice())
    }
}

struct Node {
    ep: Endpoint,
    prog: Prog,
    /// Zero-copy receive buffers.
    direct: HashMap<RecvId, Vec<u8>>,
    errors: Vec<String>,
    peak_retained: usize,
}

enum Seg {
    Frame(Header, Vec<u8>),
    Eof,
    /// The connection was reset (a dying listener's).
    Reset,
}

/// One direction of a connection: frames from `from` to `to`, read on `to`'s `conn`.
struct Pipe {
    to: usize,
    conn: ConnId,
    /// Incarnation of the reading node when the pipe was made (frames for a dead process go).
    gen: u64,
    q: VecDeque<(u64, Seg)>,
}

struct Sim {
    rng: Rng,
    n: usize,
    rounds: usize,
    mode: Mode,
    now: u64,
    nodes: Vec<Option<Node>>,
    /// Incarnation counter of each rank (bumped at every kill).
    gen: Vec<u64>,
    /// Until when a killed rank's listener still completes connects (its process is being
    /// torn down: the kernel finishes the connect, then resets the connection).
    dying_until: Vec<u64>,
    /// (node, its conn) -> pipe index it writes into.
    out: HashMap<(usize, u64, ConnId), usize>,
    pipes: Vec<Pipe>,
    disk: Vec<Option<Saved>>,
    next_op: u64,
    violations: Vec<String>,
    trace: Vec<String>,
}

fn d(us: u64) -> Duration {
    Duration::from_micros(us)
}

impl Sim {
    fn endpoint(&mut self, rank: usize) -> Endpoint {
        let mut cfg = EndpointConfig::new(rank, self.n, b"sim");
        cfg.eager_bytes = EAGER;
        cfg.inbox_messages = 4 + self.rng.below(16) as usize;
        cfg.inbox_bytes = 4096;
        cfg.outbox_bytes = 1 << 30;
        cfg.connect_timeout = d(50_000);
        cfg.probe_after = d(2_000);
        cfg.rndv_grace = d(100);
        cfg.rndv_grace_idle = d(500);
        cfg.linger = d(5_000);
        cfg.retain = Some(RetainConfig {
            cap_bytes: 1 << 30,
            restart_timeout: RESTART_TIMEOUT,
            nonce: self.rng.next() | 1,
        });
        Endpoint::new(cfg)
    }

    fn start(&mut self, rank: usize) {
        let ep = self.endpoint(rank);
        let (prog, token) = match (self.mode, &self.disk[rank]) {
            (Mode::Checkpoint(_), Some((round, state, token))) => {
                (Prog::new(*round, *state), Some(token.clone()))
            }
            _ => (Prog::new(0, rank as u64 + 1), None),
        };
        let mut node = Node {
            ep,
            prog,
            direct: HashMap::new(),
            errors: Vec::new(),
            peak_retained: 0,
        };
        if let Some(t) = token {
            if let Err(e) = node.ep.retain_resume(&t) {
                self.violations.push(format!("rank {rank}: resume: {e}"));
            }
        }
        self.nodes[rank] = Some(node);
    }

    fn kill(&mut self, rank: usize) {
        // In half the schedules its listener outlives it briefly (a dial in that window is
        // connected and then reset before any answer).
        let dying = if self.rng.below(2) == 0 {
            self.rng.below(400)
        } else {
            0
        };
        self.trace.push(format!(
            "{} kill {rank} (listener for {dying} us)",
            self.now
        ));
        self.dying_until[rank] = self.now + dying;
        self.nodes[rank] = None;
        self.gen[rank] += 1;
        // Its sockets close: frames it wrote still arrive, then the end of stream; frames to
        // it are lost with it.
        let mine: Vec<(usize, u64, ConnId)> =
            self.out.keys().filter(|k| k.0 == rank).copied().collect();
        for k in mine {
            if let Some(p) = self.out.remove(&k) {
                let at = self.pipes[p]
                    .q
                    .back()
                    .map_or(self.now, |s| s.0)
                    .max(self.now)
                    + 1;
                self.pipes[p].q.push_back((at, Seg::Eof));
            }
        }
    }

    fn delay(&mut self) -> u64 {
        1 + self.rng.below(40)
    }

    fn push(&mut self, pipe: usize, seg: Seg) {
        let at = self.now + self.delay();
        let at = self.pipes[pipe].q.back().map_or(at, |s| s.0.max(at));
        self.pipes[pipe].q.push_back((at, seg));
    }

    fn connect(&mut self, a: usize, ca: ConnId, b: usize) {
        let now = d(self.now);
        if self.nodes[b].is_none() && self.now < self.dying_until[b] {
            // The dying listener's kernel completes the connect; what `a` writes goes
            // nowhere, and the connection is reset before any answer.
            self.trace.push(format!(
                "{} {a} dials dying {b}: connected, then reset",
                self.now
            ));
            let void = self.pipes.len();
            self.pipes.push(Pipe {
                to: b,
                conn: ConnId(u64::MAX),
                gen: self.gen[b].wrapping_sub(1),
                q: VecDeque::new(),
            });
            let back = self.pipes.len();
            self.pipes.push(Pipe {
                to: a,
                conn: ca,
                gen: self.gen[a],
                q: VecDeque::new(),
            });
            self.out.insert((a, self.gen[a], ca), void);
            if let Some(na) = self.nodes[a].as_mut() {
                na.ep.on_connected(ca, now);
            }
            self.push(back, Seg::Reset);
            return;
        }
        let Some(nb) = self.nodes[b].as_mut() else {
            if let Some(na) = self.nodes[a].as_mut() {
                let _ = na.ep.on_connect_failed(
                    ca,
                    ConnectFailure::Refused("connection refused".into()),
                    now,
                );
            }
            return;
        };
        let cb = nb.ep.on_accepted(now);
        let ab = self.pipes.len();
        self.pipes.push(Pipe {
            to: b,
            conn: cb,
            gen: self.gen[b],
            q: VecDeque::new(),
        });
        let ba = self.pipes.len();
        self.pipes.push(Pipe {
            to: a,
            conn: ca,
            gen: self.gen[a],
            q: VecDeque::new(),
        });
        self.out.insert((a, self.gen[a], ca), ab);
        self.out.insert((b, self.gen[b], cb), ba);
        if let Some(na) = self.nodes[a].as_mut() {
            na.ep.on_connected(ca, now);
        }
    }

    /// Carries out what node `n`'s endpoint asked for.
    fn apply(&mut self, n: usize) {
        loop {
            let g = self.gen[n];
            let Some(node) = self.nodes[n].as_mut() else {
                return;
            };
            node.peak_retained = node
                .peak_retained
                .max(node.ep.retain_counters().map_or(0, |c| c.retained_bytes));
            let Some(a) = node.ep.poll_action() else {
                return;
            };
            match a {
                Action::Dial { conn, peer } => self.connect(n, conn, peer),
                Action::Transmit {
                    conn,
                    header,
                    payload,
                } => {
                    let bytes = match &payload {
                        Payload::None => Vec::new(),
                        Payload::Shared(v) => v.to_vec(),
                        Payload::Op(op, len) => {
                            match node.prog.sends.get(op).filter(|b| b.len() == *len) {
                                Some(b) => b.clone(),
                                None => {
                                    self.violations
                                        .push(format!("rank {n}: zero-copy of unknown {op:?}"));
                                    continue;
                                }
                            }
                        }
                    };
                    if let Payload::Op(op, _) = payload {
                        node.ep.on_op_written(op, d(self.now));
                    }
                    // Every frame must survive the wire codec.
                    let h = match Header::decode(&header.encode(), u64::MAX) {
                        Ok(h) => h,
                        Err(e) => {
                            self.violations.push(format!("rank {n}: bad frame {e}"));
                            continue;
                        }
                    };
                    if let Some(&p) = self.out.get(&(n, g, conn)) {
                        self.push(p, Seg::Frame(h, bytes));
                    }
                }
                Action::ShutdownWrite(conn) => {
                    if let Some(&p) = self.out.get(&(n, g, conn)) {
                        self.push(p, Seg::Eof);
                    }
                }
                Action::Close(conn) | Action::Drop(conn) => {
                    if let Some(p) = self.out.remove(&(n, g, conn)) {
                        self.push(p, Seg::Eof);
                    }
                }
                Action::SendDone(op) => {
                    node.prog.sends.remove(&op);
                }
                Action::RecvDone { op, data, len } => {
                    let bytes = match data {
                        Some(v) => v,
                        None => node.direct.remove(&op).unwrap_or_default(),
                    };
                    let ok_len = bytes.len() == len;
                    let slot_ok = match node.prog.recvs.get_mut(&op) {
                        Some((_, slot @ None)) => {
                            *slot = Some(bytes);
                            true
                        }
                        _ => false,
                    };
                    if !ok_len {
                        self.violations.push(format!("rank {n}: {op:?} length"));
                    }
                    if !slot_ok {
                        self.violations
                            .push(format!("rank {n}: completion of unknown or done {op:?}"));
                    }
                }
                Action::Failed(op, e) => {
                    node.errors.push(format!("{op:?}: {e}"));
                    if let OpRef::Recv(r) = op {
                        node.prog.recvs.remove(&r);
                    }
                    if let OpRef::Send(s) = op {
                        node.prog.sends.remove(&s);
                    }
                }
            }
        }
    }

    fn deliver(&mut self, pipe: usize, seg: Seg) {
        let (to, conn, gen) = {
            let p = &self.pipes[pipe];
            (p.to, p.conn, p.gen)
        };
        if self.gen[to] != gen {
            return;
        }
        let now = d(self.now);
        let Some(node) = self.nodes[to].as_mut() else {
            return;
        };
        match seg {
            Seg::Eof => node.ep.on_conn_lost(conn, Lost::Eof),
            Seg::Reset => node
                .ep
                .on_conn_lost(conn, Lost::Error("connection reset by peer".into())),
            Seg::Frame(h, bytes) => match node.ep.on_header(conn, h, now) {
                Sink::Done => {}
                Sink::Recv(op, len) => {
                    let mut b = bytes;
                    b.resize(len, 0);
                    node.direct.insert(op, b);
                    node.ep.on_payload(conn, Landed::Direct, now);
                }
                Sink::Owned(_) => node.ep.on_payload(conn, Landed::Owned(bytes), now),
                Sink::Discard(_) => node.ep.on_payload(conn, Landed::Discarded, now),
            },
        }
        self.apply(to);
    }

    /// Advances node `n`'s program as far as it can go now.
    fn step(&mut self, n: usize) {
        let now = d(self.now);
        let size = self.n;
        let (rounds, mode) = (self.rounds, self.mode);
        let Some(node) = self.nodes[n].as_mut() else {
            return;
        };
        let prog = &mut node.prog;
        if prog.finishing {
            if prog.result.is_none() {
                if let Some(r) = node.ep.finished() {
                    prog.result = Some(r.map_err(|e| e.to_string()));
                }
            }
            return;
        }
        if prog.posted {
            let all_in = prog.recvs.values().all(|(_, b)| b.is_some());
            if !all_in || !node.errors.is_empty() {
                return;
            }
            let mut got: Vec<(usize, Vec<u8>)> = prog
                .recvs
                .drain()
                .map(|(_, (p, b))| (p, b.unwrap_or_default()))
                .collect();
            got.sort();
            prog.state = fold(prog.state, &got);
            prog.round += 1;
            prog.posted = false;
            if let Mode::Checkpoint(every) = mode {
                if prog.round.is_multiple_of(every) {
                    let token = node.ep.retain_token();
                    self.disk[n] = Some((prog.round, prog.state, token));
                    node.ep.retain_checkpoint(now);
                }
            }
        }
        let prog = &mut node.prog;
        if prog.round >= rounds {
            if prog.sends.is_empty() {
                prog.finishing = true;
                node.ep.finish(None, now);
            }
            return;
        }
        // Post the round: sends to every peer, then receives from every peer.
        for peer in (0..size).filter(|&p| p != n) {
            let bytes = message(prog.state, n, peer, prog.round);
            self.next_op += 1;
            let op = SendId(self.next_op);
            let len = bytes.len();
            prog.sends.insert(op, bytes);
            match node
                .ep
                .post_send(op, peer, MsgKey::user(7), len, now, &Bufs(&prog.sends))
            {
                Ok(SendStatus::Done) => {
                    prog.sends.remove(&op);
                }
                Ok(SendStatus::Pending) => {}
                Err(e) => {
                    prog.sends.remove(&op);
                    node.errors.push(format!("post_send: {e}"));
                }
            }
        }
        for peer in (0..size).filter(|&p| p != n) {
            self.next_op += 1;
            let op = RecvId(self.next_op);
            prog.recvs.insert(op, (peer, None));
            if let Err(e) = node.ep.post_recv(op, peer, MsgKey::user(7), now) {
                prog.recvs.remove(&op);
                node.errors.push(format!("post_recv: {e}"));
            }
        }
        prog.posted = true;
    }

    fn tick(&mut self, n: usize) {
        let now = d(self.now);
        let Some(node) = self.nodes[n].as_mut() else {
            return;
        };
        let Node { ep, prog, .. } = node;
        let bufs = Bufs(&prog.sends);
        if ep.poll_timeout().is_some_and(|t| t <= now) {
            ep.handle_timeout(now, &bufs);
        }
        ep.progress(now, &bufs);
        self.apply(n);
        self.step(n);
        self.apply(n);
    }

    fn done(&self) -> bool {
        self.nodes
            .iter()
            .all(|n| n.as_ref().is_some_and(|n| n.prog.result.is_some()))
    }
}

pub struct Outcome {
    pub states: Vec<Option<u64>>,
    /// Each rank's answer to "am I a restart?" at the end.
    pub verdicts: Vec<Option<Option<bool>>>,
    /// Restarts of peers each rank saw.
    pub restarts_seen: Vec<u64>,
    pub results: Vec<Option<Result<(), String>>>,
    pub errors: Vec<Vec<String>>,
    pub peak_retained: usize,
    pub violations: Vec<String>,
    pub end_us: u64,
    pub trace: Vec<String>,
}

/// Runs one schedule: `kill` = (rank, at µs, restart after µs or never).
pub fn run(
    seed: u64,
    n: usize,
    rounds: usize,
    mode: Mode,
    kill: Option<(usize, u64, Option<u64>)>,
) -> Outcome {
    let mut sim = Sim {
        rng: Rng(seed),
        n,
        rounds,
        mode,
        now: 0,
        nodes: (0..n).map(|_| None).collect(),
        gen: vec![0; n],
        dying_until: vec![0; n],
        out: HashMap::new(),
        pipes: Vec::new(),
        disk: vec![None; n],
        next_op: 0,
        violations: Vec::new(),
        trace: Vec::new(),
    };
    for r in 0..n {
        sim.start(r);
    }
    let mut restart_at = None;
    let mut kill_handled = false;
    let mut peak = 0;
    let limit = 5_000_000u64;
    while sim.now < limit {
        if let Some((k, at, again)) = kill {
            if sim.now >= at && !kill_handled {
                kill_handled = true;
                let running = sim.nodes[k].as_ref().is_some_and(|x| !x.prog.finishing);
                if running {
                    if let Some(node) = sim.nodes[k].as_ref() {
                        peak = peak.max(node.peak_retained);
                    }
                    sim.kill(k);
                    restart_at = again.map(|a| sim.now + a);
                }
                // Otherwise too late: a rank that began to end is not killed (its peers may
                // be gone once it said DONE; see the module docs).
            }
        }
        if let (Some(t), Some((k, _, _))) = (restart_at, kill) {
            if sim.now >= t {
                sim.trace.push(format!("{} restart {k}", sim.now));
                sim.start(k);
                restart_at = None;
            }
        }
        // Deliver what is due, pipe by pipe in a random rotation.
        let np = sim.pipes.len();
        let first = sim.rng.below(np as u64 + 1) as usize;
        for i in 0..np {
            let p = (first + i) % np;
            while sim.pipes[p].q.front().is_some_and(|s| s.0 <= sim.now) {
                let (_, seg) = sim.pipes[p].q.pop_front().expect("front checked");
                sim.deliver(p, seg);
            }
        }
        for r in 0..n {
            sim.tick(r);
        }
        let dead_forever = kill.is_some_and(|(k, _, again)| again.is_none() && sim.gen[k] > 0);
        let finished = if dead_forever {
            (0..n).all(|r| {
                sim.nodes[r]
                    .as_ref()
                    .is_none_or(|x| x.prog.result.is_some() || !x.errors.is_empty())
            })
        } else {
            sim.done()
        };
        if finished {
            break;
        }
        sim.now += 1 + sim.rng.below(20);
    }
    for node in sim.nodes.iter().flatten() {
        peak = peak.max(node.peak_retained);
    }
    Outcome {
        verdicts: sim
            .nodes
            .iter()
            .map(|x| x.as_ref().map(|x| x.ep.restart_verdict()))
            .collect(),
        restarts_seen: sim
            .nodes
            .iter()
            .map(|x| {
                x.as_ref()
                    .and_then(|x| x.ep.retain_counters())
                    .map_or(0, |c| c.restarts_seen)
            })
            .collect(),
        states: sim
            .nodes
            .iter()
            .map(|x| x.as_ref().map(|x| x.prog.state))
            .collect(),
        results: sim
            .nodes
            .iter()
            .map(|x| x.as_ref().and_then(|x| x.prog.result.clone()))
            .collect(),
        errors: sim
            .nodes
            .iter()
            .map(|x| x.as_ref().map_or(Vec::new(), |x| x.errors.clone()))
            .collect(),
        peak_retained: peak,
        violations: sim.violations,
        end_us: sim.now,
        trace: sim.trace,
    }
}
