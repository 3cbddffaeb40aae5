//! Per-rank communication statistics (T7; seed 000 §9.2): calls, messages and bytes, in total
//! and per peer. Printed to stderr at exit when `FERRY_STATS=1`.

use std::fmt;

/// Counters for one direction of traffic with one peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Messages.
    pub messages: u64,
    /// Payload bytes.
    pub bytes: u64,
}

/// Statistics of one rank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// This rank.
    pub rank: usize,
    /// Backend name.
    pub backend: &'static str,
    /// Calls of `exchange`, `send` and `recv`.
    pub calls: u64,
    /// Sent, indexed by destination rank.
    pub sent: Vec<Traffic>,
    /// Received, indexed by source rank.
    pub received: Vec<Traffic>,
    /// Backend-specific counters (connections opened, evictions, refusals, ...), by name.
    pub extra: Vec<(&'static str, u64)>,
}

impl Stats {
    /// Empty statistics for `rank` of `size` ranks.
    pub fn new(rank: usize, size: usize, backend: &'static str) -> Stats {
        Stats {
            rank,
            backend,
            calls: 0,
            sent: vec![Traffic::default(); size],
            received: vec![Traffic::default(); size],
            extra: Vec::new(),
        }
    }

    /// Records one sent message.
    #[inline]
    pub fn record_send(&mut self, peer: usize, bytes: usize) {
        if let Some(t) = self.sent.get_mut(peer) {
            t.messages += 1;
            t.bytes += bytes as u64;
        }
    }

    /// Records one received message.
    #[inline]
    pub fn record_recv(&mut self, peer: usize, bytes: usize) {
        if let Some(t) = self.received.get_mut(peer) {
            t.messages += 1;
            t.bytes += bytes as u64;
        }
    }

    /// Adds to a named backend counter.
    pub fn bump(&mut self, name: &'static str, by: u64) {
        match self.extra.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => *v += by,
            None => self.extra.push((name, by)),
        }
    }

    /// Total sent.
    pub fn total_sent(&self) -> Traffic {
        sum(&self.sent)
    }

    /// Total received.
    pub fn total_received(&self) -> Traffic {
        sum(&self.received)
    }

    /// Merges `other` (e.g. the secondary backend of a hybrid) into `self`.
    pub fn merge(&mut self, other: &Stats) {
        self.calls += other.calls;
        for (a, b) in self.sent.iter_mut().zip(&other.sent) {
            a.messages += b.messages;
            a.bytes += b.bytes;
        }
        for (a, b) in self.received.iter_mut().zip(&other.received) {
            a.messages += b.messages;
            a.bytes += b.bytes;
        }
        for &(n, v) in &other.extra {
            self.bump(n, v);
        }
    }
}

fn sum(t: &[Traffic]) -> Traffic {
    t.iter().fold(Traffic::default(), |a, b| Traffic {
        messages: a.messages + b.messages,
        bytes: a.bytes + b.bytes,
    })
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.total_sent();
        let r = self.total_received();
        writeln!(
            f,
            "ferry stats rank {} ({}): {} calls, sent {} msgs / {} B, received {} msgs / {} B",
            self.rank, self.backend, self.calls, s.messages, s.bytes, r.messages, r.bytes
        )?;
        for (peer, (tx, rx)) in self.sent.iter().zip(&self.received).enumerate() {
            if tx.messages + rx.messages > 0 {
                writeln!(
                    f,
                    "ferry stats rank {} peer {}: sent {} msgs / {} B, received {} msgs / {} B",
                    self.rank, peer, tx.messages, tx.bytes, rx.messages, rx.bytes
                )?;
            }
        }
        for (name, v) in &self.extra {
            writeln!(f, "ferry stats rank {} {}: {}", self.rank, name, v)?;
        }
        Ok(())
    }
}
