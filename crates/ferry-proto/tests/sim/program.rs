//! The programs on the simulated ranks: posting their scripted operations, completions and
//! failures checked against the killed rank, progress and timers, finishing, quitting after
//! a failure, operation timeouts and abandoned operations.

use super::*;

impl Sim {
    /// Checks that a failure of rank `n`'s operation names the killed rank. `sending`: a send
    /// or finish, which may also fail because its receiver gave the receive up and ended.
    pub(crate) fn check_failure(
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

    pub(crate) fn complete_send(
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

    pub(crate) fn complete_recv(
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

    pub(crate) fn arm_timer(&mut self, n: usize) {
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

    pub(crate) fn progress(&mut self, n: usize) {
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

    pub(crate) fn maybe_finish(&mut self, n: usize) {
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

    pub(crate) fn step(&mut self, n: usize) {
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
    pub(crate) fn quit(&mut self, n: usize) {
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
    pub(crate) fn time_out(&mut self, n: usize) {
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
    pub(crate) fn abandon_one(&mut self, n: usize) {
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
}
