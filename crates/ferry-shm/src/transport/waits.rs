//! Where a rank's waiting time goes, for `FERRY_STATS=1` (or `general.stats`): how often and
//! how long it waited in the lean receive path and in the general exchange driver, how often it
//! handed its core over (`sched_yield`) and how long the core was away, how often and how long
//! it slept on its doorbell. On a host with more ranks than cores these figures tell a
//! scheduler-bound run (yields, time away) from a sleeping one (doorbell sleeps) and from one
//! that waits for work (lean waits without yields).
//!
//! The clock is read only when statistics are asked for: a read costs about 40 ns here, as
//! much as half an inline round trip between two dedicated cores.

use std::time::Instant;

use ferry_core::Stats;

/// Counters of one rank's waits (all zero and untouched unless `on`).
#[derive(Debug, Default, Clone)]
pub(super) struct WaitLog {
    /// Whether statistics were asked for (then the clock is read around waits).
    pub(super) on: bool,
    /// Lean receives whose message was not there at the first poll, and the time they waited.
    pub(super) lean_waits: u64,
    pub(super) lean_ns: u64,
    /// Calls of the general path (the exchange driver: exchanges, and sends and receives the
    /// lean path did not finish), and the time they took.
    pub(super) driven: u64,
    pub(super) driven_ns: u64,
    /// Yields of this rank's own waiting code (the lean path and the doorbell's yield phase;
    /// the exchange driver's own yields are inside `driven_ns`), and the time spent inside
    /// them: the core ran something else for that long.
    pub(super) yields: u64,
    pub(super) yield_ns: u64,
    /// Time asleep on the doorbell (the count is the `shm sleeps` statistic).
    pub(super) sleep_ns: u64,
}

/// Nanoseconds since `t`, saturated.
pub(super) fn ns_since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl WaitLog {
    /// A log that records only when `on`.
    pub(super) fn new(on: bool) -> WaitLog {
        WaitLog {
            on,
            ..WaitLog::default()
        }
    }

    /// The start of a timed wait: the current time when recording, else nothing.
    #[inline]
    pub(super) fn start(&self) -> Option<Instant> {
        self.on.then(Instant::now)
    }

    /// Hands the core over once, counting the yield and the time away when recording.
    #[inline]
    pub(super) fn yield_now(&mut self) {
        match self.start() {
            None => std::thread::yield_now(),
            Some(t) => {
                std::thread::yield_now();
                self.yields += 1;
                self.yield_ns = self.yield_ns.saturating_add(ns_since(t));
            }
        }
    }

    /// Adds the counters (microseconds for times) to `stats`; nothing when not recording.
    pub(super) fn report(&self, stats: &mut Stats) {
        if !self.on {
            return;
        }
        let us = |ns: u64| ns / 1000;
        stats.bump("shm lean receives that waited", self.lean_waits);
        stats.bump("shm lean wait us", us(self.lean_ns));
        stats.bump("shm general-path calls", self.driven);
        stats.bump("shm general-path us", us(self.driven_ns));
        stats.bump("shm yields", self.yields);
        stats.bump("shm yield us (core away)", us(self.yield_ns));
        stats.bump("shm sleep us", us(self.sleep_ns));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unrecorded_log_reports_nothing_and_reads_no_clock() {
        let mut log = WaitLog::new(false);
        assert!(log.start().is_none());
        log.yield_now();
        let mut stats = Stats::new(0, 1, "shm");
        log.report(&mut stats);
        assert!(stats.extra.is_empty(), "{:?}", stats.extra);
        assert_eq!(log.yields, 0);
    }

    #[test]
    fn a_recorded_log_counts_yields_and_reports_microseconds() {
        let mut log = WaitLog::new(true);
        log.yield_now();
        log.yield_now();
        log.lean_waits = 3;
        log.lean_ns = 4_500;
        let mut stats = Stats::new(0, 1, "shm");
        log.report(&mut stats);
        let get = |name: &str| {
            stats
                .extra
                .iter()
                .find(|(n, _)| *n == name)
                .map(|&(_, v)| v)
        };
        assert_eq!(get("shm yields"), Some(2));
        assert_eq!(get("shm lean receives that waited"), Some(3));
        assert_eq!(get("shm lean wait us"), Some(4));
    }
}
