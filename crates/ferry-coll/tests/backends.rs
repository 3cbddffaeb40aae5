//! Every collective over the real shm and tcp backends (ranks as threads of this process):
//! the algorithms meet real rings, single copies, sockets and bounded buffers, not only the
//! in-memory channels of tests/collectives.rs.

use ferry_coll::{
    allgather_with, allreduce_with, alltoall_with, barrier_with, broadcast_slice_with,
    broadcast_with, gather_with, neighbor_allgather, reduce_with, scatter_with, Algorithm,
    Cartesian, CollOptions, Group, ReduceOp, ReduceOrder, Topology,
};
use ferry_core::store::MemStore;
use ferry_core::{Config, Transport};
use ferry_shm::ShmTransport;
use ferry_tcp::TcpTransport;

/// Runs `f` on `size` tcp ranks (threads), connected through an in-memory store.
fn run_tcp<R: Send>(size: usize, f: impl Fn(TcpTransport) -> R + Sync) -> Vec<R> {
    let store = MemStore::new();
    let config = Config::default();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                let (store, config, f) = (&store, &config, &f);
                scope.spawn(move || {
                    let t = TcpTransport::from_store(rank, size, store, config, "coll-test")
                        .expect("tcp rank starts");
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

fn run_shm<R: Send>(size: usize, f: impl Fn(ShmTransport) -> R + Sync) -> Vec<R> {
    ShmTransport::run_threads(size, &Config::default(), f).expect("shm job starts")
}

/// One rank's whole workout; returns a digest that must be equal on every rank, and checks
/// the exact results on the way.
fn workout(t: &mut dyn Transport) -> Vec<u64> {
    let p = t.size();
    let me = t.rank();
    let g = Group::world(p);
    let mut digest = Vec::new();
    let algs = [
        Algorithm::Auto,
        Algorithm::Direct,
        Algorithm::Master,
        Algorithm::BinomialTree,
        Algorithm::RecursiveDoubling,
        Algorithm::Rabenseifner,
        Algorithm::Ring,
        Algorithm::Pipeline,
        Algorithm::Chain,
    ];
    // Sizes below and above the shm inline limit and the single-copy threshold.
    for n in [1usize, 100, 40_000] {
        for alg in algs {
            let opts = CollOptions {
                algorithm: alg,
                segment_bytes: 16 * 1024,
                ..CollOptions::default()
            };
            let mut v: Vec<i64> = (0..n).map(|i| (me * 1000 + i) as i64).collect();
            allreduce_with(t, &g, &mut v, &ReduceOp::Sum, &opts).unwrap();
            for (i, x) in v.iter().enumerate() {
                let want: i64 = (0..p).map(|r| (r * 1000 + i) as i64).sum();
                assert_eq!(*x, want, "{alg:?} n={n} element {i}");
            }
            let mut f: Vec<f64> = (0..n).map(|i| 1.0 / (me + i + 1) as f64).collect();
            allreduce_with(t, &g, &mut f, &ReduceOp::Sum, &opts).unwrap();
            digest.push(f.iter().fold(0u64, |h, x| h.rotate_left(5) ^ x.to_bits()));
        }
        let ordered = CollOptions {
            order: ReduceOrder::RankOrderedFold,
            ..CollOptions::default()
        };
        let mut f: Vec<f32> = (0..n).map(|i| (me * 7 + i) as f32 * 0.1).collect();
        allreduce_with(t, &g, &mut f, &ReduceOp::Sum, &ordered).unwrap();
        let mut want: Vec<f32> = (0..n).map(|i| i as f32 * 0.1).collect();
        for r in 1..p {
            for (i, w) in want.iter_mut().enumerate() {
                *w += (r * 7 + i) as f32 * 0.1;
            }
        }
        assert_eq!(f, want, "rank-ordered fold n={n}");
        for root in [0, p - 1] {
            let mut r: Vec<u32> = vec![me as u32 + 1; n];
            reduce_with(t, &g, root, &mut r, &ReduceOp::Max, &CollOptions::default()).unwrap();
            if me == root {
                assert!(r.iter().all(|&x| x == p as u32));
            }
            for alg in [
                Algorithm::Auto,
                Algorithm::BinomialTree,
                Algorithm::Pipeline,
                Algorithm::Chain,
            ] {
                let opts = CollOptions::with_algorithm(alg);
                let mut b: Vec<u8> = if me == root {
                    (0..n).map(|i| (i * 13 + root) as u8).collect()
                } else {
                    Vec::new()
                };
                broadcast_with(t, &g, root, &mut b, &opts).unwrap();
                assert_eq!(b.len(), n);
                assert!(b
                    .iter()
                    .enumerate()
                    .all(|(i, &x)| x == (i * 13 + root) as u8));
                let mut s: Vec<u16> = if me == root {
                    (0..n).map(|i| i as u16).collect()
                } else {
                    vec![0; n]
                };
                broadcast_slice_with(t, &g, root, &mut s, &opts).unwrap();
                assert!(s.iter().enumerate().all(|(i, &x)| x == i as u16));
            }
        }
    }
    let block = |r: usize, j: usize| vec![(r * 16 + j) as u8; (r + j) % 5 * 1000];
    for alg in [
        Algorithm::Auto,
        Algorithm::Linear,
        Algorithm::BinomialTree,
        Algorithm::Chain,
    ] {
        let opts = CollOptions::with_algorithm(alg);
        let got = gather_with(t, &g, 0, &block(me, 0), &opts).unwrap();
        if me == 0 {
            let want: Vec<Vec<u8>> = (0..p).map(|r| block(r, 0)).collect();
            assert_eq!(got.unwrap(), want);
        }
        let parts: Vec<Vec<u8>> = (0..p).map(|j| block(p - 1, j)).collect();
        let mine = scatter_with(t, &g, p - 1, (me == p - 1).then_some(&parts[..]), &opts).unwrap();
        assert_eq!(mine, block(p - 1, me));
        barrier_with(t, &g, &opts).unwrap();
    }
    for alg in [
        Algorithm::Auto,
        Algorithm::Direct,
        Algorithm::RecursiveDoubling,
        Algorithm::Ring,
        Algorithm::Chain,
    ] {
        let all = allgather_with(t, &g, &block(me, 1), &CollOptions::with_algorithm(alg)).unwrap();
        assert_eq!(all, (0..p).map(|r| block(r, 1)).collect::<Vec<_>>());
    }
    for alg in [Algorithm::Direct, Algorithm::Pairwise] {
        let parts: Vec<Vec<u8>> = (0..p).map(|j| block(me, j)).collect();
        let got = alltoall_with(t, &g, &parts, &CollOptions::with_algorithm(alg)).unwrap();
        assert_eq!(got, (0..p).map(|r| block(r, me)).collect::<Vec<_>>());
    }
    topology_workout(t);
    digest
}

/// Neighbour collectives on a periodic 1-D grid (X6) and the chain-following automatic
/// collectives (X7) meet the real backends.
fn topology_workout(t: &mut dyn Transport) {
    let (p, me) = (t.size(), t.rank());
    let cart = Cartesian::new(&[p], &[true]).unwrap();
    let g = Group::new((0..p).collect(), 1)
        .unwrap()
        .with_topology(Topology::Cartesian(cart))
        .unwrap();
    let got = neighbor_allgather(t, &g, &vec![me as u8; 3000]).unwrap();
    let (left, right) = ((me + p - 1) % p, (me + 1) % p);
    assert_eq!(
        got,
        vec![Some(vec![left as u8; 3000]), Some(vec![right as u8; 3000])]
    );
    let mut v = vec![me as u64; 10_000];
    ferry_coll::allreduce(t, &g, &mut v, &ReduceOp::Sum).unwrap();
    assert!(v.iter().all(|&x| x == (p * (p - 1) / 2) as u64));
    barrier_with(t, &g, &CollOptions::default()).unwrap();
}

#[test]
fn every_collective_over_shm() {
    for p in 2..=5 {
        let digests = run_shm(p, |mut t| {
            let d = workout(&mut t);
            t.finish().unwrap();
            d
        });
        assert!(digests.iter().all(|d| d == &digests[0]), "p={p}");
    }
}

#[test]
fn every_collective_over_tcp() {
    for p in 2..=4 {
        let digests = run_tcp(p, |mut t| {
            let d = workout(&mut t);
            t.finish().unwrap();
            d
        });
        assert!(digests.iter().all(|d| d == &digests[0]), "p={p}");
    }
}

#[test]
fn float_bits_agree_across_backends() {
    // The automatic choice may only differ between backends where every candidate gives the
    // same bits (select.rs): compare shm, tcp and the in-memory backend.
    let run = |t: &mut dyn Transport| {
        let p = t.size();
        let g = Group::world(p);
        let mut out = Vec::new();
        for n in [3usize, 5000, 70_000] {
            let mut f: Vec<f64> = (0..n)
                .map(|i| 1.0 / (t.rank() * 3 + i + 1) as f64)
                .collect();
            ferry_coll::allreduce(t, &g, &mut f, &ReduceOp::Sum).unwrap();
            out.push(f.iter().fold(0u64, |h, x| h.rotate_left(7) ^ x.to_bits()));
        }
        out
    };
    for p in [2, 3, 4] {
        let shm = run_shm(p, |mut t| {
            let r = run(&mut t);
            t.finish().unwrap();
            r
        });
        let tcp = run_tcp(p, |mut t| {
            let r = run(&mut t);
            t.finish().unwrap();
            r
        });
        let mem = ferry_core::mem::MemTransport::run(p, |mut t| run(&mut t));
        assert_eq!(shm, tcp, "p={p}");
        assert_eq!(shm, mem, "p={p}");
    }
}

#[test]
fn dead_peer_fails_the_collective_with_its_name_over_tcp() {
    let gate = std::sync::Barrier::new(3);
    let out = run_tcp(3, |mut t| {
        let g = Group::world(3);
        // Everyone talks once so that connections exist, then rank 2 goes away without BYE.
        let mut v = [1u32];
        let direct = CollOptions::with_algorithm(Algorithm::Direct);
        allreduce_with(&mut t, &g, &mut v, &ReduceOp::Sum, &direct).unwrap();
        // Nobody may still need one of rank 2's messages when it goes.
        gate.wait();
        if t.rank() == 2 {
            drop(t);
            return None;
        }
        let start = std::time::Instant::now();
        let mut w = vec![1u64; 1000];
        let err = allreduce_with(
            &mut t,
            &g,
            &mut w,
            &ReduceOp::Sum,
            &CollOptions::with_algorithm(Algorithm::Direct),
        )
        .unwrap_err();
        Some((err.to_string(), err.is_peer_failure(), start.elapsed()))
    });
    for (rank, o) in out.iter().enumerate().take(2) {
        let (msg, peer_failure, took) = o.as_ref().unwrap();
        assert!(*peer_failure, "{msg}");
        assert!(
            msg.starts_with(&format!("rank {rank}: allreduce")),
            "rank {rank}: {msg}"
        );
        assert!(
            msg.contains("rank 2"),
            "rank {rank} must name the dead peer: {msg}"
        );
        // A broken connection is noticed at once (a peer never reached would take
        // tcp.connect_timeout_ms).
        assert!(took.as_secs() < 5, "rank {rank} took {took:?}");
    }
}
