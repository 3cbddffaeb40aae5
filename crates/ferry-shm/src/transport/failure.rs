//! Waiting for peers, noticing that they died or left (pidfds, the per-rank "failed because
//! of" word), and making a failed operation safe to return from (settling its sends).

use super::*;
use crate::ring::offer::TakeBack;

impl ShmTransport {
    // ----- waiting and liveness ------------------------------------------------------------

    pub(super) fn input_ready(&mut self) -> bool {
        if self.discover_senders() {
            return true;
        }
        if self
            .active_rx
            .iter()
            .any(|&l| self.rx[l].as_ref().is_some_and(|c| c.has_data()))
        {
            return true;
        }
        for &(l, seq) in &self.want_acks {
            if let Some(tx) = &self.tx[l] {
                if tx.ring().ack(seq).load(Ordering::Acquire) == seq + 1 {
                    return true;
                }
            }
        }
        for i in 0..self.want_space.len() {
            let l = self.want_space[i];
            if let Some(tx) = self.tx[l].as_mut() {
                if tx.has_space() {
                    return true;
                }
            }
        }
        false
    }

    /// Whether peer `l` published something this rank waits for (a message, a completion,
    /// ring space) that progress has not taken yet.
    pub(super) fn peer_ready(&mut self, l: usize) -> bool {
        if self.rx[l].as_ref().is_some_and(|c| c.has_data()) {
            return true;
        }
        if let Some(tx) = self.tx[l].as_ref() {
            if self
                .want_acks
                .iter()
                .any(|&(p, seq)| p == l && tx.ring().ack(seq).load(Ordering::Acquire) == seq + 1)
            {
                return true;
            }
        }
        if self.want_space.contains(&l) {
            if let Some(tx) = self.tx[l].as_mut() {
                return tx.has_space();
            }
        }
        false
    }

    /// Whether the process behind segment index `l` runs (threads of this process always do).
    pub(super) fn peer_alive(&self, l: usize) -> bool {
        match &self.watch[l] {
            Some(w) => w.alive(),
            // A peer without an open ring has no pidfd yet (see `note_ring`).
            None if self.seg.shared && l != self.me => sys::pid_alive(self.pids[l]),
            None => true,
        }
    }

    /// The rank to name for a failure of segment index `l`: the rank whose failure `l`
    /// recorded as the reason it ended, else `l` itself.
    pub(super) fn root_cause(&self, l: usize) -> usize {
        match self.seg.blame(l).load(Ordering::Acquire) {
            0 => self.global_of[l],
            x => (x - 1) as usize,
        }
    }

    /// ", after rank X failed" when `l` ended because of X.
    pub(super) fn blame_note(&self, l: usize) -> String {
        match self.seg.blame(l).load(Ordering::Acquire) {
            0 => String::new(),
            x => format!(" (rank {} failed first)", x - 1),
        }
    }

    pub(super) fn trouble(&self, l: usize) -> Option<PeerTrouble> {
        let state = self.seg.state(l).load(Ordering::Acquire);
        let pid = self.pids[l];
        if state == STATE_GONE {
            return Some(PeerTrouble::Left);
        }
        if !self.peer_alive(l) {
            if state == STATE_FINISHED {
                return Some(PeerTrouble::Finished);
            }
            return Some(PeerTrouble::Died(pid));
        }
        if state == STATE_FINISHED {
            return Some(PeerTrouble::Finished);
        }
        None
    }

    /// Runs the liveness check when it is due (every `LIVENESS_EVERY`); for callers that wait
    /// elsewhere (the hybrid backend blocked in TCP's poll).
    pub fn check_liveness_if_due(&mut self) -> Result<()> {
        if self.last_liveness.elapsed() >= LIVENESS_EVERY {
            self.check_liveness()?;
        }
        Ok(())
    }

    /// Fails if a rank this rank waits for died or finished (T5).
    pub(super) fn check_liveness(&mut self) -> Result<()> {
        self.last_liveness = Instant::now();
        self.waiting.sort_unstable();
        self.waiting.dedup();
        // A crashed rank is the root cause; ranks that left because of it come second.
        let mut worst: Option<(usize, PeerTrouble)> = None;
        for i in 0..self.waiting.len() {
            let l = self.waiting[i];
            if l == self.me {
                continue;
            }
            // The peer's state is read first: whatever it published before finishing or
            // leaving (messages, completions, ring space) is then visible to peer_ready, and
            // progress will take it; only a peer with nothing left for us is reported.
            if let Some(t) = self.trouble(l) {
                if self.peer_ready(l) {
                    continue;
                }
                let died = matches!(t, PeerTrouble::Died(_));
                if worst.is_none() || died {
                    worst = Some((l, t));
                }
                if died {
                    break;
                }
            }
        }
        {
            if let Some((l, t)) = worst {
                if let PeerTrouble::Died(pid) = t {
                    // Its regions are gone with it: do not keep their memory mapped.
                    self.heap_maps.forget(pid);
                }
                let peer = self.global_of[l];
                let root = self.root_cause(l);
                let detail = if root != peer {
                    // `l` ended because `root` failed: name the root cause (issue 06 item 9).
                    let how = match t {
                        PeerTrouble::Died(_) => "exited",
                        PeerTrouble::Finished => "finished",
                        PeerTrouble::Left => "left the job",
                    };
                    format!("rank {peer} {how} after rank {root} failed")
                } else {
                    match t {
                        PeerTrouble::Died(pid) => format!("rank {peer} (pid {pid}) died"),
                        PeerTrouble::Finished => format!(
                            "rank {peer} finished without sending or receiving what this rank \
                             waits for"
                        ),
                        PeerTrouble::Left => {
                            format!("rank {peer} left the job (its transport was dropped)")
                        }
                    }
                };
                return Err(self
                    .err(ErrorKind::PeerFailed, "exchange")
                    .with_peer(root)
                    .with_detail(detail));
            }
        }
        Ok(())
    }

    // ----- after a failed operation ----------------------------------------------------------

    /// Makes a failed exchange safe to return from, and records why this rank fails.
    ///
    /// No use after failure (issue 05): every single-copy descriptor of `ex` still offered to
    /// a peer points into the caller's buffer, which the caller may reuse or free once the
    /// error is returned. Each is withdrawn (marked aborted, so the receiver fails instead of
    /// waiting for fragments), or, if the peer has claimed it and is copying right now, waited
    /// for until the peer completes it or dies. Receives expose nothing to peers (a receiver
    /// copies into its own buffer), so they need no settling.
    ///
    /// If the failure is a peer's, this rank records that peer in its block so that ranks
    /// waiting for this one name it rather than this rank when it ends.
    ///
    /// Public for transports that drive the shm part of an exchange themselves (hybrid): call
    /// it with the exchange and error whenever such an exchange fails.
    pub fn settle_failed(&mut self, ex: &mut Exchange<'_>, err: &Error) {
        // Receive buffers offered to senders (split single copy) are exposed too.
        if !self.splits.is_empty() {
            self.settle_splits(ex);
        }
        for i in 0..ex.sends.len() {
            let s = &mut ex.sends[i];
            let OpState::Active { serial, progress } = s.state else {
                continue;
            };
            let Some(l) = self.local_of.get(s.peer).copied().flatten() else {
                continue;
            };
            if progress & SETTLED != 0 {
                continue;
            }
            s.state = OpState::Active {
                serial,
                progress: progress | SETTLED,
            };
            let single_copy =
                self.by_single_copy(s.data) && progress & FORCED_FRAG == 0 && progress != 0;
            if l == self.me {
                continue;
            }
            let (key, len) = (s.key, s.data.len() as u64);
            if single_copy {
                self.withdraw_or_wait(l, progress as u64 - 1);
            } else if self.frag_owner[l] == Some((key, serial)) || progress == FORCED_FRAG {
                // The receiver holds part of this message, or waits for the fragments of a
                // withdrawn descriptor: tell it that nothing more comes.
                if self.frag_owner[l] == Some((key, serial)) {
                    self.frag_owner[l] = None;
                }
                self.abort_pending[l].push((key, serial, len));
                if !self.flush_abort(l) {
                    self.aborts_queued = true;
                }
            }
        }
        if err.is_peer_failure() && !self.tolerant {
            if let Some(peer) = err.peer().filter(|&p| p != self.rank) {
                let _ = self.seg.blame(self.me).compare_exchange(
                    0,
                    peer as u64 + 1,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
            }
        }
    }

    /// Retries every queued abort entry (see `aborts_queued`).
    pub(super) fn flush_aborts(&mut self) {
        let mut left = false;
        for l in 0..self.abort_pending.len() {
            left |= !self.flush_abort(l);
        }
        self.aborts_queued = left;
    }

    /// Pushes the abort entries pending for `l`; false if the ring has no room for all yet.
    pub(super) fn flush_abort(&mut self, l: usize) -> bool {
        if self.abort_pending[l].is_empty() {
            return true;
        }
        let Some(tx) = self.tx[l].as_mut() else {
            return true;
        };
        let mut pushed = 0;
        for &(key, serial, len) in &self.abort_pending[l] {
            let e = Entry {
                typ: T_ABORT,
                key,
                serial,
                total_len: len,
            };
            if !tx.push(&e, &[]) {
                break;
            }
            pushed += 1;
        }
        self.abort_pending[l].drain(..pushed);
        if pushed > 0 {
            self.wake(l);
        }
        self.abort_pending[l].is_empty()
    }

    /// The error of a receive whose message its sender (segment index `l`) abandoned.
    pub(super) fn abandoned_error(&self, l: usize) -> Error {
        self.sender_gave_up(l, "its send failed before all of it was sent")
    }

    /// The error of a receive whose message its live sender (segment index `l`) took back
    /// because its operation failed. A sender that ended because of a peer's failure recorded
    /// that peer: the receive names it as failed. A fault-tolerant job records none (its ranks
    /// survive failures; the sender gave up after a revoke or a failure it saw elsewhere): the
    /// sender lives, so the receive is interrupted as revoked (as tcp reports a withdrawn
    /// message), never by naming the sender as failed.
    pub(super) fn sender_gave_up(&self, l: usize, how: &str) -> Error {
        let peer = self.global_of[l];
        let blamed = self.seg.blame(l).load(Ordering::Acquire) != 0;
        let kind = if self.tolerant && !blamed {
            ErrorKind::Revoked
        } else {
            ErrorKind::PeerFailed
        };
        self.err(kind, "recv")
            .with_peer(self.root_cause(l))
            .with_detail(format!(
                "rank {peer} abandoned this message: {how} (its sending operation was \
                 abandoned){}",
                self.blame_note(l)
            ))
    }

    /// Takes back single-copy descriptor `seq` offered to `l`, or waits until `l` has finished
    /// reading it (bounded by `l`'s life: a dead process reads nothing).
    pub(super) fn withdraw_or_wait(&mut self, l: usize, seq: u64) {
        let mut pause = Duration::from_micros(20);
        loop {
            let Some(tx) = self.tx[l].as_ref() else {
                return;
            };
            let word = tx.ring().ack(seq);
            match ring::offer::take_back(word, seq, || self.peer_alive(l)) {
                TakeBack::Wait => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(1));
                }
                TakeBack::Withdrawn => {
                    self.stats.bump("shm single copies aborted", 1);
                    return;
                }
                TakeBack::Settled | TakeBack::PeerDead => return,
            }
        }
    }

    pub(super) fn failed(&mut self, ex: &mut Exchange<'_>, e: Error) -> Error {
        self.abandon(ex, &e);
        e
    }

    /// Gives up `ex` for good (`Transport::abandon_exchange`, or an exchange that returns an
    /// error): its sends are settled ([`ShmTransport::settle_failed`]) and its incomplete
    /// receives given up.
    ///
    /// A given-up receive has spent its flow serial, so its message can never match a later
    /// receive: whatever of it is still to come is dropped on arrival. A message streaming
    /// in as fragments right now has the rest of its fragments consumed and dropped (before,
    /// they met the next exchange as "fragmented message lost its receive", or as "fragment
    /// of another message interleaved" once that error had dropped the stream's state).
    ///
    /// Public for transports that drive the shm part of an exchange themselves (hybrid).
    pub fn abandon(&mut self, ex: &mut Exchange<'_>, why: &Error) {
        self.settle_failed(ex, why);
        self.give_up_recvs(ex);
    }

    fn give_up_recvs(&mut self, ex: &mut Exchange<'_>) {
        for i in 0..ex.recvs.len() {
            let r = &mut ex.recvs[i];
            let OpState::Active { serial, progress } = r.state else {
                continue;
            };
            if progress & SETTLED != 0 {
                continue;
            }
            let Some(l) = self.local_of.get(r.peer).copied().flatten() else {
                continue;
            };
            r.state = OpState::Active {
                serial,
                progress: progress | SETTLED,
            };
            if progress & split::SPLIT_PENDING != 0 {
                // Its descriptor was claimed and is completed (`settle_splits`, or by the
                // sender's write while another exchange was driven): nothing of the message
                // is left to come.
                let _ = self.take_split_done(l, r.key, serial);
                continue;
            }
            let arrival = Arrival {
                source: r.peer,
                key: r.key,
                serial,
            };
            if let Some(p) = self.partial[l].as_mut().filter(|p| p.arrival == arrival) {
                if let Target::Buf(_) = p.target {
                    self.partial_bytes -= p.total;
                    self.partial_count -= 1;
                }
                p.target = Target::Discard;
                continue;
            }
            if self.inbox.take(&arrival).is_some() || self.abandoned.remove(&arrival) {
                continue;
            }
            if let Some(d) = self.pending_cma.remove(&arrival) {
                if self.drop_descriptor(l, d.seq) {
                    continue;
                }
            }
            self.given_up.insert(arrival);
        }
    }

    /// Takes descriptor `seq` from `l` and completes it unread (its receive was given up): the
    /// sender gets its buffer back. False if it was withdrawn, so its fragments follow.
    pub(super) fn drop_descriptor(&mut self, l: usize, seq: u64) -> bool {
        let Some(rx) = self.rx[l].as_ref() else {
            return true;
        };
        let word = rx.ring().ack(seq);
        match ring::claim(word, seq) {
            Claim::Got => {
                ring::complete(word, seq);
                self.wake(l);
                self.stats
                    .bump("shm messages dropped (receive given up)", 1);
                true
            }
            Claim::Withdrawn => false,
            Claim::Aborted => true,
        }
    }
}
