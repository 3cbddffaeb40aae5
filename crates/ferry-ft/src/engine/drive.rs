//! Running a program operation together with the control traffic of every communicator:
//! one combined exchange per round (the program's messages, a standing control receive from
//! each watched peer, the control messages being sent), progressed until something happens.

use std::time::{Duration, Instant};

use ferry_core::{Error, ErrorKind, Exchange, OpState, RecvBuf, RecvOp, Result, SendOp, Transport};

use super::{Engine, Interest, FLUSH_ROUNDS, MAX_REPEATS};

/// What one round of progress produced.
pub(super) enum Event {
    /// Something changed (a control message arrived or left, or the program's part is done).
    Progress,
    /// The transport failed.
    Error(Error),
}

impl Engine {
    /// Runs `user` to completion together with the control traffic, or until `interest` says
    /// it is interrupted. With `until`, runs until that holds instead (agreements: `user` is
    /// empty). An interrupted or failed `user` is abandoned in the transport.
    pub fn drive(
        &mut self,
        user: &mut Exchange<'_>,
        interest: &Interest,
        until: &dyn Fn(&Engine) -> bool,
    ) -> Result<()> {
        let policy = self.t.wait_policy();
        let start = Instant::now();
        let mut last_event = start;
        let mut repeats = 0;
        loop {
            if let Some(e) = self.interruption(interest) {
                tracing::debug!("rank {}: {} interrupted: {e}", self.me, interest.op);
                self.t.abandon_exchange(user, &e);
                return Err(e);
            }
            if user.is_complete() && until(self) {
                self.flush_sends();
                return Ok(());
            }
            if interest.timeout {
                if let Some(limit) = policy.timeout.filter(|&l| start.elapsed() >= l) {
                    let e = ferry_core::transport::operation_timeout_error(self.me, user, limit);
                    self.t.abandon_exchange(user, &e);
                    return Err(e);
                }
            }
            match self.round(user, &policy, &mut last_event) {
                Event::Progress => repeats = 0,
                Event::Error(e) => {
                    repeats += 1;
                    let e = if repeats > MAX_REPEATS {
                        Err(e)
                    } else {
                        self.absorb(user, e, interest)
                    };
                    if let Err(e) = e {
                        self.t.abandon_exchange(user, &e);
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Gives the control messages still queued a few chances to leave before the program
    /// goes off computing (peers may be waiting for an answer of a decided agreement).
    pub(super) fn flush_sends(&mut self) {
        for _ in 0..FLUSH_ROUNDS {
            if self.out.iter().all(|o| o.state == OpState::Done) {
                break;
            }
            let mut empty = Exchange::new();
            let mut mark = Instant::now();
            let policy = ferry_core::WaitPolicy {
                spin: Duration::ZERO,
                ..self.t.wait_policy()
            };
            if let Event::Error(e) = self.round(&mut empty, &policy, &mut mark) {
                if e.kind() == ErrorKind::Revoked {
                    // A message withdrawn for a receive abandoned before (see `absorb`).
                    continue;
                }
                if let Some(p) = e.peer().filter(|&p| p != self.me && p < self.t.size()) {
                    if !self.left.contains(&p) && e.is_peer_failure() {
                        self.note_failure(p, None, None);
                    }
                    // Whatever it was, nothing more goes to that rank from here.
                    self.watch.remove(&p);
                    self.out.retain(|o| o.peer != p);
                } else {
                    break;
                }
            }
        }
    }

    /// One round: builds the combined exchange, progresses it until something happens, then
    /// hands completed control messages to the protocols and keeps the states.
    fn round(
        &mut self,
        user: &mut Exchange<'_>,
        policy: &ferry_core::WaitPolicy,
        last_event: &mut Instant,
    ) -> Event {
        let n_sends = user.sends.len();
        let n_recvs = user.recvs.len();
        let key = self.ctl_key;
        let Engine { t, watch, out, .. } = self;
        let peers: Vec<usize> = watch.keys().copied().collect();
        let (result, send_states, recv_states) = {
            let mut comb = Exchange::new();
            for s in user.sends.iter() {
                comb.sends.push(SendOp {
                    peer: s.peer,
                    key: s.key,
                    data: s.data,
                    state: s.state,
                });
            }
            for o in out.iter() {
                comb.sends.push(SendOp {
                    peer: o.peer,
                    key,
                    data: &o.data,
                    state: o.state,
                });
            }
            for r in user.recvs.iter_mut() {
                let buf = match &mut r.buf {
                    RecvBuf::Vec(v) => RecvBuf::Vec(v),
                    RecvBuf::Slice(s) => RecvBuf::Slice(s),
                };
                comb.recvs.push(RecvOp {
                    peer: r.peer,
                    key: r.key,
                    buf,
                    state: r.state,
                });
            }
            for (p, w) in watch.iter_mut() {
                comb.recvs.push(RecvOp {
                    peer: *p,
                    key,
                    buf: RecvBuf::Vec(&mut w.buf),
                    state: w.state,
                });
            }
            let result =
                progress_until_event(&mut **t, &mut comb, n_sends, n_recvs, policy, last_event);
            let send_states: Vec<OpState> = comb.sends.iter().map(|s| s.state).collect();
            let recv_states: Vec<OpState> = comb.recvs.iter().map(|r| r.state).collect();
            (result, send_states, recv_states)
        };
        for (s, st) in user.sends.iter_mut().zip(&send_states) {
            s.state = *st;
        }
        for (r, st) in user.recvs.iter_mut().zip(&recv_states) {
            r.state = *st;
        }
        for (o, st) in out.iter_mut().zip(&send_states[n_sends..]) {
            o.state = *st;
        }
        out.retain(|o| o.state != OpState::Done);
        let mut arrived = Vec::new();
        for (p, st) in peers.iter().zip(&recv_states[n_recvs..]) {
            if let Some(w) = watch.get_mut(p) {
                w.state = *st;
                if *st == OpState::Done {
                    arrived.push((*p, std::mem::take(&mut w.buf)));
                    w.state = OpState::New;
                }
            }
        }
        for (from, msg) in arrived {
            self.on_control(from, msg);
        }
        result
    }
}

/// Progresses `comb` until the program's part (the first `n_sends`/`n_recvs` operations)
/// completes, a control operation completes, or the transport fails; sleeps in the
/// transport when nothing moves after the polling budget.
fn progress_until_event(
    t: &mut dyn Transport,
    comb: &mut Exchange<'_>,
    n_sends: usize,
    n_recvs: usize,
    policy: &ferry_core::WaitPolicy,
    last_event: &mut Instant,
) -> Event {
    let ctl_pending = |c: &Exchange<'_>| {
        (
            c.sends[n_sends..]
                .iter()
                .filter(|s| s.state != OpState::Done)
                .count(),
            c.recvs[n_recvs..]
                .iter()
                .filter(|r| r.state != OpState::Done)
                .count(),
        )
    };
    let user_done = |c: &Exchange<'_>| {
        c.sends[..n_sends].iter().all(|s| s.state == OpState::Done)
            && c.recvs[..n_recvs].iter().all(|r| r.state == OpState::Done)
    };
    let before = ctl_pending(comb);
    let was_done = user_done(comb);
    let mut polls: u32 = 0;
    loop {
        if let Err(e) = t.progress_exchange(comb) {
            return Event::Error(e);
        }
        if ctl_pending(comb) != before || (user_done(comb) && !was_done) {
            *last_event = Instant::now();
            return Event::Progress;
        }
        polls = polls.wrapping_add(1);
        if last_event.elapsed() < policy.spin {
            std::hint::spin_loop();
            if policy.yield_each_poll || (policy.spin_yields && polls.is_multiple_of(64)) {
                std::thread::yield_now();
            }
        } else if let Err(e) = t.wait_for_input(Duration::from_millis(10)) {
            return Event::Error(e);
        } else if polls > 1 {
            // Blocked waits return to the caller now and then so that timeouts are seen.
            return Event::Progress;
        }
    }
}
