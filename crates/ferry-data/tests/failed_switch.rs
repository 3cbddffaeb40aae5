//! A switch whose first pass fails gives its exchange up in the backend before it returns:
//! backends may hold the exchange's buffers (single-copy descriptors on shm, sends written
//! from the buffer on tcp, posted requests on mpi), and the data layer owns those buffers.

use std::sync::Barrier;
use std::time::Duration;

use ferry_core::mem::MemTransport;
use ferry_core::{Error, ErrorKind, Exchange, Result, Stats, Transport};
use ferry_data::{Container, DataFlow, Instance, Partitioner, Partitioning, Space};

/// Forwards to the in-memory backend; its first `progress_exchange` reports a failure after
/// the backend has started the exchange, and it records what the caller did next.
struct FailFirstPass {
    inner: MemTransport,
    fail_next: bool,
    calls: Vec<&'static str>,
}

impl Transport for FailFirstPass {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn name(&self) -> &'static str {
        "fail-first-pass"
    }
    fn progress_exchange(&mut self, ex: &mut Exchange<'_>) -> Result<bool> {
        self.calls.push("progress");
        let done = self.inner.progress_exchange(ex)?;
        if std::mem::take(&mut self.fail_next) {
            return Err(Error::new(ErrorKind::PeerFailed, "progress").on_rank(self.rank()));
        }
        Ok(done)
    }
    fn wait_for_input(&mut self, timeout: Duration) -> Result<()> {
        self.inner.wait_for_input(timeout)
    }
    fn abandon_exchange(&mut self, ex: &mut Exchange<'_>, why: &Error) {
        self.calls.push("abandon");
        self.inner.abandon_exchange(ex, why)
    }
    fn stats(&self) -> Stats {
        self.inner.stats()
    }
}

#[test]
fn a_switch_that_fails_in_its_first_pass_abandons_its_exchange() {
    // A rank's channel closes when its thread returns, so rank 0 waits for rank 1's switch:
    // otherwise rank 1's send can find rank 0 gone and fail, which this test is not about.
    let both_switched = Barrier::new(2);
    let out = MemTransport::run(2, |t| {
        // Rank 0 gathers everything (block -> master); its first pass fails after the backend
        // started the receive from rank 1, whose send completes regardless.
        let mut t = FailFirstPass {
            inner: t,
            fail_next: false,
            calls: Vec::new(),
        };
        let mut inst = Instance::for_transport(&t).unwrap();
        let w = inst.world().clone();
        let s = Space::new1(64).unwrap();
        let block = Partitioning::new(&s, &w, &Partitioner::block()).unwrap();
        let master = Partitioning::new(&s, &w, &Partitioner::Master).unwrap();
        let mut c = Container::<f64>::new(&mut inst, "gather", &s);
        c.switch_to(&mut t, &block, DataFlow::None, None).unwrap();
        c.fill(1.0);
        t.calls.clear();
        t.fail_next = t.rank() == 0;
        let result = c.switch_to(&mut t, &master, DataFlow::Preserve, None);
        both_switched.wait();
        (result.map_err(|e| e.to_string()), t.calls)
    });
    let (result, calls) = &out[0];
    let e = result.as_ref().unwrap_err();
    assert!(e.contains("switch") && e.contains("rank 0"), "{e}");
    assert_eq!(
        calls,
        &["progress", "abandon"],
        "rank 0's failed first pass must abandon the exchange before the switch returns"
    );
    assert!(out[1].0.is_ok(), "rank 1: {:?}", out[1].0);
}
