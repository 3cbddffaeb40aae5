//! Bounded flow state (M2): the backends number messages per flow (peer and message key), and
//! every container (its creation number is the tag of its messages) and every group the data
//! layer creates (its generation) opens new flows. When the last copy of such a group, or a
//! container, is dropped, its flows will carry no more messages; a [`RetireOnDrop`] it holds
//! then queues them in the instance's [`Retirements`], and the next switch (or
//! `Instance::finalize`, or `Instance::retire_pending`) tells the transport
//! ([`Transport::retire_flows`]). So a long run that keeps creating groups or containers keeps
//! bounded tables.
//!
//! Why this is safe: generations and creation numbers are never handed out again, and by the
//! time the last reference is dropped this rank has sent and received every message of the
//! flows (a switch completes all of its receives). Peers retire the same flows at their own
//! pace; retirement changes nothing they still need.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ferry_core::{RetiredFlows, Transport};

/// Flows waiting to be retired by one rank's transport.
#[derive(Debug, Default)]
pub(crate) struct Retirements {
    /// Whether `queue` may be non-empty: lets a switch skip the lock.
    pending: AtomicBool,
    queue: Mutex<Vec<RetiredFlows>>,
}

impl Retirements {
    fn defer(&self, flows: RetiredFlows) {
        // A poisoned queue (a panic while it was locked) still holds valid entries.
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.push(flows);
        self.pending.store(true, Ordering::Release);
    }

    /// Hands every queued retirement to `t`.
    pub(crate) fn apply(&self, t: &mut dyn Transport) {
        if !self.pending.swap(false, Ordering::AcqRel) {
            return;
        }
        let queued = std::mem::take(&mut *self.queue.lock().unwrap_or_else(|p| p.into_inner()));
        for flows in queued {
            t.retire_flows(flows);
        }
    }
}

/// Queues `flows` for retirement when dropped.
#[derive(Debug)]
pub(crate) struct RetireOnDrop {
    queue: Arc<Retirements>,
    flows: RetiredFlows,
}

impl RetireOnDrop {
    pub(crate) fn new(queue: &Arc<Retirements>, flows: RetiredFlows) -> RetireOnDrop {
        RetireOnDrop {
            queue: queue.clone(),
            flows,
        }
    }

    /// The queue this ticket reports to (shared by every ticket of the instance).
    pub(crate) fn queue(&self) -> &Retirements {
        &self.queue
    }
}

impl Drop for RetireOnDrop {
    fn drop(&mut self) {
        self.queue.defer(self.flows);
    }
}
