//! Shared containers (S3) on the in-memory backend (threads as ranks): every switch gives the
//! same bytes as the message path, the values do not travel as messages, and the degraded
//! paths (an owner without shared storage, a reader that cannot map) still give them.

use std::sync::Arc;

use ferry_core::mem::MemTransport;
use ferry_core::{Error, RegionId, Result, SharedMemory, SharedRegion, Transport};
use ferry_data::{Container, DataFlow, Instance, Partitioner, Partitioning, ReduceOp, Space};

/// How the shared memory of a rank behaves in a test.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// Rank 1 cannot allocate: it offers nothing, its readers get messages.
    NoAlloc,
    /// Rank 1 cannot map its peers' regions: it answers nack and gets messages.
    NoMap,
}

struct Faulty {
    inner: Arc<dyn SharedMemory>,
    fail_alloc: bool,
    fail_map: bool,
}

impl SharedMemory for Faulty {
    fn alloc(&self, len: usize) -> Result<SharedRegion> {
        if self.fail_alloc {
            return Err(Error::invalid("shared alloc", "refused by the test"));
        }
        self.inner.alloc(len)
    }
    fn map(&self, owner: usize, id: &RegionId) -> Result<SharedRegion> {
        if self.fail_map {
            return Err(Error::invalid("shared map", "refused by the test"));
        }
        self.inner.map(owner, id)
    }
}

/// The partitionings a run switches through, in order (SPMD on every rank).
fn plans(inst: &Instance, s2: &Space) -> Vec<Partitioning> {
    let w = inst.world().clone();
    let n = w.size();
    let bis = Partitioning::new(s2, &w, &Partitioner::Bisection).unwrap();
    let halo = Partitioning::derived(s2, &Partitioner::CornerHalo { depth: 1 }, &bis).unwrap();
    let nohalo = Partitioning::derived(s2, &Partitioner::Halo { depth: 2 }, &bis).unwrap();
    let rows = Partitioning::new(s2, &w, &Partitioner::Grid { blocks: [1, n, 1] }).unwrap();
    let cols = Partitioning::new(s2, &w, &Partitioner::Grid { blocks: [n, 1, 1] }).unwrap();
    let wide = Partitioning::derived(s2, &Partitioner::CornerHalo { depth: 2 }, &rows).unwrap();
    let master = Partitioning::new(s2, &w, &Partitioner::Master).unwrap();
    let all = Partitioning::new(s2, &w, &Partitioner::All).unwrap();
    vec![
        bis.clone(),
        halo.clone(),
        bis.clone(),
        halo,
        rows.clone(),
        cols.clone(),
        rows,
        wide,
        nohalo,
        bis,
        all,
        master,
        cols,
    ]
}

/// Runs the sequence on `n` ranks; returns per rank, per switch, the local bytes, and the
/// bytes this rank sent.
fn run(n: usize, shared: bool, fault: Fault, reserve: bool) -> Vec<(Vec<Vec<f64>>, u64)> {
    MemTransport::run(n, |mut t| {
        let mut inst = Instance::for_transport(&t).unwrap();
        if shared {
            let inner = t.shared_memory().expect("the mem backend shares memory");
            let faulty = Faulty {
                inner,
                fail_alloc: fault == Fault::NoAlloc && t.rank() == 1,
                fail_map: fault == Fault::NoMap && t.rank() == 1,
            };
            inst.set_shared_memory(Some(Arc::new(faulty)));
            // Small test data: share every pair, halos included.
            inst.set_share_min_bytes(0);
        }
        let s2 = Space::new2(37, 23).unwrap();
        let parts = plans(&inst, &s2);
        let mut c = Container::<f64>::new(&mut inst, "c", &s2);
        if reserve {
            let refs: Vec<&Partitioning> = parts.iter().collect();
            c.reserve(&refs).unwrap();
        }
        c.switch_to(&mut t, &parts[0], DataFlow::None, None)
            .unwrap();
        assert_eq!(
            c.in_shared_memory(),
            shared && !(fault == Fault::NoAlloc && t.rank() == 1),
            "rank {}",
            t.rank()
        );
        for (no, r) in c.my_ranges().to_vec().iter().enumerate() {
            let _ = no;
            for y in r.from()[1]..r.to()[1] {
                for x in r.from()[0]..r.to()[0] {
                    c.set(&[x, y, 0], (x * 1000 + y) as f64 + 0.25).unwrap();
                }
            }
        }
        let before = t.stats().total_sent().bytes;
        let mut seen = Vec::new();
        for p in &parts[1..] {
            c.switch_to(&mut t, p, DataFlow::Preserve, None).unwrap();
            seen.push(c.local_data().to_vec());
        }
        // A reduction on a shared container keeps the message path.
        let all = &parts[parts.len() - 3];
        let master = &parts[parts.len() - 2];
        c.switch_to(&mut t, all, DataFlow::Preserve, None).unwrap();
        c.switch_to(&mut t, master, DataFlow::Preserve, Some(&ReduceOp::Sum))
            .unwrap();
        seen.push(c.local_data().to_vec());
        let sent = t.stats().total_sent().bytes - before;
        inst.finalize(&mut t).unwrap();
        (seen, sent)
    })
}

#[test]
#[cfg_attr(
    miri,
    ignore = "4 ranks under Miri outlast the mem backend's 30 s exchange timeout; the 2-rank units of action::share cover these paths"
)]
fn shared_switches_give_the_bytes_of_the_message_path() {
    for n in [2, 3, 4] {
        for reserve in [false, true] {
            let copy = run(n, false, Fault::None, reserve);
            let shared = run(n, true, Fault::None, reserve);
            for r in 0..n {
                assert_eq!(copy[r].0.len(), shared[r].0.len());
                for (k, (a, b)) in copy[r].0.iter().zip(&shared[r].0).enumerate() {
                    let (a, b): (Vec<u64>, Vec<u64>) = (
                        a.iter().map(|v| v.to_bits()).collect(),
                        b.iter().map(|v| v.to_bits()).collect(),
                    );
                    assert!(a == b, "{n} ranks, rank {r}, switch {k}: values differ");
                }
            }
            let copied: u64 = copy.iter().map(|x| x.1).sum();
            let moved: u64 = shared.iter().map(|x| x.1).sum();
            // Only control messages and the reduction travel: far fewer bytes.
            assert!(
                moved * 2 < copied,
                "{n} ranks: {moved} bytes sent with shared containers, {copied} without"
            );
        }
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "4 ranks under Miri outlast the mem backend's 30 s exchange timeout; the 2-rank units of action::share cover these paths"
)]
fn owners_without_shared_storage_and_readers_that_cannot_map_still_deliver() {
    for fault in [Fault::NoAlloc, Fault::NoMap] {
        for n in [2, 4] {
            let copy = run(n, false, Fault::None, true);
            let shared = run(n, true, fault, true);
            for r in 0..n {
                for (k, (a, b)) in copy[r].0.iter().zip(&shared[r].0).enumerate() {
                    assert!(
                        a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{n} ranks, rank {r}, switch {k}: values differ"
                    );
                }
            }
        }
    }
}

#[test]
fn switches_without_peers_on_the_node_keep_the_message_path() {
    // A backend without shared memory: setting none keeps every container on the heap.
    MemTransport::run(2, |mut t| {
        let mut inst = Instance::for_transport(&t).unwrap();
        inst.set_shared_memory(None);
        assert!(!inst.shares_memory());
        let s = Space::new1(100).unwrap();
        let w = inst.world().clone();
        let p = Partitioning::new(&s, &w, &Partitioner::block()).unwrap();
        let mut c = Container::<i32>::new(&mut inst, "h", &s);
        c.switch_to(&mut t, &p, DataFlow::None, None).unwrap();
        assert!(!c.in_shared_memory());
    });
}
