//! The hybrid backend with 4 ranks as threads placed on 2 "nodes" of 2 (as `FERRY_NODE` does
//! for processes), rendezvous through a `MemStore`: node map, mixed exchanges, and that
//! node-local traffic goes through shared memory and the rest through TCP.

use std::sync::Arc;

use ferry_core::store::MemStore;
use ferry_core::{Config, Exchange, MsgKey, Transport};
use ferry_hybrid::HybridTransport;

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 13 + seed * 5) as u8).collect()
}

#[test]
fn two_nodes_of_two_ranks() {
    let store = Arc::new(MemStore::new());
    let job = format!("hyb{}", std::process::id());
    let mut cfg = Config::default();
    cfg.general.operation_timeout_ms = 30_000;
    cfg.shm.single_copy_threshold = 16 * 1024;
    let size = 4;
    let nodes = ["a", "a", "b", "b"];
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                let store = store.clone();
                let cfg = cfg.clone();
                let job = job.clone();
                s.spawn(move || {
                    let mut t = HybridTransport::from_store(
                        rank,
                        size,
                        nodes[rank],
                        &job,
                        &*store,
                        &cfg,
                        "secret",
                    )
                    .unwrap();
                    let node_map: Vec<usize> = (0..size).map(|r| t.node_of(r)).collect();
                    for round in 0..3usize {
                        // Small, fragmented and single-copy sizes in one exchange.
                        let len = [10, 5000, 100_000][round];
                        let out: Vec<Vec<u8>> =
                            (0..size).map(|p| pattern(len + p, rank * 10 + p)).collect();
                        let mut bufs = vec![Vec::new(); size];
                        let mut ex = Exchange::new();
                        for (p, o) in out.iter().enumerate() {
                            ex.send(p, MsgKey::user(round as u32), o);
                        }
                        for (p, b) in bufs.iter_mut().enumerate() {
                            ex.recv(p, MsgKey::user(round as u32), b);
                        }
                        t.exchange(&mut ex).unwrap();
                        drop(ex);
                        for (p, b) in bufs.iter().enumerate() {
                            assert_eq!(*b, pattern(len + rank, p * 10 + rank), "from {p}");
                        }
                    }
                    // Point-to-point across and within nodes.
                    let mut buf = Vec::new();
                    let partner = rank ^ 2;
                    let mate = rank ^ 1;
                    t.send(partner, MsgKey::user(77), b"remote").unwrap();
                    t.send(mate, MsgKey::user(78), b"local").unwrap();
                    t.recv(partner, MsgKey::user(77), &mut buf).unwrap();
                    assert_eq!(buf, b"remote");
                    t.recv(mate, MsgKey::user(78), &mut buf).unwrap();
                    assert_eq!(buf, b"local");
                    let stats = t.stats();
                    t.finish().unwrap();
                    (node_map, stats)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let extra = |stats: &ferry_core::Stats, name: &str| {
        stats
            .extra
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    };
    let mut single_copy = 0;
    for (rank, (node_map, stats)) in results.iter().enumerate() {
        assert_eq!(node_map, &vec![0, 0, 1, 1], "rank {rank}");
        assert_eq!(stats.backend, "hybrid");
        assert_eq!(stats.total_sent().messages, 3 * 4 + 2, "rank {rank}");
        assert!(
            extra(stats, "tcp connections opened") + extra(stats, "tcp connections accepted") >= 1,
            "{stats}"
        );
        // Read by the receiver (counted there) or withdrawn by the sender when the receiving
        // thread was not scheduled in time (counted there).
        single_copy +=
            extra(stats, "shm single-copy reads") + extra(stats, "shm single copies withdrawn");
    }
    // The four node-local 100 kB messages (0<->1, 2<->3) took shm's single-copy protocol; the
    // cross-node ones went over TCP.
    assert_eq!(single_copy, 4);
    assert!(std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .all(|e| !e.file_name().to_string_lossy().contains(&job)));
}
