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
    // The node-local large messages take shm's single-copy protocol (counted below), not the
    // pipelined one a node of two ranks on two cores would choose.
    cfg.shm.pipeline = ferry_core::config::Pipeline::Off;
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

/// Runs `body(rank, transport)` for every rank of a hybrid job on threads, rank `r` on node
/// `nodes[r]`, and returns each rank's result. A rank that has not returned within `limit`
/// fails the test (naming the ranks still running) instead of hanging it: these tests are
/// about hangs, so they must not rely on the operation timeout to surface one.
fn run_hybrid<R: Send + 'static>(
    nodes: &'static [&'static str],
    cfg: Config,
    limit: std::time::Duration,
    body: impl Fn(usize, &mut HybridTransport) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let size = nodes.len();
    let store = Arc::new(MemStore::new());
    let job = format!(
        "hyb{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    )
    .replace(['(', ')'], "");
    let body = Arc::new(body);
    let (tx, rx) = std::sync::mpsc::channel();
    for (rank, &node) in nodes.iter().enumerate() {
        let (store, cfg, job, body, tx) = (
            store.clone(),
            cfg.clone(),
            job.clone(),
            body.clone(),
            tx.clone(),
        );
        // Detached on purpose: a hung rank must not keep the test from reporting.
        std::thread::spawn(move || {
            let mut t =
                HybridTransport::from_store(rank, size, node, &job, &*store, &cfg, "s").unwrap();
            let r = body(rank, &mut t);
            t.finish().unwrap();
            let _ = tx.send((rank, r));
        });
    }
    drop(tx);
    let deadline = std::time::Instant::now() + limit;
    let mut out: Vec<Option<R>> = (0..size).map(|_| None).collect();
    for _ in 0..size {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok((rank, r)) => out[rank] = Some(r),
            Err(e) => {
                let running: Vec<usize> = (0..size).filter(|&r| out[r].is_none()).collect();
                panic!("ranks {running:?} did not finish within {limit:?} ({e})");
            }
        }
    }
    out.into_iter().map(Option::unwrap).collect()
}

/// Configuration for the hang tests: the operation timeout is far beyond the tests' own
/// deadline, so a hang shows as a hang, not as a timeout error.
fn hang_test_config() -> Config {
    let mut cfg = Config::default();
    cfg.general.operation_timeout_ms = 600_000;
    cfg
}

/// How rank 0 of [`completed_remote_send_is_served_during_local_wait`] waits for its node mate.
#[derive(Clone, Copy, Debug)]
enum LocalWait {
    Recv,
    SendRecv,
    Exchange,
}

/// Rank 0 sends a large (rendezvous) message to rank 2 on the other node that rank 2 does not
/// receive yet: TCP completes the send by copying it into the outbox, and rank 0 must still
/// answer rank 2's GET later. Rank 0 then waits for rank 1 on its own node, which in turn
/// waits for rank 2, which needs rank 0's message first. Rank 0 must keep serving TCP while it
/// waits on shared memory alone: it did not when the wait went straight to the shm transport
/// (the `vsum` hang with 4 ranks per node, where a dissemination barrier step had both
/// partners on the node).
fn completed_remote_send_is_served_during_local_wait(how: LocalWait) {
    const NODES: &[&str] = &["a", "a", "b"];
    let big = pattern(1 << 20, 3);
    let want = big.clone();
    let res = run_hybrid(
        NODES,
        hang_test_config(),
        std::time::Duration::from_secs(20),
        move |rank, t| match rank {
            0 => {
                t.send(2, MsgKey::user(1), &big).unwrap();
                let mut got = [0u8; 2];
                match how {
                    LocalWait::Recv => {
                        let mut v = Vec::new();
                        t.recv(1, MsgKey::user(2), &mut v).unwrap();
                        got.copy_from_slice(&v);
                    }
                    LocalWait::SendRecv => t
                        .sendrecv(
                            1,
                            MsgKey::user(3),
                            b"hi",
                            1,
                            MsgKey::user(2),
                            ferry_core::RecvBuf::Slice(&mut got),
                        )
                        .unwrap(),
                    LocalWait::Exchange => {
                        let mut ex = Exchange::new();
                        ex.recv_into(1, MsgKey::user(2), &mut got);
                        t.exchange(&mut ex).unwrap();
                    }
                }
                got.to_vec()
            }
            1 => {
                let mut v = Vec::new();
                t.recv(2, MsgKey::user(4), &mut v).unwrap();
                if matches!(how, LocalWait::SendRecv) {
                    let mut hi = Vec::new();
                    t.recv(0, MsgKey::user(3), &mut hi).unwrap();
                    assert_eq!(hi, b"hi");
                }
                t.send(0, MsgKey::user(2), b"go").unwrap();
                v
            }
            _ => {
                // Late enough that rank 0's send was completed through the outbox.
                std::thread::sleep(std::time::Duration::from_millis(200));
                let mut v = Vec::new();
                t.recv(0, MsgKey::user(1), &mut v).unwrap();
                assert!(v == want, "rank 2 received a corrupted large message");
                t.send(1, MsgKey::user(4), b"ok").unwrap();
                Vec::new()
            }
        },
    );
    assert_eq!(res[0], b"go");
    assert_eq!(res[1], b"ok");
}

#[test]
fn remote_send_served_while_blocked_in_local_recv() {
    completed_remote_send_is_served_during_local_wait(LocalWait::Recv);
}

#[test]
fn remote_send_served_while_blocked_in_local_sendrecv() {
    completed_remote_send_is_served_during_local_wait(LocalWait::SendRecv);
}

#[test]
fn remote_send_served_while_blocked_in_local_exchange() {
    completed_remote_send_is_served_during_local_wait(LocalWait::Exchange);
}

/// The mirror image: rank 1 sends rank 0 (same node) a message larger than their ring, so
/// its send completes only while rank 0 drains the ring; rank 0 meanwhile waits for rank 2 on
/// the other node, which waits for rank 1's next message. Rank 0 must keep draining shared
/// memory while it waits on TCP alone.
#[test]
fn local_ring_drained_while_blocked_in_remote_recv() {
    const NODES: &[&str] = &["a", "a", "b"];
    let mut cfg = hang_test_config();
    // Through the rings, not single-copy: the sender needs the receiver to drain them.
    cfg.shm.single_copy = ferry_core::config::SingleCopy::Off;
    let big = pattern(4 << 20, 7);
    let want = big.clone();
    let res = run_hybrid(
        NODES,
        cfg,
        std::time::Duration::from_secs(20),
        move |rank, t| match rank {
            0 => {
                let mut v = Vec::new();
                t.recv(2, MsgKey::user(1), &mut v).unwrap();
                let mut b = Vec::new();
                t.recv(1, MsgKey::user(2), &mut b).unwrap();
                assert!(b == want, "rank 0 received a corrupted large message");
                v
            }
            1 => {
                t.send(0, MsgKey::user(2), &big).unwrap();
                t.send(2, MsgKey::user(3), b"sent").unwrap();
                Vec::new()
            }
            _ => {
                let mut v = Vec::new();
                t.recv(1, MsgKey::user(3), &mut v).unwrap();
                t.send(0, MsgKey::user(1), &v).unwrap();
                Vec::new()
            }
        },
    );
    assert_eq!(res[0], b"sent");
}
