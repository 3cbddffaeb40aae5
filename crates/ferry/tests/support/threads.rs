//! Ranks as threads of this test process over a real backend (tcp, shm, or hybrid with two
//! "nodes") or the in-memory one ("mem"), for tests that count a transport's flows: included with `#[path]` by the facade's
//! unit tests and by the bounded-state test files.
#![allow(dead_code)]

use std::sync::Arc;

use ferry_core::store::MemStore;
use ferry_core::{Config, Transport};

/// The backends the bounded-state tests run on.
pub const BACKENDS: [&str; 3] = ["tcp", "shm", "hybrid"];

/// Runs `f` on `size` ranks of `backend`, each a thread owning its transport, and returns
/// each rank's result in rank order. Hybrid puts the first half of the ranks on node "a" and
/// the rest on node "b" (so both its shm and its tcp part carry traffic); `job` names the
/// shared-memory segments and must differ between tests running at the same time.
pub fn on_threads<R, F>(backend: &str, size: usize, job: &str, f: F) -> Vec<R>
where
    R: Send,
    F: Fn(Box<dyn Transport>) -> R + Sync,
{
    let config = Config::default();
    if backend == "mem" {
        return ferry_core::mem::MemTransport::run(size, |t| f(Box::new(t)));
    }
    if backend == "shm" {
        return ferry_shm::ShmTransport::run_threads(size, &config, |t| f(Box::new(t)))
            .expect("shm ranks start");
    }
    let store = Arc::new(MemStore::new());
    let job = format!("{job}-{}", std::process::id());
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                let (store, config, job, f) = (store.clone(), &config, &job, &f);
                scope.spawn(move || {
                    let t: Box<dyn Transport> = match backend {
                        "tcp" => Box::new(
                            ferry_tcp::TcpTransport::from_store(rank, size, &*store, config, job)
                                .expect("tcp rank starts"),
                        ),
                        "hybrid" => {
                            let node = if rank < size / 2 { "a" } else { "b" };
                            Box::new(
                                ferry_hybrid::HybridTransport::from_store(
                                    rank, size, node, job, &*store, config, job,
                                )
                                .expect("hybrid rank starts"),
                            )
                        }
                        other => panic!("no such backend for threads: {other}"),
                    };
                    f(t)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    })
}

/// Checks that the flow counts `samples` (taken at regular points of a loop) stayed within
/// `slack` of the first one.
pub fn assert_flat_flows(label: &str, samples: &[usize], slack: usize) {
    let first = *samples.first().expect("samples");
    let max = samples.iter().copied().max().unwrap_or(0);
    eprintln!(
        "{label}: flows {first} at the first sample, {} at the last (max {max})",
        samples.last().copied().unwrap_or(0)
    );
    assert!(
        max <= first + slack,
        "{label}: the flow table grew from {first} to {max}: {samples:?}"
    );
}
