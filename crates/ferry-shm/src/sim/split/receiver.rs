//! The simulated receiver of split copies: claiming descriptors, offering parts, reading,
//! polling and withdrawing offers, settling a failed exchange.

use super::*;

impl SplitSim {
    pub(in crate::sim) fn receiver_step(&mut self) -> Result<(), Violation> {
        if self.phase[RECEIVER] == Phase::Settling {
            return self.receiver_settle_step();
        }
        match self.rng.below(6) {
            0 | 1 => self.take_step(),
            2 => self.read_step(),
            3 => self.poll_step(),
            4 => self.receiver_check(),
            _ => self.foreign_step(),
        }
    }

    /// Takes the descriptor at the head of the receiver's ring.
    fn take_step(&mut self) -> Result<(), Violation> {
        let Some(e) = self.r_rx.peek() else {
            return Ok(());
        };
        if e.typ != T_CMA {
            return Err(Violation(format!(
                "entry of type {} in the descriptor ring",
                e.typ
            )));
        }
        let mut raw = [0u8; CMA_DESC];
        self.r_rx.read_payload(&mut raw);
        self.r_rx.pop();
        let d = decode_cma(&raw);
        let m = e.key.tag as usize;
        let b = self.batch_of[m];
        if self.given_up[m] || b < self.batch[RECEIVER] {
            self.drop_descriptor(m, d);
        } else if b > self.batch[RECEIVER] {
            self.pending.insert(m, d);
        } else {
            self.claim_into(m, d)?;
        }
        Ok(())
    }

    /// A descriptor whose receive was given up: completed unread (`drop_descriptor`).
    fn drop_descriptor(&mut self, m: usize, d: CmaDesc) {
        match ring::claim(self.dword(d.seq), d.seq) {
            Claim::Got => {
                ring::complete(self.dword(d.seq), d.seq);
                self.cov.dropped += 1;
            }
            Claim::Withdrawn => {
                self.frags.remove(&m);
            }
            Claim::Aborted => {}
        }
    }

    /// Claims descriptor `d` of message `m` for its posted receive and offers the first part
    /// of the receive buffer (`try_split`), or reads it whole when the offer cannot go out.
    fn claim_into(&mut self, m: usize, d: CmaDesc) -> Result<(), Violation> {
        match ring::claim(self.dword(d.seq), d.seq) {
            Claim::Got => {}
            Claim::Withdrawn => {
                self.recvs[m] = Recv::AwaitFrag;
                return Ok(());
            }
            Claim::Aborted => {
                self.fail(RECEIVER, Cause::SenderGaveUp);
                return Ok(());
            }
        }
        let len = d.len as usize;
        let half = offer::split_point(len, PAGE);
        let seq = self.r_seq;
        if half > 0 && window_free(&self.offer_ring.ring, seq) {
            let o = WriteOffer {
                desc: d.seq,
                addr: name(m, self.rbuf[m].generation),
                len: half as u64,
                seq,
            };
            let e = Entry {
                typ: T_WRITE,
                key: MsgKey::new(0, MsgKind::DATA, 0),
                serial: 0,
                total_len: 0,
            };
            if self.r_tx.push(&e, &encode_write(&o)) {
                self.r_seq += 1;
                self.cov.offers += 1;
                let idle_after = self.rng.below(10) as u32;
                self.recvs[m] = Recv::Split {
                    d,
                    o,
                    own_read: false,
                    polls: 0,
                    idle_after,
                };
                return Ok(());
            }
        } else if half > 0 {
            self.cov.window_full += 1;
        }
        self.cov.whole_reads += 1;
        self.recvs[m] = Recv::Reading(d);
        Ok(())
    }

    /// One read of the receiver's: a whole message, or its own part of a split one.
    fn read_step(&mut self) -> Result<(), Violation> {
        let Some(m) = self.range(RECEIVER).find(|&m| {
            matches!(
                self.recvs[m],
                Recv::Reading(_)
                    | Recv::Split {
                        own_read: false,
                        ..
                    }
            )
        }) else {
            return Ok(());
        };
        match self.recvs[m] {
            Recv::Reading(d) => {
                let got = self.read_send(d.addr, 0..d.len as usize)?;
                // Completed even when the read failed, so that the sender does not wait.
                ring::complete(self.dword(d.seq), d.seq);
                match got {
                    Some(bytes) => {
                        self.rbuf[m].bytes.copy_from_slice(&bytes);
                        self.whole[m] += 1;
                        self.recvs[m] = Recv::Delivered;
                    }
                    None => {
                        self.recvs[m] = Recv::Failed;
                        self.fail(RECEIVER, Cause::PeerDied(SENDER));
                    }
                }
            }
            Recv::Split {
                d,
                o,
                polls,
                idle_after,
                ..
            } => {
                let (half, len) = (o.len as usize, d.len as usize);
                match self.read_send(d.addr, half..len)? {
                    Some(bytes) => {
                        self.rbuf[m].bytes[half..].copy_from_slice(&bytes);
                        self.second[m] += 1;
                        self.recvs[m] = Recv::Split {
                            d,
                            o,
                            own_read: true,
                            polls,
                            idle_after,
                        };
                    }
                    // The split stays: settling takes the offer back.
                    None => self.fail(RECEIVER, Cause::PeerDied(SENDER)),
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Polls one split whose own part is read (`progress_splits`).
    fn poll_step(&mut self) -> Result<(), Violation> {
        let splits: Vec<usize> = self
            .range(RECEIVER)
            .filter(|&m| matches!(self.recvs[m], Recv::Split { own_read: true, .. }))
            .collect();
        if splits.is_empty() {
            return Ok(());
        }
        let m = splits[self.rng.below(splits.len() as u64) as usize];
        let Recv::Split {
            d,
            o,
            own_read,
            polls,
            idle_after,
        } = self.recvs[m]
        else {
            return Ok(());
        };
        let sender_alive = !self.dead[SENDER];
        match offer::poll(self.oword(o.seq), o.seq, polls >= idle_after, || {
            sender_alive
        }) {
            Poll::Written => {
                ring::complete(self.dword(d.seq), d.seq);
                self.recvs[m] = Recv::Delivered;
            }
            Poll::ReadItYourself { withdrawn_here } => {
                if withdrawn_here {
                    self.cov.idle_withdrawn += 1;
                    self.win(o.seq, false)?;
                }
                let half = o.len as usize;
                if self.bug == Bug::CompleteBeforeOwnRead {
                    ring::complete(self.dword(d.seq), d.seq);
                    self.recvs[m] = Recv::LateRead(d, o);
                    return Ok(());
                }
                let got = self.read_send(d.addr, 0..half)?;
                ring::complete(self.dword(d.seq), d.seq);
                match got {
                    Some(bytes) => {
                        self.rbuf[m].bytes[..half].copy_from_slice(&bytes);
                        self.first[m] += 1;
                        self.recvs[m] = Recv::Delivered;
                    }
                    None => {
                        self.recvs[m] = Recv::Failed;
                        self.fail(RECEIVER, Cause::PeerDied(SENDER));
                    }
                }
            }
            Poll::Wait => {
                if ring::offer_state(self.oword(o.seq), o.seq) == Offer::Claimed {
                    self.cov.waited_for_writer += 1;
                }
                self.recvs[m] = Recv::Split {
                    d,
                    o,
                    own_read,
                    polls: polls.saturating_add(1),
                    idle_after,
                };
            }
            Poll::WriterDied => {
                self.cov.writer_died += 1;
                self.fail(RECEIVER, Cause::PeerDied(SENDER));
            }
        }
        Ok(())
    }

    /// The receiver drives another exchange (the program has several): `progress_splits`
    /// meets the current exchange's splits as foreign ones, and when that exchange fails,
    /// settling it leaves them alone.
    fn foreign_step(&mut self) -> Result<(), Violation> {
        if self.rng.below(8) == 0
            && self
                .range(RECEIVER)
                .any(|m| matches!(self.recvs[m], Recv::Split { own_read: true, .. }))
        {
            self.cov.foreign_failures += 1;
            if self.bug == Bug::SettleEverySplit {
                let alive = !self.dead[SENDER];
                for m in self.range(RECEIVER) {
                    if let Recv::Split {
                        d,
                        o,
                        own_read: true,
                        ..
                    } = self.recvs[m]
                    {
                        if offer::take_back(self.oword(o.seq), o.seq, || alive) != TakeBack::Wait {
                            ring::complete(self.dword(d.seq), d.seq);
                            self.recvs[m] = Recv::Orphaned;
                        }
                    }
                }
            }
            return Ok(());
        }
        for m in self.range(RECEIVER) {
            let Recv::Split {
                d,
                o,
                own_read: true,
                polls,
                idle_after,
            } = self.recvs[m]
            else {
                continue;
            };
            let finished = if self.bug == Bug::DropForeignSplit {
                let alive = !self.dead[SENDER];
                match offer::poll(self.oword(o.seq), o.seq, polls >= idle_after, || alive) {
                    Poll::Written => true,
                    Poll::ReadItYourself { withdrawn_here } => {
                        if withdrawn_here {
                            self.win(o.seq, false)?;
                        }
                        true
                    }
                    _ => false,
                }
            } else {
                offer::finish_elsewhere(self.oword(o.seq), o.seq)
            };
            if finished {
                ring::complete(self.dword(d.seq), d.seq);
                self.cov.done_elsewhere += 1;
                self.recvs[m] = if self.bug == Bug::DropForeignSplit {
                    Recv::Orphaned
                } else {
                    Recv::DoneElsewhere
                };
            }
        }
        Ok(())
    }

    /// Claims the descriptors kept for the current exchange, takes fragments, returns when
    /// the exchange is complete, and runs the liveness check while it waits.
    fn receiver_check(&mut self) -> Result<(), Violation> {
        for m in self.range(RECEIVER) {
            if let Recv::LateRead(d, o) = self.recvs[m] {
                // Bug::CompleteBeforeOwnRead: the sender may have its buffer back by now.
                let half = o.len as usize;
                if let Some(bytes) = self.read_send(d.addr, 0..half)? {
                    self.rbuf[m].bytes[..half].copy_from_slice(&bytes);
                    self.first[m] += 1;
                }
                self.recvs[m] = Recv::Delivered;
            }
        }
        let r = self.range(RECEIVER);
        let now: Vec<(usize, CmaDesc)> = self
            .pending
            .range(r.clone())
            .map(|(&m, &d)| (m, d))
            .collect();
        for (m, d) in now {
            self.pending.remove(&m);
            if self.recvs[m] == Recv::Waiting {
                self.claim_into(m, d)?;
            }
        }
        for m in r.clone() {
            if self.recvs[m] == Recv::DoneElsewhere {
                self.recvs[m] = Recv::Delivered;
            }
            if self.recvs[m] == Recv::AwaitFrag {
                if let Some(bytes) = self.frags.remove(&m) {
                    self.rbuf[m].bytes.copy_from_slice(&bytes);
                    self.whole[m] += 1;
                    self.recvs[m] = Recv::Delivered;
                }
            }
        }
        if self.phase[RECEIVER] != Phase::Running || self.finished(RECEIVER) {
            return Ok(());
        }
        if r.clone().all(|m| self.recvs[m] == Recv::Delivered) {
            return self.receiver_returns();
        }
        if r.clone().any(|m| {
            self.recvs[m] == Recv::Waiting
                && self.sends[m] == Send::NotYet
                && self.batch[SENDER] > self.batch_of[m]
        }) {
            // Its sender's exchange failed before the message went out, and it never will: the
            // program gives the receive up (a revoke), this backend cannot know.
            self.fail(RECEIVER, Cause::Abandoned);
            return Ok(());
        }
        if self.dead[SENDER] && !self.r_rx.has_data() {
            // `check_liveness`: fails unless something the dead sender published is still to
            // be taken (a finished or given-back offer).
            let ready = r.clone().any(|m| match self.recvs[m] {
                Recv::Reading(_)
                | Recv::Split {
                    own_read: false, ..
                } => true,
                Recv::Split { o, .. } => {
                    ring::offer_state(self.oword(o.seq), o.seq) != Offer::Open
                        && ring::offer_state(self.oword(o.seq), o.seq) != Offer::Claimed
                }
                _ => false,
            });
            if !ready {
                self.fail(RECEIVER, Cause::PeerDied(SENDER));
            }
        }
        Ok(())
    }

    /// Settles a failed exchange (`settle_splits`): each offer taken back or waited for, the
    /// sender's descriptors completed; then the receiver returns.
    fn receiver_settle_step(&mut self) -> Result<(), Violation> {
        let sender_alive = !self.dead[SENDER];
        for m in self.range(RECEIVER) {
            match self.recvs[m] {
                Recv::Split { d, o, .. } => {
                    let t = if self.bug == Bug::ReturnWithoutTakeBack {
                        TakeBack::Settled
                    } else {
                        offer::take_back(self.oword(o.seq), o.seq, || sender_alive)
                    };
                    match t {
                        TakeBack::Wait => continue,
                        TakeBack::Withdrawn => {
                            self.cov.taken_back += 1;
                            self.win(o.seq, false)?;
                        }
                        TakeBack::Settled | TakeBack::PeerDead => {}
                    }
                    ring::complete(self.dword(d.seq), d.seq);
                    self.recvs[m] = Recv::Failed;
                }
                Recv::Reading(d) => {
                    ring::complete(self.dword(d.seq), d.seq);
                    self.recvs[m] = Recv::Failed;
                }
                Recv::Waiting
                | Recv::AwaitFrag
                | Recv::LateRead(..)
                | Recv::DoneElsewhere
                | Recv::Orphaned => self.recvs[m] = Recv::Failed,
                Recv::Delivered | Recv::Failed => {}
            }
        }
        if self
            .range(RECEIVER)
            .any(|m| matches!(self.recvs[m], Recv::Split { .. }))
        {
            return Ok(());
        }
        self.receiver_returns()
    }

    /// The receiver returns from its exchange (complete or failed): what it received is
    /// checked and handed to the program, which reuses the buffers.
    fn receiver_returns(&mut self) -> Result<(), Violation> {
        for m in self.range(RECEIVER) {
            let (f, s, w) = (self.first[m], self.second[m], self.whole[m]);
            if f > 1 || s > 1 || w > 1 || (w == 1 && f + s > 0) {
                return Err(Violation(format!(
                    "message {m}: offered part copied {f} times, the rest {s} times, whole {w} \
                     times"
                )));
            }
            if self.recvs[m] == Recv::Delivered {
                let whole = f == 1 && s == 1 || w == 1 && f + s == 0;
                if !whole {
                    return Err(Violation(format!(
                        "message {m} delivered with its offered part copied {f} times, the \
                         rest {s} times, whole {w} times"
                    )));
                }
                let got = self.rbuf[m].bytes.clone();
                if got != content(m, self.len[m]) {
                    return Err(Violation(format!("message {m} delivered with wrong bytes")));
                }
                self.delivered.insert(m, got);
            } else {
                self.given_up[m] = true;
                if let Some(d) = self.pending.remove(&m) {
                    self.drop_descriptor(m, d);
                }
            }
            self.rbuf[m].reuse();
        }
        self.batch[RECEIVER] += 1;
        self.phase[RECEIVER] = Phase::Running;
        Ok(())
    }
}
