//! The simulated network and the driver's side of it: events in virtual time, frames queued,
//! held back by a full socket and delivered in order per connection, dials, resets, strangers,
//! the kill, and the event loop.

use super::*;

impl Sim {
    pub(crate) fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        let id = self.seq as usize;
        self.events.insert(id, ev);
        self.queue.push(Reverse((at, self.seq, id)));
    }

    pub(crate) fn violation(&mut self, what: String) {
        if self.violations.len() < 8 {
            self.violations.push(format!("t={}us: {what}", self.now));
        }
    }

    pub(crate) fn send_seg(&mut self, pipe: usize, seg: Seg) {
        let delay = match self.rng.below(10) {
            0 => 200 + self.rng.below(3000),
            _ => 5 + self.rng.below(100),
        };
        let at = (self.now + delay).max(self.pipes[pipe].last);
        self.pipes[pipe].last = at;
        self.schedule(at, Ev::Deliver { pipe, seg });
    }

    /// Executes what node `n`'s endpoint asks for.
    pub(crate) fn drain(&mut self, n: usize) {
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
    pub(crate) fn flush(&mut self, n: usize) {
        let mut mine = Vec::new();
        self.queued.retain_mut(|q| {
            if q.0 == n {
                mine.push((q.2, std::mem::replace(&mut q.3, Seg::Fin)));
                false
            } else {
                true
            }
        });
        if !mine.is_empty() {
            self.nodes[n].ep.on_written(d(self.now));
        }
        for (p, seg) in mine {
            self.send_seg(p, seg);
        }
    }

    /// Held frames of send `op` of node `n` take a copy of its bytes (the driver does so
    /// when the send is abandoned: its buffer is the program's again).
    pub(crate) fn detach_held(&mut self, n: usize, op: SendId) {
        let Some(bytes) = self.nodes[n].sends.get(&op).map(|s| s.0.clone()) else {
            return;
        };
        let copy = std::sync::Arc::new(bytes);
        self.share_held(n, op, &copy);
    }

    pub(crate) fn share_held(&mut self, n: usize, op: SendId, data: &std::sync::Arc<Vec<u8>>) {
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
    pub(crate) fn write_held(&mut self, n: usize) {
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
            self.nodes[n].ep.on_written(now);
        }
        self.drain(n);
    }

    /// The call of node `n` that posted its sends returns (see [`Ev::CallEnds`]).
    pub(crate) fn call_ends(&mut self, n: usize) {
        if !self.nodes[n].alive {
            return;
        }
        let now = d(self.now);
        if let Some(t) = self.nodes[n].ep.eager_release_at().filter(|&t| t > now) {
            // The call waits for the answers of its TRYs a while longer (serving the
            // connections meanwhile, as every node here always does), but never longer than
            // one gap between answers from now (the hold and the time to read what it still
            // holds).
            let node = &self.nodes[n];
            let borrowed: u64 = node
                .sends
                .iter()
                .filter(|(op, s)| s.1 == OpStatus::Pending && node.ep.is_eager_borrowed(**op))
                .map(|(_, s)| s.0.len() as u64)
                .sum();
            let cfg = node.ep.config();
            let reading = match cfg.eager_hold_rate {
                0 => Duration::ZERO,
                rate => Duration::from_nanos(borrowed * 1_000_000_000 / rate),
            };
            if t > now + cfg.eager_hold + reading {
                let what = format!("rank {n}: TRY sends held until {t:?} at {now:?}");
                self.violation(what);
            }
            let at = t.as_nanos().div_ceil(1000) as u64;
            self.schedule(at, Ev::CallEnds(n));
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
    pub(crate) fn close_reading(&mut self, n: usize, conn: ConnId) {
        for pipe in self.pipes.iter_mut() {
            if pipe.to == (n, Some(conn)) {
                pipe.closed = true;
            }
        }
    }

    pub(crate) fn connect(&mut self, a: usize, ca: ConnId, b: usize) {
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

    pub(crate) fn deliver(&mut self, pipe: usize, seg: Seg) {
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

    pub(crate) fn ghost(&mut self, n: usize, claims: usize) {
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

    pub(crate) fn kill(&mut self, k: usize) {
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

    pub(crate) fn run(&mut self, limit_us: u64) {
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
