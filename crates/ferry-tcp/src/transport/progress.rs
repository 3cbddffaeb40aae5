//! Driving an exchange: the polling loop (spin budget counted from the last byte moved),
//! housekeeping, liveness probes and failure checks.

use super::*;

impl TcpTransport {
    pub(super) fn maintain(&mut self) -> Result<()> {
        let res = self.maintain_inner();
        self.flush_batch();
        res
    }

    pub(super) fn maintain_inner(&mut self) -> Result<()> {
        for _ in 0..self.unsent.len() {
            let Some(id) = self.unsent.pop_front() else {
                break;
            };
            if !self.outbox.contains_key(&id) {
                continue;
            }
            if !matches!(self.peers[id.0].status, PeerStatus::Alive) {
                self.unsent.push_back(id);
                continue;
            }
            match self.transmit(id) {
                Ok(true) => {}
                Ok(false) => self.unsent.push_back(id),
                Err(e) => {
                    self.unsent.push_back(id);
                    return Err(e);
                }
            }
        }
        if self.listener_paused {
            if self.n_conns < self.paused_at {
                if self
                    .poller
                    .add(self.listener.as_raw_fd(), LISTENER, false)
                    .is_ok()
                {
                    self.listener_paused = false;
                }
            } else {
                self.evict_one();
            }
        }
        if self.tick & 63 == 0 {
            self.expire_handshakes();
        }
        if self.dup_pending {
            self.close_duplicates();
        }
        Ok(())
    }

    /// Fails pending operations with a dead or finished peer (T5).
    pub(super) fn check_failures(&mut self, ex: &Exchange<'_>) -> Result<()> {
        for s in ex.sends.iter().filter(|s| s.state != OpState::Done) {
            if s.peer < self.size && !self.excluded[s.peer] {
                if let Some(e) = self.peer_gone("send", s.peer) {
                    return Err(e);
                }
            }
        }
        let mut now = None;
        for r in ex.recvs.iter().filter(|r| r.state != OpState::Done) {
            if r.peer < self.size
                && !self.excluded[r.peer]
                && r.peer != self.rank
                && !self.may_still_deliver(r.peer)
            {
                if let Some(e) = self.peer_gone("recv", r.peer) {
                    return Err(e);
                }
                // Liveness probe: nothing would ever tell us that a peer we have no
                // connection with died, so dial it.
                let p = &mut self.peers[r.peer];
                if p.n_conns > 0 {
                    p.silent_since = None;
                } else {
                    let now = *now.get_or_insert_with(Instant::now);
                    let since = *p.silent_since.get_or_insert(now);
                    if now.duration_since(since) >= PROBE_AFTER {
                        self.get_conn(r.peer, "recv")?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The connection to poll directly when all this rank waits for is input from one peer
    /// over an idle connection (no pending sends, nothing queued to write, nothing buffered).
    pub(super) fn hot_conn(&self, ex: &Exchange<'_>) -> Option<usize> {
        if !self.rescan.is_empty() || !self.unsent.is_empty() {
            return None;
        }
        let mut peer = None;
        for r in ex.recvs.iter().filter(|r| r.state != OpState::Done) {
            if r.peer >= self.size || self.excluded[r.peer] {
                continue;
            }
            if peer.is_some_and(|p| p != r.peer) {
                return None;
            }
            peer = Some(r.peer);
        }
        let busy_send = ex
            .sends
            .iter()
            .any(|s| s.state != OpState::Done && s.peer < self.size && !self.excluded[s.peer]);
        if busy_send {
            return None;
        }
        let peer = peer?;
        if self.peers[peer].n_conns != 1 {
            // Its messages may come on either of two connections.
            return None;
        }
        let c = self.peers[peer].conn?;
        let conn = self.conns.get(c)?.as_ref()?;
        (conn.phase == Phase::Open && !conn.want_write && conn.wq.is_empty()).then_some(c)
    }

    /// A peer that said BYE on one connection may still have frames in flight on another
    /// (two ranks that dialled each other at once): it is only done once all are closed.
    pub(super) fn may_still_deliver(&self, peer: usize) -> bool {
        matches!(self.peers[peer].status, PeerStatus::Finished(_))
            && self.conns.iter().flatten().any(|c| c.peer == Some(peer))
    }

    pub(super) fn own_part_complete(&self, ex: &Exchange<'_>) -> bool {
        ex.sends
            .iter()
            .all(|s| s.state == OpState::Done || s.peer >= self.size || self.excluded[s.peer])
            && ex
                .recvs
                .iter()
                .all(|r| r.state == OpState::Done || r.peer >= self.size || self.excluded[r.peer])
    }

    /// Runs `ex` to completion like `ferry_core::transport::drive_exchange`, except that the
    /// polling budget (`general.spin_us`) counts from the last time bytes moved, not from the
    /// start of the exchange. A stream of large messages has short gaps (the socket buffer is
    /// momentarily full or empty) all through a window of many milliseconds; blocking in epoll
    /// in each gap cost a wake-up (~25 us on the target VMs) every few hundred kilobytes: at
    /// 1 MiB osu_bw both ranks slept 1300-2100 times a second and used 25-30 % of a core.
    /// Idle polls yield as the policy says (every poll on oversubscribed hosts).
    pub(super) fn drive(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        if self.progress_exchange(ex)? {
            return Ok(());
        }
        let policy = self.set.policy;
        let start = Instant::now();
        let mut active = start;
        let mut mark = self.moved;
        let mut polls: u32 = 0;
        loop {
            if self.progress_exchange(ex)? {
                return Ok(());
            }
            polls = polls.wrapping_add(1);
            let now = Instant::now();
            if self.moved != mark {
                mark = self.moved;
                active = now;
            }
            let elapsed = now.duration_since(start);
            if let Some(limit) = policy.timeout.filter(|&limit| elapsed >= limit) {
                // Reported once: finish does not wait for these peers a second time.
                for p in ex.pending_peers() {
                    if let Some(g) = self.gave_up.get_mut(p) {
                        *g = true;
                    }
                }
                return Err(ferry_core::transport::operation_timeout_error(
                    self.rank, ex, limit,
                ));
            }
            if now.duration_since(active) < policy.spin {
                std::hint::spin_loop();
                if policy.yield_each_poll || polls.is_multiple_of(64) {
                    std::thread::yield_now();
                }
            } else {
                let slice = Duration::from_millis(10);
                let left = policy.timeout.map_or(slice, |limit| limit - elapsed);
                self.wait_for_input(left.min(slice))?;
            }
        }
    }
}
