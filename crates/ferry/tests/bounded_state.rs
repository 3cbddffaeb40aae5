//! Bounded state (M2) over real backends: 100,000 groups and containers created one after
//! another by ranks running as threads keep every rank's flow table and the process's memory
//! flat. The same loop runs over the in-memory backend in ferry-data's tests. Figures:
//! `cargo test --release -p ferry --test bounded_state -- --nocapture` (docs/PERFORMANCE.md).

use ferry_core::store::MemStore;
use ferry_core::Config;
use ferry_shm::ShmTransport;
use ferry_tcp::TcpTransport;

#[path = "../../ferry-data/tests/support/churn.rs"]
mod churn;
use churn::{assert_flat, churn, Sample};

const ITERATIONS: usize = 100_000;

#[test]
fn creating_100k_groups_and_containers_keeps_flow_tables_flat_over_shm() {
    let per_rank =
        ShmTransport::run_threads(4, &Config::default(), |mut t| churn(&mut t, ITERATIONS, 10))
            .expect("shm job starts");
    for (rank, samples) in per_rank.iter().enumerate() {
        assert_flat(&format!("shm, 4 ranks, rank {rank}"), samples, 8, 16 * 1024);
    }
}

#[test]
fn creating_100k_groups_and_containers_keeps_flow_tables_flat_over_tcp() {
    let store = MemStore::new();
    let config = Config::default();
    let size = 2;
    let per_rank: Vec<Vec<Sample>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                let (store, config) = (&store, &config);
                scope.spawn(move || {
                    let mut t = TcpTransport::from_store(rank, size, store, config, "churn")
                        .expect("tcp rank starts");
                    churn(&mut t, ITERATIONS, 10)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    });
    for (rank, samples) in per_rank.iter().enumerate() {
        assert_flat(&format!("tcp, 2 ranks, rank {rank}"), samples, 8, 16 * 1024);
    }
}
