//! A withdrawal that arrives after its receive was abandoned (tcp answers the fetch of an
//! announced message whose sender gave up on it with a `Revoked` error naming the sender, and
//! may do so while the receiver is already in a recovery's agreement) concerns no operation
//! any more: the agreement must go on, not fail, and the sender must not be taken for dead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ferry_core::mem::MemTransport;
use ferry_core::{Error, ErrorKind, Exchange, Result, Stats, Transport};
use ferry_ft::{Communicator, FailureMode, MessageMode, Options};

/// Set by rank 0 to have its transport report one late withdrawal by rank 1.
static ARMED: AtomicBool = AtomicBool::new(false);

/// A transport that reports the withdrawal once [`ARMED`] is set (rank 0 only).
struct LateWithdrawal {
    t: MemTransport,
}

impl Transport for LateWithdrawal {
    fn rank(&self) -> usize {
        self.t.rank()
    }
    fn size(&self) -> usize {
        self.t.size()
    }
    fn name(&self) -> &'static str {
        "mem"
    }
    fn progress_exchange(&mut self, ex: &mut Exchange<'_>) -> Result<bool> {
        if self.t.rank() == 0 && ARMED.swap(false, Ordering::AcqRel) {
            return Err(Error::new(ErrorKind::Revoked, "recv")
                .on_rank(0)
                .with_peer(1)
                .with_detail("rank 1 no longer holds message serial 3 it announced"));
        }
        self.t.progress_exchange(ex)
    }
    fn wait_for_input(&mut self, timeout: Duration) -> Result<()> {
        self.t.wait_for_input(timeout)
    }
    fn stats(&self) -> Stats {
        self.t.stats()
    }
}

#[test]
fn a_late_withdrawal_neither_fails_an_agreement_nor_kills_its_sender() {
    let res = MemTransport::run(3, |t| {
        let me = t.rank();
        let opts = Options::new(FailureMode::Shrink, MessageMode::Cont);
        let comm = Communicator::new(Box::new(LateWithdrawal { t }), opts).unwrap();
        if me == 0 {
            ARMED.store(true, Ordering::Release);
        }
        let agreed = comm.agree(1);
        let failed = comm.failed_members();
        // The sender still talks to rank 0 afterwards.
        let mut v = [1u32];
        let sum = comm
            .allreduce(&mut v, &ferry_coll::ReduceOp::Sum)
            .map(|()| v[0]);
        comm.finish().unwrap();
        (agreed, failed, sum)
    });
    for (r, (agreed, failed, sum)) in res.into_iter().enumerate() {
        assert_eq!(agreed.unwrap(), (1, vec![]), "rank {r}");
        assert!(failed.is_empty(), "rank {r}: {failed:?}");
        assert_eq!(sum.unwrap(), 3, "rank {r}");
    }
}
