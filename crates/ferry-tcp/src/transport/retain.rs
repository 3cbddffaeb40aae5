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

    /// Whether a peer told this process that it knew an earlier incarnation of its rank.
    pub fn is_restart(&self) -> bool {
        self.ep.is_restart()
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
