//! Every collective x algorithm x group sizes 1..9 (including non-powers of two and
//! sub-groups) on the in-memory backend (threads as ranks).

mod common;

use common::allreduce_algs;
use std::sync::Arc;
use std::time::Duration;

use ferry_coll::{
    allgather_with, allreduce, allreduce_with, alltoall_with, barrier_with, broadcast_slice_with,
    broadcast_with, gather_with, reduce_with, scatter_with, Algorithm, CollOptions, Group,
    ReduceOp, ReduceOrder,
};
use ferry_core::mem::MemTransport;
use ferry_core::{Exchange, Result, Stats, Transport};

const SIZES: std::ops::RangeInclusive<usize> = 1..=9;

fn opts(a: Algorithm) -> CollOptions {
    CollOptions {
        algorithm: a,
        order: ReduceOrder::Auto,
        // Small segments so that the pipelines run many steps even on short vectors.
        segment_bytes: 24,
    }
}

fn ordered(a: Algorithm) -> CollOptions {
    CollOptions {
        order: ReduceOrder::RankOrderedFold,
        ..opts(a)
    }
}

/// Inputs whose float sum depends on the order of additions.
fn input_f64(rank: usize, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let x = (rank * 31 + i * 7) as f64;
            if rank & 1 == 0 {
                1e16 / (x + 1.0)
            } else {
                0.1 * x + 1.0 / 3.0
            }
        })
        .collect()
}

fn left_fold_f64(p: usize, n: usize) -> Vec<f64> {
    let mut acc = input_f64(0, n);
    for r in 1..p {
        for (a, b) in acc.iter_mut().zip(input_f64(r, n)) {
            *a += b;
        }
    }
    acc
}

/// A composite element: the affine map `x -> a x + b` (wrapping arithmetic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
struct Aff {
    a: u64,
    b: u64,
}

// SAFETY: two u64 fields, no padding, every bit pattern is a valid value.
unsafe impl ferry_core::Element for Aff {
    const NAME: &'static str = "Aff";
}

/// An associative, non-commutative operator: composition of affine maps (`l` then `r`).
fn affine() -> ReduceOp<Aff> {
    ReduceOp::custom(|acc: &mut [Aff], x: &[Aff]| {
        for (l, r) in acc.iter_mut().zip(x) {
            *l = Aff {
                a: r.a.wrapping_mul(l.a),
                b: r.a.wrapping_mul(l.b).wrapping_add(r.b),
            };
        }
    })
}

fn input_affine(rank: usize, pairs: usize) -> Vec<Aff> {
    (0..pairs)
        .map(|i| Aff {
            a: (rank * 3 + i + 2) as u64,
            b: (rank * 5 + 7 * i + 1) as u64,
        })
        .collect()
}

fn left_fold_affine(p: usize, pairs: usize) -> Vec<Aff> {
    let op = affine();
    let mut acc = input_affine(0, pairs);
    for r in 1..p {
        if let ReduceOp::Custom(f) = &op {
            f(&mut acc, &input_affine(r, pairs));
        }
    }
    acc
}

#[test]
fn allreduce_every_algorithm_every_size() {
    for p in SIZES {
        for alg in allreduce_algs() {
            for n in [0usize, 1, 5, 40] {
                let out = MemTransport::run(p, |mut t| {
                    let g = Group::world(p);
                    let mut ints: Vec<i64> = (0..n).map(|i| (t.rank() * 100 + i) as i64).collect();
                    allreduce_with(&mut t, &g, &mut ints, &ReduceOp::Sum, &opts(alg)).unwrap();
                    let mut fl = input_f64(t.rank(), n);
                    allreduce_with(&mut t, &g, &mut fl, &ReduceOp::Sum, &opts(alg)).unwrap();
                    let mut mx: Vec<u32> =
                        (0..n).map(|i| ((t.rank() * 7 + i) % 5) as u32).collect();
                    allreduce_with(&mut t, &g, &mut mx, &ReduceOp::Max, &opts(alg)).unwrap();
                    (ints, fl.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), mx)
                });
                let want: Vec<i64> = (0..n)
                    .map(|i| (0..p).map(|r| (r * 100 + i) as i64).sum())
                    .collect();
                let want_max: Vec<u32> = (0..n)
                    .map(|i| (0..p).map(|r| ((r * 7 + i) % 5) as u32).max().unwrap())
                    .collect();
                for (r, (ints, bits, mx)) in out.iter().enumerate() {
                    assert_eq!(ints, &want, "p={p} {alg:?} n={n} rank {r}");
                    assert_eq!(
                        bits, &out[0].1,
                        "p={p} {alg:?} n={n}: float bits differ on rank {r}"
                    );
                    assert_eq!(mx, &want_max, "p={p} {alg:?} n={n} rank {r}");
                }
                // Sanity: the float result is close to the exact sum.
                let fold = left_fold_f64(p, n);
                for (b, f) in out[0].1.iter().zip(&fold) {
                    let x = f64::from_bits(*b);
                    assert!((x - f).abs() <= 1e-6 * f.abs().max(1.0), "{x} vs {f}");
                }
            }
        }
    }
}

#[test]
fn rank_ordered_fold_is_bit_identical_across_algorithms() {
    for p in SIZES {
        let n = 33;
        let want: Vec<u64> = left_fold_f64(p, n).iter().map(|x| x.to_bits()).collect();
        for alg in [
            Algorithm::Auto,
            Algorithm::Linear,
            Algorithm::Master,
            Algorithm::Direct,
            Algorithm::Pipeline,
        ] {
            let out = MemTransport::run(p, |mut t| {
                let g = Group::world(p);
                let mut fl = input_f64(t.rank(), n);
                allreduce_with(&mut t, &g, &mut fl, &ReduceOp::Sum, &ordered(alg)).unwrap();
                let mut red = input_f64(t.rank(), n);
                let root = p / 2;
                reduce_with(&mut t, &g, root, &mut red, &ReduceOp::Sum, &ordered(alg)).unwrap();
                (
                    fl.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    (t.rank() == root).then(|| red.iter().map(|x| x.to_bits()).collect::<Vec<_>>()),
                )
            });
            for (r, (bits, red)) in out.iter().enumerate() {
                assert_eq!(bits, &want, "allreduce p={p} {alg:?} rank {r}");
                if let Some(red) = red {
                    assert_eq!(red, &want, "reduce p={p} {alg:?}");
                }
            }
        }
        // Tree-shaped algorithms refuse the strict order instead of silently ignoring it.
        let errs = MemTransport::run(p, |mut t| {
            let g = Group::world(p);
            let mut v = [1.0f64];
            allreduce_with(
                &mut t,
                &g,
                &mut v,
                &ReduceOp::Sum,
                &ordered(Algorithm::Ring),
            )
            .unwrap_err()
            .to_string()
        });
        assert!(errs[0].contains("rank order"), "{}", errs[0]);
    }
}

#[test]
fn custom_noncommutative_op_keeps_group_order() {
    for p in SIZES {
        let pairs = 9;
        let want = left_fold_affine(p, pairs);
        for alg in allreduce_algs()
            .into_iter()
            .filter(|a| *a != Algorithm::Ring)
        {
            let out = MemTransport::run(p, |mut t| {
                let g = Group::world(p);
                let mut v = input_affine(t.rank(), pairs);
                allreduce_with(&mut t, &g, &mut v, &affine(), &opts(alg)).unwrap();
                let mut w = input_affine(t.rank(), pairs);
                let root = (p * 2) / 3;
                // Recursive doubling has no reduce variant; the binomial tree stands in.
                let ralg = if matches!(alg, Algorithm::RecursiveDoubling | Algorithm::Rabenseifner)
                {
                    Algorithm::BinomialTree
                } else {
                    alg
                };
                reduce_with(&mut t, &g, root, &mut w, &affine(), &opts(ralg)).unwrap();
                let unchanged = t.rank() == root || w == input_affine(t.rank(), pairs);
                (v, (t.rank() == root).then_some(w), unchanged)
            });
            for (r, (v, w, unchanged)) in out.iter().enumerate() {
                assert_eq!(v, &want, "allreduce p={p} {alg:?} rank {r}");
                if let Some(w) = w {
                    assert_eq!(w, &want, "reduce p={p} {alg:?}");
                }
                assert!(
                    unchanged,
                    "reduce p={p} {alg:?} changed non-root {r}'s input"
                );
            }
        }
        if p > 1 {
            let errs = MemTransport::run(p, |mut t| {
                let g = Group::world(p);
                let mut v = input_affine(t.rank(), 1);
                allreduce_with(&mut t, &g, &mut v, &affine(), &opts(Algorithm::Ring)).is_err()
            });
            assert!(
                errs.iter().all(|&e| e),
                "ring must refuse a custom operator"
            );
        }
    }
}

#[test]
fn reduce_every_algorithm_every_root() {
    let algs = [
        Algorithm::Auto,
        Algorithm::Linear,
        Algorithm::BinomialTree,
        Algorithm::Pipeline,
        Algorithm::Hierarchical,
    ];
    for p in SIZES {
        for alg in algs {
            for root in 0..p {
                let out = MemTransport::run(p, |mut t| {
                    let g = Group::world(p);
                    let mut v: Vec<i32> = (0..6).map(|i| (t.rank() as i32 + 1) * (i + 1)).collect();
                    let before = v.clone();
                    reduce_with(&mut t, &g, root, &mut v, &ReduceOp::Sum, &opts(alg)).unwrap();
                    (v, before)
                });
                let s: i32 = (1..=p as i32).sum();
                let want: Vec<i32> = (1..=6).map(|i| s * i).collect();
                for (r, (v, before)) in out.iter().enumerate() {
                    if r == root {
                        assert_eq!(v, &want, "p={p} {alg:?} root={root}");
                    } else {
                        assert_eq!(v, before, "p={p} {alg:?} root={root}: non-root changed");
                    }
                }
            }
        }
    }
}

#[test]
fn broadcast_every_algorithm_every_root() {
    let algs = [
        Algorithm::Auto,
        Algorithm::Linear,
        Algorithm::BinomialTree,
        Algorithm::Pipeline,
    ];
    for p in SIZES {
        for alg in algs {
            for root in 0..p {
                for len in [0usize, 3, 100] {
                    let out = MemTransport::run(p, |mut t| {
                        let g = Group::world(p);
                        let mut v = if t.rank() == root {
                            (0..len).map(|i| (i * 3 + root) as u8).collect()
                        } else {
                            vec![9u8; 1]
                        };
                        broadcast_with(&mut t, &g, root, &mut v, &opts(alg)).unwrap();
                        let mut s: Vec<u16> = if t.rank() == root {
                            (0..len as u16).collect()
                        } else {
                            vec![0; len]
                        };
                        broadcast_slice_with(&mut t, &g, root, &mut s, &opts(alg)).unwrap();
                        (v, s)
                    });
                    let want: Vec<u8> = (0..len).map(|i| (i * 3 + root) as u8).collect();
                    let want_s: Vec<u16> = (0..len as u16).collect();
                    for (r, (v, s)) in out.iter().enumerate() {
                        assert_eq!(v, &want, "p={p} {alg:?} root={root} len={len} rank {r}");
                        assert_eq!(s, &want_s, "p={p} {alg:?} root={root} len={len} rank {r}");
                    }
                }
            }
        }
    }
}

#[test]
fn barrier_every_algorithm() {
    for p in SIZES {
        for alg in [
            Algorithm::Auto,
            Algorithm::Linear,
            Algorithm::BinomialTree,
            Algorithm::RecursiveDoubling,
        ] {
            let counter = std::sync::atomic::AtomicUsize::new(0);
            let out = MemTransport::run(p, |mut t| {
                let g = Group::world(p);
                // Nobody may leave the barrier before everybody has arrived.
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if t.rank() == p - 1 {
                    std::thread::sleep(Duration::from_millis(5));
                }
                barrier_with(&mut t, &g, &opts(alg)).unwrap();
                counter.load(std::sync::atomic::Ordering::SeqCst)
            });
            assert!(out.iter().all(|&c| c == p), "p={p} {alg:?}: {out:?}");
        }
    }
}

fn block(rank: usize, to: usize) -> Vec<u8> {
    // Different lengths per sender and receiver, including empty blocks.
    (0..(rank * 3 + to) % 7)
        .map(|i| (rank * 16 + to + i) as u8)
        .collect()
}

#[test]
fn gather_scatter_allgather_alltoall_every_algorithm() {
    for p in SIZES {
        for alg in [Algorithm::Auto, Algorithm::Linear, Algorithm::BinomialTree] {
            for root in 0..p {
                let out = MemTransport::run(p, |mut t| {
                    let g = Group::world(p);
                    let me = t.rank();
                    let got = gather_with(&mut t, &g, root, &block(me, 0), &opts(alg)).unwrap();
                    let parts: Vec<Vec<u8>> = (0..p).map(|j| block(root, j)).collect();
                    let mine = scatter_with(
                        &mut t,
                        &g,
                        root,
                        (me == root).then_some(&parts[..]),
                        &opts(alg),
                    )
                    .unwrap();
                    (got, mine)
                });
                for (r, (got, mine)) in out.iter().enumerate() {
                    if r == root {
                        let want: Vec<Vec<u8>> = (0..p).map(|j| block(j, 0)).collect();
                        assert_eq!(got.as_ref().unwrap(), &want, "gather p={p} {alg:?}");
                    } else {
                        assert!(got.is_none());
                    }
                    assert_eq!(mine, &block(root, r), "scatter p={p} {alg:?} root={root}");
                }
            }
        }
        for alg in [
            Algorithm::Auto,
            Algorithm::Direct,
            Algorithm::Linear,
            Algorithm::RecursiveDoubling,
            Algorithm::Ring,
        ] {
            let out = MemTransport::run(p, |mut t| {
                let g = Group::world(p);
                let mine = block(t.rank(), 1);
                allgather_with(&mut t, &g, &mine, &opts(alg)).unwrap()
            });
            let want: Vec<Vec<u8>> = (0..p).map(|j| block(j, 1)).collect();
            assert!(out.iter().all(|o| o == &want), "allgather p={p} {alg:?}");
        }
        for alg in [Algorithm::Auto, Algorithm::Direct, Algorithm::Pairwise] {
            let out = MemTransport::run(p, |mut t| {
                let g = Group::world(p);
                let parts: Vec<Vec<u8>> = (0..p).map(|j| block(t.rank(), j)).collect();
                alltoall_with(&mut t, &g, &parts, &opts(alg)).unwrap()
            });
            for (r, got) in out.iter().enumerate() {
                let want: Vec<Vec<u8>> = (0..p).map(|j| block(j, r)).collect();
                assert_eq!(got, &want, "alltoall p={p} {alg:?} rank {r}");
            }
        }
    }
}

#[test]
fn subgroups_run_side_by_side_and_never_match() {
    // Two disjoint sub-groups in scrambled order plus the world group, interleaved.
    let p = 9;
    let out = MemTransport::run(p, |mut t| {
        let me = t.rank();
        let world = Group::world(p);
        let odd = Group::new(vec![7, 1, 5, 3], 1).unwrap();
        let even = Group::new(vec![8, 0, 4, 2, 6], 2).unwrap();
        let mine = if me % 2 == 1 { &odd } else { &even };
        let mut results = Vec::new();
        for alg in allreduce_algs() {
            let mut v = vec![me as u64 + 1; 3];
            allreduce_with(&mut t, mine, &mut v, &ReduceOp::Sum, &opts(alg)).unwrap();
            results.push(v[0]);
            let mut w = vec![1u64; 2];
            allreduce(&mut t, &world, &mut w, &ReduceOp::Sum).unwrap();
            results.push(w[0]);
        }
        // Root index 1 of each sub-group.
        let mut b = if mine.my_index(me).unwrap() == 1 {
            vec![me as u8]
        } else {
            Vec::new()
        };
        broadcast_with(&mut t, mine, 1, &mut b, &opts(Algorithm::Auto)).unwrap();
        results.push(b[0] as u64);
        results
    });
    for (r, res) in out.iter().enumerate() {
        let (sum, root) = if r % 2 == 1 {
            (2 + 4 + 6 + 8, 1)
        } else {
            (1 + 3 + 5 + 7 + 9, 0)
        };
        for pair in res[..res.len() - 1].chunks(2) {
            assert_eq!(pair, &[sum, 9], "rank {r}");
        }
        assert_eq!(res[res.len() - 1], root, "rank {r}");
    }
}

#[test]
fn non_members_and_bad_arguments_are_errors() {
    let out = MemTransport::run(3, |mut t| {
        let g = Group::new(vec![0, 1], 4).unwrap();
        let mut v = [1i32];
        let me = t.rank();
        if me == 2 {
            let e = allreduce(&mut t, &g, &mut v, &ReduceOp::Sum).unwrap_err();
            return e.to_string();
        }
        let e = broadcast_with(&mut t, &g, 5, &mut vec![], &CollOptions::default()).unwrap_err();
        let s = e.to_string();
        let e2 = allgather_with(&mut t, &g, b"x", &opts(Algorithm::Pipeline)).unwrap_err();
        format!("{s} | {e2}")
    });
    assert!(out[2].contains("not a member"), "{}", out[2]);
    assert!(out[0].contains("root index 5"), "{}", out[0]);
    assert!(out[1].contains("not available for allgather"), "{}", out[1]);
}

#[test]
fn failed_peer_names_collective_rank_and_peer() {
    let gate = std::sync::Barrier::new(2);
    let out = MemTransport::run(2, |mut t| {
        let g = Group::world(2);
        if t.rank() == 1 {
            drop(t);
            gate.wait();
            return String::new();
        }
        gate.wait();
        let mut v = vec![1u8; 4];
        broadcast_with(&mut t, &g, 0, &mut v, &opts(Algorithm::Linear))
            .unwrap_err()
            .to_string()
    });
    let e = &out[0];
    assert!(
        e.starts_with("rank 0: broadcast (peer rank 1): peer failed"),
        "{e}"
    );
}

/// A memory transport that reports `per_node` consecutive ranks per node (or round-robin),
/// to exercise the node-aware path.
struct Nodes {
    inner: MemTransport,
    per_node: usize,
    round_robin: bool,
}

impl Transport for Nodes {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn name(&self) -> &'static str {
        "mem-nodes"
    }
    fn node_of(&self, rank: usize) -> usize {
        if self.round_robin {
            rank % self.per_node
        } else {
            rank / self.per_node
        }
    }
    fn progress_exchange(&mut self, ex: &mut Exchange<'_>) -> Result<bool> {
        self.inner.progress_exchange(ex)
    }
    fn wait_for_input(&mut self, timeout: Duration) -> Result<()> {
        self.inner.wait_for_input(timeout)
    }
    fn wait_policy(&self) -> ferry_core::WaitPolicy {
        self.inner.wait_policy()
    }
    fn stats(&self) -> Stats {
        self.inner.stats()
    }
}

#[test]
fn node_aware_paths_keep_results_and_order() {
    for p in 3..=9 {
        for (per_node, rr) in [(2, false), (3, false), (2, true)] {
            let pairs = 4;
            let want = left_fold_affine(p, pairs);
            let out = MemTransport::run(p, |t| {
                let mut t = Nodes {
                    inner: t,
                    per_node,
                    round_robin: rr,
                };
                let g = Group::world(p);
                let mut s: Vec<i64> = vec![t.rank() as i64 + 1; 50];
                allreduce(&mut t, &g, &mut s, &ReduceOp::Sum).unwrap();
                let mut forced = vec![t.rank() as i64 + 1; 5000];
                allreduce_with(
                    &mut t,
                    &g,
                    &mut forced,
                    &ReduceOp::Sum,
                    &opts(Algorithm::Hierarchical),
                )
                .unwrap();
                let mut a = input_affine(t.rank(), pairs);
                // Auto must keep group order for a non-commutative operator on any layout.
                allreduce(&mut t, &g, &mut a, &affine()).unwrap();
                let mut r = vec![t.rank() as i64 + 1; 3];
                reduce_with(
                    &mut t,
                    &g,
                    p - 1,
                    &mut r,
                    &ReduceOp::Sum,
                    &CollOptions::default(),
                )
                .unwrap();
                (s[0], forced[4999], a, (t.rank() == p - 1).then_some(r[0]))
            });
            let total = (p * (p + 1) / 2) as i64;
            for (r, (s, f, a, red)) in out.iter().enumerate() {
                assert_eq!(
                    (*s, *f),
                    (total, total),
                    "p={p} per_node={per_node} rr={rr} rank {r}"
                );
                assert_eq!(a, &want, "p={p} per_node={per_node} rr={rr} rank {r}");
                if let Some(red) = red {
                    assert_eq!(*red, total);
                }
            }
        }
    }
}

#[test]
fn many_consecutive_collectives_wrap_the_sequence_window() {
    // More collectives than the tag's sequence window, with early arrivals: flows stay FIFO.
    let out = MemTransport::run(4, |mut t| {
        let g = Group::world(4);
        let mut acc = 0u64;
        for i in 0..600u64 {
            let mut v = [t.rank() as u64 + i];
            allreduce(&mut t, &g, &mut v, &ReduceOp::Sum).unwrap();
            acc = acc.wrapping_mul(31).wrapping_add(v[0]);
        }
        acc
    });
    assert!(out.iter().all(|&a| a == out[0]));
    let mut want = 0u64;
    for i in 0..600u64 {
        want = want.wrapping_mul(31).wrapping_add(6 + 4 * i);
    }
    assert_eq!(out[0], want);
}

#[test]
fn custom_op_via_arc() {
    let op: ReduceOp<f32> = ReduceOp::Custom(Arc::new(|a: &mut [f32], b: &[f32]| {
        for (x, y) in a.iter_mut().zip(b) {
            *x = x.max(*y) + 1.0;
        }
    }));
    let out = MemTransport::run(5, |mut t| {
        let g = Group::world(5);
        let mut v = [t.rank() as f32];
        // Not even associative: only the strict left fold gives a defined answer.
        allreduce_with(&mut t, &g, &mut v, &op, &CollOptions::rank_ordered()).unwrap();
        v[0]
    });
    let mut acc = 0f32;
    for r in 1..5 {
        acc = acc.max(r as f32) + 1.0;
    }
    assert!(out.iter().all(|&x| x == acc), "{out:?} vs {acc}");
}

#[test]
fn two_members_give_the_same_bits_with_every_algorithm() {
    // The backend may pick the algorithm for 2 members (select.rs): that is only sound if
    // every algorithm computes the same bits there.
    let n = 301;
    let mut seen: Option<Vec<u64>> = None;
    for alg in allreduce_algs() {
        let out = MemTransport::run(2, |mut t| {
            let g = Group::world(2);
            let mut fl = input_f64(t.rank(), n);
            allreduce_with(&mut t, &g, &mut fl, &ReduceOp::Sum, &opts(alg)).unwrap();
            fl.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        });
        assert_eq!(out[0], out[1]);
        match &seen {
            None => seen = Some(out[0].clone()),
            Some(s) => assert_eq!(s, &out[0], "{alg:?} differs"),
        }
    }
}

#[test]
fn auto_choice_follows_the_measured_table() {
    use ferry_coll::allreduce_choice as choice;
    let any = ReduceOrder::Auto;
    assert_eq!(choice(2, 8, true, any, "shm"), Algorithm::RecursiveDoubling);
    assert_eq!(choice(2, 1 << 20, true, any, "shm"), Algorithm::Ring);
    assert_eq!(
        choice(2, 1 << 20, true, any, "tcp"),
        Algorithm::RecursiveDoubling
    );
    assert_eq!(
        choice(2, 1 << 20, false, any, "shm"),
        Algorithm::RecursiveDoubling
    );
    for backend in ["tcp", "shm", "hybrid"] {
        // Beyond 2 members the order class never depends on the backend: only shm picks
        // another algorithm of the same class (the direct exchange, tree fold) for 3-4
        // members and tiny data (`tree_class_algorithms_agree_bit_for_bit`).
        for p in [3, 4, 5, 9] {
            let small = if backend == "shm" && p <= 4 {
                Algorithm::Direct
            } else {
                Algorithm::RecursiveDoubling
            };
            assert_eq!(choice(p, 8, true, any, backend), small, "{backend} p={p}");
            assert_eq!(
                choice(p, 256, false, any, backend),
                small,
                "{backend} p={p}"
            );
            assert_eq!(
                choice(p, 257, true, any, backend),
                Algorithm::RecursiveDoubling
            );
            assert_eq!(
                choice(p, 1 << 20, true, any, backend),
                Algorithm::Rabenseifner
            );
        }
    }
    let ord = ReduceOrder::RankOrderedFold;
    assert_eq!(choice(4, 8, true, ord, "tcp"), Algorithm::Direct);
    assert_eq!(choice(8, 8, true, ord, "tcp"), Algorithm::Master);
    assert_eq!(choice(4, 1 << 20, true, ord, "tcp"), Algorithm::Pipeline);
}

#[test]
fn tree_class_algorithms_agree_bit_for_bit() {
    // Rabenseifner equals recursive doubling for every size; both equal the binomial tree when
    // the group size is a power of two or 3, 6, 7; the direct strategy equals the tree always
    // (select.rs relies on these classes).
    for p in SIZES {
        for n in [1usize, 3, 17, 256] {
            let run = |alg: Algorithm| {
                MemTransport::run(p, |mut t| {
                    let g = Group::world(p);
                    let mut fl = input_f64(t.rank(), n);
                    allreduce_with(&mut t, &g, &mut fl, &ReduceOp::Sum, &opts(alg)).unwrap();
                    fl.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                })
            };
            let rd = run(Algorithm::RecursiveDoubling);
            let rab = run(Algorithm::Rabenseifner);
            let tree = run(Algorithm::BinomialTree);
            // The direct exchange folds in the tree's parenthesisation unless rank order is
            // asked for: the same bits as the tree for every group size.
            assert_eq!(run(Algorithm::Direct), tree, "direct p={p} n={n}");
            assert!(rd.iter().all(|r| r == &rd[0]));
            assert_eq!(rab, rd, "p={p} n={n}");
            if p.is_power_of_two() || [3, 6, 7].contains(&p) {
                assert_eq!(tree, rd, "p={p} n={n}");
            }
        }
    }
}

#[test]
fn auto_barrier_is_dissemination_up_to_four_members_then_the_tree() {
    // Messages the whole job sends: dissemination p * ceil(log2 p), tree 2 (p - 1).
    for (p, want) in [(3usize, 6u64), (4, 8), (5, 8), (16, 30), (33, 64)] {
        let sent = MemTransport::run(p, |mut t| {
            let g = Group::world(p);
            barrier_with(&mut t, &g, &CollOptions::default()).unwrap();
            t.stats().sent.iter().map(|s| s.messages).sum::<u64>()
        });
        assert_eq!(sent.iter().sum::<u64>(), want, "p={p}");
    }
}
