//! Retained messages (T6) as the driver sees them: the incarnation nonce of this process and
//! the program's checkpoint mark. The protocol (retained outbox, restarts, duplicates, the
//! DONE round at the end) is the endpoint's (`ferry_proto::endpoint`, module `retain`).

use std::io::Read;

use super::*;

/// A nonce no other process of the job draws: 8 bytes from the kernel's random source,
/// else the clock mixed with the process id. Never 0 (0 means "no retention").
pub(super) fn fresh_nonce() -> u64 {
    let mut b = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok();
    let mut n = u64::from_le_bytes(b);
    if !random || n == 0 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        n = t ^ (u64::from(std::process::id()) << 32) ^ 0x9e37_79b9_7f4a_7c15;
    }
    n.max(1)
}

impl TcpTransport {
    /// Whether `tcp.retain` is on.
    pub fn retains(&self) -> bool {
        self.ep.retains()
    }

    /// Whether a peer told this process so far that it knew an earlier incarnation of its
    /// rank (no waiting; [`Transport::is_restart`] finds out for sure).
    pub fn told_restart(&self) -> bool {
        self.ep.is_restart()
    }

    /// Finds out whether this process is a restart (see [`Transport::is_restart`]): contacts
    /// every peer it has not met yet and serves the connections until each answered (every
    /// handshake of a retaining job ends with the peer's answer) or one said yes. A peer that
    /// cannot be reached fails this like a send to it would (after `tcp.connect_timeout_ms`,
    /// or `general.failure_timeout_ms` for a peer that is down).
    pub(super) fn learn_restart(&mut self) -> Result<bool> {
        if !self.ep.retains() {
            return Ok(false);
        }
        let mut idle = Exchange::new();
        loop {
            self.tick += 1;
            let now = self.advance_clock();
            if let Some(v) = self.ep.restart_verdict() {
                return Ok(v);
            }
            for p in 0..self.size {
                if p != self.rank && !self.excluded[p] && !self.ep.has_verdict_of(p) {
                    if let Err(e) = self.ep.contact(p, now) {
                        return Err(self.error(e));
                    }
                }
            }
            self.apply_actions(&mut idle)?;
            self.poll_io(&mut idle, 0)?;
            self.housekeeping(&mut idle, true)?;
            self.flush_batch(None);
            self.flush_dirty();
            if let Some(e) = self.pending_error.take() {
                return Err(e);
            }
            if self.ep.restart_verdict().is_none() {
                let wait = self
                    .ep
                    .poll_timeout()
                    .map_or(Duration::from_millis(10), |t| t.saturating_sub(now))
                    .min(Duration::from_millis(10));
                self.wait_io(wait.as_millis().max(1) as i32);
            }
        }
    }

    /// Retention counters (bytes retained now and at most, restarts seen, duplicates
    /// dropped), if `tcp.retain` is on.
    pub fn retain_counters(&self) -> Option<ferry_proto::endpoint::RetainCounters> {
        self.ep.retain_counters()
    }

    /// Marks a checkpoint of the program (see [`Transport::checkpoint_mark`]).
    pub(super) fn mark_checkpoint(&mut self) -> Result<bool> {
        if !self.ep.retains() {
            return Ok(false);
        }
        self.advance_clock();
        self.ep.retain_checkpoint(self.now());
        let mut idle = Exchange::new();
        self.apply_actions(&mut idle)?;
        self.flush_batch(None);
        Ok(true)
    }
}
