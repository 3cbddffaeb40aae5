//! Driving an exchange: one progress pass (post, serve sockets, run the endpoint's timers,
//! write), the corked ACCEPTs, reading a single peer's socket directly, and the polling loop
//! whose spin budget counts from the last byte moved.

use super::ops::ExBufs;
use super::*;

/// Progress calls a corked ACCEPT may wait for a frame to travel with (bounded delay).
const CORK_CALLS: u64 = 8;
/// Write bursts smaller than this do not extend the polling (a small message's answer comes
/// within the spin, or not soon at all).
const BURST_MIN: u64 = 256 << 10;
/// The reading rate assumed for a peer taking a burst this rank wrote (bytes per second; a
/// loopback reader does 5-10 GB/s on the target machines, a loaded one less).
const PEER_READ_RATE: u64 = 2_000_000_000;
/// Longest polling extension after a burst (8 MiB at [`PEER_READ_RATE`]).
const BURST_POLL_MAX: Duration = Duration::from_millis(4);

impl TcpTransport {
    pub(super) fn progress_inner(&mut self, ex: &mut Exchange<'_>) -> Result<bool> {
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        self.tick += 1;
        self.advance_clock();
        // Failures are reported once the pass is over: the other operations still progress.
        let mut first = self.post_new(ex).err();
        if let Err(e) = self.apply_actions(ex) {
            first.get_or_insert(e);
        }
        if !self.own_part_complete(ex) || self.tick & 15 == 0 {
            let polled = match self.hot_link(ex) {
                // Waiting for one peer only: read its socket directly instead of asking epoll
                // first (one system call per poll instead of two); every 16th pass still
                // serves everything (listener, other connections) for fairness (T3).
                Some(c) if self.tick & 15 != 0 => {
                    let r = Ready {
                        token: c.0,
                        readable: true,
                        writable: false,
                        hangup: false,
                    };
                    self.service(c, r, ex);
                    self.apply_actions(ex)
                }
                _ => self.poll_io(ex, 0),
            };
            if let Err(e) = polled {
                first.get_or_insert(e);
            }
            self.flush_borrowed(ex);
            if let Err(e) = self.housekeeping(ex, false) {
                first.get_or_insert(e);
            }
            // Corked ACCEPTs must not wait forever on a rank whose receives all complete
            // without blocking (from the inbox): senders free their outboxes on them. They
            // leave after CORK_CALLS progress calls at the latest, or when 32 links hold some.
            if self.dirty.is_empty() {
                self.dirty_since = None;
            } else {
                let since = *self.dirty_since.get_or_insert(self.tick);
                if self.dirty.len() >= 32 || self.tick.wrapping_sub(since) >= CORK_CALLS {
                    self.flush_dirty();
                }
            }
            if !self.own_part_complete(ex) {
                self.flush_dirty();
            }
        }
        self.flush_batch(Some(ex));
        // The call would end but for TRY sends written from their buffers: it waits for their
        // answers while they keep coming (no copy), and copies the rest once they stop.
        if self.ep.has_eager_borrowed()
            && self.only_eager_left(ex)
            && self.ep.eager_release_at().is_some_and(|t| self.now() >= t)
        {
            self.release_eager(ex);
            if let Err(e) = self.apply_actions(ex) {
                first.get_or_insert(e);
            }
        }
        if let Some(e) = first.or_else(|| self.pending_error.take()) {
            return Err(e);
        }
        Ok(ex.is_complete())
    }

    /// The endpoint's timers (when due, or `force`), its retries, the listener; then what it
    /// asked for.
    pub(super) fn housekeeping(&mut self, ex: &mut Exchange<'_>, force: bool) -> Result<()> {
        let now = self.now();
        let due = self.next_timer.is_some_and(|t| now >= t);
        if force || due || self.tick & 15 == 0 {
            self.ep.handle_timeout(now, &ExBufs(&ex.sends));
            self.next_timer = self.ep.poll_timeout();
        } else {
            self.ep.progress(now, &ExBufs(&ex.sends));
        }
        self.maybe_resume_listener();
        self.apply_actions(ex)
    }

    /// The link to read directly when all this rank waits for is input from one peer over an
    /// idle connection (no pending sends, nothing queued to write, nothing buffered).
    fn hot_link(&self, ex: &Exchange<'_>) -> Option<ConnId> {
        if !self.rescan.is_empty() || !self.batch.is_empty() {
            return None;
        }
        let mut peer = None;
        for r in ex
            .recvs
            .iter()
            .filter(|r| r.state != ferry_core::OpState::Done)
        {
            if r.peer >= self.size || self.excluded[r.peer] {
                continue;
            }
            if peer.is_some_and(|p| p != r.peer) {
                return None;
            }
            peer = Some(r.peer);
        }
        let busy_send = ex.sends.iter().any(|s| {
            s.state != ferry_core::OpState::Done && s.peer < self.size && !self.excluded[s.peer]
        });
        if busy_send {
            return None;
        }
        let c = self.ep.sole_conn(peer?)?;
        let l = self.links.get(&c)?;
        (!l.connecting && !l.want_write && l.wq.is_empty()).then_some(c)
    }

    /// `n` bytes were written. A large message leaves this rank faster than its receiver
    /// takes it (the socket buffers hold megabytes), so after the write completes the peer
    /// still reads for up to the burst's size over its reading rate, and only then answers: a
    /// ping-pong of 1-4 MiB left each rank idle for 100-800 us per message, longer than the
    /// spin, and every message paid a sleep and a wake-up (~1 voluntary context switch per
    /// message). The exchange driver keeps polling while such a burst can still be being read.
    pub(super) fn note_written(&mut self, n: usize) {
        let now = self.now();
        let (mut bytes, last) = self.burst;
        if now.saturating_sub(last) > self.set.policy.spin {
            bytes = 0;
        }
        bytes = bytes.saturating_add(n as u64);
        self.burst = (bytes, now);
        if bytes >= BURST_MIN {
            let reading =
                Duration::from_nanos(bytes.saturating_mul(1_000_000_000) / PEER_READ_RATE);
            self.poll_until = self.poll_until.max(now + reading.min(BURST_POLL_MAX));
        }
    }

    /// Runs `ex` to completion like `ferry_core::transport::drive_exchange`, except that the
    /// polling budget (`general.spin_us`) counts from the last time bytes moved, not from the
    /// start of the exchange. A stream of large messages has short gaps (the socket buffer is
    /// momentarily full or empty) all through a window of many milliseconds; blocking in epoll
    /// in each gap cost a wake-up (~25 us on the target VMs) every few hundred kilobytes: at
    /// 1 MiB osu_bw both ranks slept 1300-2100 times a second and used 25-30 % of a core.
    /// Idle polls yield as the policy says (every poll on oversubscribed hosts). An operation
    /// timeout (`general.operation_timeout_ms`) gives up on the peers it waited for.
    pub(super) fn drive(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        if self.progress_exchange(ex)? {
            return Ok(());
        }
        let policy = self.set.policy;
        let start = self.epoch + self.clock;
        let mut active = start;
        let mut mark = self.moved;
        let mut polls: u32 = 0;
        let mut dumped = false;
        loop {
            if self.progress_exchange(ex)? {
                return Ok(());
            }
            polls = polls.wrapping_add(1);
            // The pass just read the clock (one read per poll, not two).
            let now = self.epoch + self.clock;
            if self.moved != mark {
                mark = self.moved;
                active = now;
            }
            let elapsed = now.duration_since(start);
            if let Some(limit) = policy.timeout.filter(|&limit| elapsed >= limit) {
                // Reported once: finish does not wait for these peers a second time.
                for p in ex.pending_peers() {
                    self.ep.give_up(p);
                }
                return Err(ferry_core::transport::operation_timeout_error(
                    self.rank, ex, limit,
                ));
            }
            // Sends held for their answers poll until the hold ends rather than sleep in
            // epoll, whose millisecond timeout would overshoot it many times over.
            let holding = self.ep.eager_release_at().is_some_and(|t| self.clock < t);
            if now.duration_since(active) < policy.spin || self.clock < self.poll_until || holding {
                std::hint::spin_loop();
                if policy.yield_each_poll || (policy.spin_yields && polls.is_multiple_of(64)) {
                    std::thread::yield_now();
                }
            } else {
                if now.duration_since(active) > Duration::from_secs(2) && !dumped {
                    dumped = true;
                    tracing::debug!(
                        "rank {}: stalled: {} | {}",
                        self.rank,
                        self.ep.debug_state(),
                        self.ep.debug_recv_state()
                    );
                }
                let slice = Duration::from_millis(10);
                let left = policy.timeout.map_or(slice, |limit| limit - elapsed);
                self.wait_for_input(left.min(slice))?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::store::MemStore;

    fn transport() -> TcpTransport {
        let store = MemStore::new();
        TcpTransport::from_store(0, 1, &store, &Config::default(), "burst").unwrap()
    }

    #[test]
    fn a_large_write_burst_keeps_the_driver_polling_while_the_peer_reads_it() {
        let mut t = transport();
        let spin = t.set.policy.spin;
        t.clock = Duration::from_secs(1);
        // Small writes (a ping-pong of small messages) do not extend the spin.
        t.note_written(64 << 10);
        assert!(t.poll_until <= t.clock);
        // A burst: writes closer together than the spin add up; 1 MiB at 2 GB/s is 524 us.
        t.clock += spin / 2;
        t.note_written((1 << 20) - (64 << 10));
        let want = Duration::from_nanos((1u64 << 20) * 1_000_000_000 / PEER_READ_RATE);
        assert_eq!(t.poll_until, t.clock + want);
        // Bursts further apart than the spin start afresh; the extension is bounded.
        t.clock += spin * 3;
        t.note_written(64 << 10);
        assert!(t.poll_until < t.clock + want);
        t.note_written(1 << 30);
        assert_eq!(t.poll_until, t.clock + BURST_POLL_MAX);
    }
}
