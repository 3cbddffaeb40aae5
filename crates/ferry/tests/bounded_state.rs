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

/// Groups the program builds itself (`Group::new` with generations of its own), handed to the
/// data instance with `Instance::adopt`: 5,000 of them, each used for an allreduce and a
/// point-to-point message keyed with its generation and then dropped, keep tcp's flow table
/// flat (without `adopt` it grows by three flows per group).
#[test]
fn adopted_user_groups_retire_their_flows_over_tcp() {
    use ferry_core::{MsgKey, MsgKind, Transport};
    let store = MemStore::new();
    let config = Config::default();
    let flows: Vec<Vec<usize>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|rank| {
                let (store, config) = (&store, &config);
                scope.spawn(move || {
                    let mut t = TcpTransport::from_store(rank, 2, store, config, "adopt")
                        .expect("tcp rank starts");
                    let inst = ferry::data::Instance::for_transport(&t).expect("instance");
                    let mut samples = Vec::new();
                    let mut got = Vec::new();
                    for i in 0..5_000u32 {
                        let g = ferry::coll::Group::new(vec![0, 1], 5_000 + i).expect("group");
                        let g = inst.adopt(g);
                        let mut v = [1u32];
                        ferry::coll::allreduce(&mut t, &g, &mut v, &ferry::coll::ReduceOp::Sum)
                            .expect("allreduce");
                        assert_eq!(v[0], 2);
                        let key = MsgKey::new(g.generation(), MsgKind::USER, 9);
                        if rank == 0 {
                            t.send(1, key, &i.to_le_bytes()).expect("send");
                        } else {
                            t.recv(0, key, &mut got).expect("recv");
                            assert_eq!(got, i.to_le_bytes());
                        }
                        drop(g);
                        inst.retire_pending(&mut t);
                        if (i + 1) % 500 == 0 {
                            samples.push(t.flow_count().expect("tcp counts its flows"));
                        }
                    }
                    t.finish().expect("finish");
                    samples
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    });
    for (rank, f) in flows.iter().enumerate() {
        let max = f.iter().copied().max().unwrap_or(0);
        assert!(
            max <= f[0] + 8,
            "rank {rank}: the flow table grew with the groups: {f:?}"
        );
    }
}
