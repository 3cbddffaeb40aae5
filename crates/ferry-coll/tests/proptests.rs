//! Property tests: random group sizes, message sizes, segment sizes and algorithms give the
//! exact integer results and the same float bits on every rank.

mod common;

use common::allreduce_algs;
use ferry_coll::{
    allgather_with, allreduce_with, alltoall_with, broadcast_slice_with, Algorithm, CollOptions,
    Group, ReduceOp, ReduceOrder,
};
use ferry_core::mem::MemTransport;
use ferry_core::Transport;
use proptest::prelude::*;

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(allreduce_algs())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn allreduce_random(
        p in 1usize..8,
        n in 0usize..300,
        seg in 8usize..512,
        alg in algorithm(),
        seed in any::<u64>(),
    ) {
        let opts = CollOptions { algorithm: alg, order: ReduceOrder::Auto, segment_bytes: seg };
        let value = |r: usize, i: usize| -> i64 {
            (seed.wrapping_mul(r as u64 + 1).wrapping_add(i as u64 * 7919) % 1_000_003) as i64 - 500_000
        };
        let out = MemTransport::run(p, |mut t| {
            let g = Group::world(p);
            let r = t.rank();
            let mut ints: Vec<i64> = (0..n).map(|i| value(r, i)).collect();
            allreduce_with(&mut t, &g, &mut ints, &ReduceOp::Sum, &opts).unwrap();
            let mut fl: Vec<f64> = (0..n).map(|i| value(r, i) as f64 / 7.0).collect();
            allreduce_with(&mut t, &g, &mut fl, &ReduceOp::Sum, &opts).unwrap();
            let mut mn: Vec<i64> = (0..n).map(|i| value(r, i)).collect();
            allreduce_with(&mut t, &g, &mut mn, &ReduceOp::Min, &opts).unwrap();
            (ints, fl.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), mn)
        });
        let want: Vec<i64> = (0..n).map(|i| (0..p).map(|r| value(r, i)).sum()).collect();
        let want_min: Vec<i64> = (0..n).map(|i| (0..p).map(|r| value(r, i)).min().unwrap()).collect();
        for (ints, bits, mn) in &out {
            prop_assert_eq!(ints, &want);
            prop_assert_eq!(bits, &out[0].1);
            prop_assert_eq!(mn, &want_min);
        }
    }

    #[test]
    fn rank_ordered_fold_random(
        p in 1usize..8,
        n in 1usize..200,
        seg in 8usize..512,
        alg in prop::sample::select(vec![Algorithm::Auto, Algorithm::Linear, Algorithm::Master, Algorithm::Direct, Algorithm::Pipeline]),
    ) {
        let opts = CollOptions { algorithm: alg, order: ReduceOrder::RankOrderedFold, segment_bytes: seg };
        let x = |r: usize, i: usize| ((r * 13 + i) as f32).sqrt() * 1e3 + 1.0 / (r as f32 + 1.0);
        let out = MemTransport::run(p, |mut t| {
            let g = Group::world(p);
            let r = t.rank();
            let mut v: Vec<f32> = (0..n).map(|i| x(r, i)).collect();
            allreduce_with(&mut t, &g, &mut v, &ReduceOp::Sum, &opts).unwrap();
            v.iter().map(|f| f.to_bits()).collect::<Vec<_>>()
        });
        let mut want: Vec<f32> = (0..n).map(|i| x(0, i)).collect();
        for r in 1..p {
            for (i, w) in want.iter_mut().enumerate() {
                *w += x(r, i);
            }
        }
        let want: Vec<u32> = want.iter().map(|f| f.to_bits()).collect();
        for bits in &out {
            prop_assert_eq!(bits, &want);
        }
    }

    #[test]
    fn blocks_of_random_lengths(
        p in 1usize..8,
        lens in prop::collection::vec(0usize..100, 64),
        alg in prop::sample::select(vec![Algorithm::Auto, Algorithm::Direct, Algorithm::Linear, Algorithm::RecursiveDoubling, Algorithm::Ring]),
        root_pick in any::<usize>(),
        seg in 1usize..64,
    ) {
        let len = |r: usize, j: usize| lens[(r * 8 + j) % lens.len()];
        let blk = |r: usize, j: usize| -> Vec<u8> { (0..len(r, j)).map(|i| (r * 7 + j * 3 + i) as u8).collect() };
        let root = root_pick % p;
        let out = MemTransport::run(p, |mut t| {
            let g = Group::world(p);
            let r = t.rank();
            let opts = CollOptions { algorithm: alg, ..CollOptions::default() };
            let all = allgather_with(&mut t, &g, &blk(r, 0), &opts).unwrap();
            let parts: Vec<Vec<u8>> = (0..p).map(|j| blk(r, j)).collect();
            let a2a_alg = if alg == Algorithm::Linear { Algorithm::Pairwise } else { Algorithm::Direct };
            let a2a = alltoall_with(&mut t, &g, &parts, &CollOptions::with_algorithm(a2a_alg)).unwrap();
            let mut b: Vec<u8> = if r == root { blk(root, 5) } else { vec![0; len(root, 5)] };
            let bopts = CollOptions { algorithm: Algorithm::Pipeline, segment_bytes: seg, ..CollOptions::default() };
            broadcast_slice_with(&mut t, &g, root, &mut b, &bopts).unwrap();
            (all, a2a, b)
        });
        let want_all: Vec<Vec<u8>> = (0..p).map(|j| blk(j, 0)).collect();
        for (r, (all, a2a, b)) in out.iter().enumerate() {
            prop_assert_eq!(all, &want_all);
            let want_a2a: Vec<Vec<u8>> = (0..p).map(|j| blk(j, r)).collect();
            prop_assert_eq!(a2a, &want_a2a);
            prop_assert_eq!(b, &blk(root, 5));
        }
    }
}
