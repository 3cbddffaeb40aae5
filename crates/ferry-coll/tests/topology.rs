//! Virtual topologies (X6) and the chain collectives (X7) on the in-memory backend, with a
//! transport wrapper that records every peer a rank talks to; property tests of the grid
//! mapping.

use std::collections::BTreeSet;
use std::time::Duration;

use ferry_coll::{
    allgather, allreduce, allreduce_with, barrier, broadcast, broadcast_slice_with, gather_with,
    neighbor_allgather, neighbor_alltoall, reduce_with, scatter, Algorithm, Cartesian, CollOptions,
    Graph, Group, ReduceOp, Topology,
};
use ferry_core::mem::MemTransport;
use ferry_core::{Exchange, Result, Stats, Transport};
use proptest::prelude::*;

/// Records the peers of every operation it runs.
struct Peers {
    inner: MemTransport,
    seen: BTreeSet<usize>,
}

impl Transport for Peers {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn name(&self) -> &'static str {
        "mem-peers"
    }
    fn progress_exchange(&mut self, ex: &mut Exchange<'_>) -> Result<bool> {
        self.seen.extend(ex.sends.iter().map(|s| s.peer));
        self.seen.extend(ex.recvs.iter().map(|r| r.peer));
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

fn line(p: usize, periodic: bool) -> Group {
    let cart = Cartesian::new(&[p], &[periodic]).unwrap();
    Group::world(p)
        .with_topology(Topology::Cartesian(cart))
        .unwrap()
}

/// Every automatic collective on a 1-D grid gives the right result and talks to `me +- 1` only.
#[test]
fn collectives_on_a_line_talk_to_neighbours_only() {
    for p in 1..=9 {
        let out = MemTransport::run(p, |t| {
            let mut t = Peers {
                inner: t,
                seen: BTreeSet::new(),
            };
            let me = t.rank();
            let g = line(p, false);
            barrier(&mut t, &g).unwrap();
            let mut f: Vec<f64> = (0..300).map(|i| 1.0 / (me + i + 1) as f64).collect();
            allreduce(&mut t, &g, &mut f, &ReduceOp::Sum).unwrap();
            let mut big = vec![me as i64; 20_000];
            allreduce(&mut t, &g, &mut big, &ReduceOp::Sum).unwrap();
            let mut r = vec![me as u32 + 1; 3];
            reduce_with(
                &mut t,
                &g,
                p / 2,
                &mut r,
                &ReduceOp::Max,
                &CollOptions::default(),
            )
            .unwrap();
            let mut b = if me == p - 1 {
                b"from the end".to_vec()
            } else {
                vec![]
            };
            broadcast(&mut t, &g, p - 1, &mut b).unwrap();
            let gathered =
                gather_with(&mut t, &g, p / 3, &[me as u8; 2], &CollOptions::default()).unwrap();
            let all = allgather(&mut t, &g, &vec![me as u8; me]).unwrap();
            let parts: Vec<Vec<u8>> = (0..p).map(|i| vec![i as u8 * 3; i % 3]).collect();
            let mine = scatter(&mut t, &g, p / 2, (me == p / 2).then_some(&parts[..])).unwrap();
            (t.seen, f, big[7], r, b, gathered, all, mine)
        });
        // The strict rank-ordered left fold of the float inputs.
        let want: Vec<f64> = (0..300)
            .map(|i| {
                (0..p)
                    .map(|r| 1.0 / (r + i + 1) as f64)
                    .reduce(|a, b| a + b)
                    .unwrap()
            })
            .collect();
        for (me, (seen, f, big, r, b, gathered, all, mine)) in out.into_iter().enumerate() {
            let allowed: BTreeSet<usize> = [me.wrapping_sub(1), me + 1]
                .into_iter()
                .filter(|&n| n < p)
                .collect();
            assert!(
                seen.is_subset(&allowed),
                "p={p} rank {me} talked to {seen:?}"
            );
            assert_eq!(f, want, "p={p} rank {me}: not the left fold");
            assert_eq!(big, (p * (p - 1) / 2) as i64);
            if me == p / 2 {
                assert_eq!(r, vec![p as u32; 3]);
            } else {
                assert_eq!(r, vec![me as u32 + 1; 3], "a non-root's data changed");
            }
            assert_eq!(b, b"from the end");
            if me == p / 3 {
                let want: Vec<Vec<u8>> = (0..p).map(|i| vec![i as u8; 2]).collect();
                assert_eq!(gathered, Some(want));
            } else {
                assert_eq!(gathered, None);
            }
            let want_all: Vec<Vec<u8>> = (0..p).map(|i| vec![i as u8; i]).collect();
            assert_eq!(all, want_all);
            assert_eq!(mine, vec![me as u8 * 3; me % 3]);
        }
    }
}

/// Forced `Chain` gives the same bits as the other left-fold algorithms on a plain group, and a
/// large slice broadcast from every root arrives whole.
#[test]
fn forced_chain_matches_the_left_fold_and_every_root() {
    for p in [2usize, 3, 5, 8] {
        let out = MemTransport::run(p, |mut t| {
            let g = Group::world(p);
            let me = t.rank();
            let input: Vec<f32> = (0..1000).map(|i| (me * 7 + i) as f32 * 0.1).collect();
            let mut a = input.clone();
            allreduce_with(
                &mut t,
                &g,
                &mut a,
                &ReduceOp::Sum,
                &CollOptions::rank_ordered(),
            )
            .unwrap();
            let mut b = input;
            let chain = CollOptions {
                segment_bytes: 512,
                ..CollOptions::with_algorithm(Algorithm::Chain)
            };
            allreduce_with(&mut t, &g, &mut b, &ReduceOp::Sum, &chain).unwrap();
            let mut roots = Vec::new();
            for root in 0..p {
                let mut s = if me == root {
                    (0..5000u32).map(|i| i * root as u32).collect()
                } else {
                    vec![0u32; 5000]
                };
                broadcast_slice_with(&mut t, &g, root, &mut s, &chain).unwrap();
                roots.push(s[4999] == 4999 * root as u32);
            }
            (a == b, roots)
        });
        for (me, (same, roots)) in out.into_iter().enumerate() {
            assert!(same, "p={p} rank {me}: chain and left fold differ");
            assert!(roots.iter().all(|&ok| ok), "p={p} rank {me}: {roots:?}");
        }
    }
}

/// Neighbour exchange on grids, checked against neighbours computed by hand.
#[test]
fn cartesian_neighbour_exchange_by_hand() {
    // 2 x 3, dimension 0 not periodic, dimension 1 periodic:
    //   0 1 2
    //   3 4 5
    // Slots: (dim 0 behind, dim 0 ahead, dim 1 behind, dim 1 ahead).
    let hand: [[Option<usize>; 4]; 6] = [
        [None, Some(3), Some(2), Some(1)],
        [None, Some(4), Some(0), Some(2)],
        [None, Some(5), Some(1), Some(0)],
        [Some(0), None, Some(5), Some(4)],
        [Some(1), None, Some(3), Some(5)],
        [Some(2), None, Some(4), Some(3)],
    ];
    let out = MemTransport::run(6, |t| {
        let mut t = Peers {
            inner: t,
            seen: BTreeSet::new(),
        };
        let me = t.rank();
        let cart = Cartesian::new(&[2, 3], &[false, true]).unwrap();
        let g = Group::world(6)
            .with_topology(Topology::Cartesian(cart))
            .unwrap();
        let got = neighbor_allgather(&mut t, &g, &[me as u8]).unwrap();
        // Each part names its sender and the slot it was sent on.
        let parts: Vec<Vec<u8>> = (0..4).map(|s| vec![me as u8, s as u8]).collect();
        let a2a = neighbor_alltoall(&mut t, &g, &parts).unwrap();
        (got, a2a, t.seen)
    });
    for (me, (got, a2a, seen)) in out.into_iter().enumerate() {
        let want: Vec<Option<Vec<u8>>> =
            hand[me].iter().map(|n| n.map(|r| vec![r as u8])).collect();
        assert_eq!(got, want, "rank {me}");
        // What arrives "behind" was sent "ahead" by that neighbour, and vice versa.
        let want2: Vec<Option<Vec<u8>>> = hand[me]
            .iter()
            .enumerate()
            .map(|(slot, n)| n.map(|r| vec![r as u8, (slot ^ 1) as u8]))
            .collect();
        assert_eq!(a2a, want2, "rank {me}");
        let nb: BTreeSet<usize> = hand[me].iter().flatten().copied().collect();
        assert_eq!(seen, nb, "rank {me}");
    }
}

/// Periodic dimensions of extent 1 and 2: a member is its own neighbour, or both neighbours are
/// the same member; the two edges still keep their data apart.
#[test]
fn periodic_self_and_double_edges() {
    let out = MemTransport::run(2, |mut t| {
        let me = t.rank();
        let cart = Cartesian::new(&[2, 1], &[true, true]).unwrap();
        let g = Group::world(2)
            .with_topology(Topology::Cartesian(cart))
            .unwrap();
        let parts: Vec<Vec<u8>> = (0..4).map(|s| vec![me as u8, s as u8]).collect();
        neighbor_alltoall(&mut t, &g, &parts).unwrap()
    });
    for (me, got) in out.into_iter().enumerate() {
        let other = 1 - me as u8;
        let want = vec![
            Some(vec![other, 1]),
            Some(vec![other, 0]),
            Some(vec![me as u8, 3]),
            Some(vec![me as u8, 2]),
        ];
        assert_eq!(got, want, "rank {me}");
    }
}

/// A directed graph (a star into member 0 plus a ring) and a multigraph edge.
#[test]
fn graph_neighbour_exchange() {
    let p = 5;
    let out = MemTransport::run(p, |mut t| {
        let me = t.rank();
        let (sources, destinations) = if me == 0 {
            ((1..p).chain([4]).collect(), vec![1])
        } else {
            let next = (me + 1) % p;
            let mut d = vec![0, next];
            if me == 4 {
                d = vec![0, 0];
            }
            (vec![me - 1], d)
        };
        let g = Group::world(p)
            .with_topology(Topology::Graph(Graph::new(sources, destinations).unwrap()))
            .unwrap();
        let n = if me == 0 { 1 } else { 2 };
        let parts: Vec<Vec<u8>> = (0..n).map(|k| vec![me as u8, k as u8]).collect();
        neighbor_alltoall(&mut t, &g, &parts).unwrap()
    });
    // Member 0 hears from 1, 2, 3 on their slot 0, and from 4 twice (its slots 0 and 1).
    assert_eq!(
        out[0],
        vec![
            Some(vec![1, 0]),
            Some(vec![2, 0]),
            Some(vec![3, 0]),
            Some(vec![4, 0]),
            Some(vec![4, 1])
        ]
    );
    assert_eq!(out[1], vec![Some(vec![0, 0])]);
    for (me, got) in out.iter().enumerate().skip(2) {
        assert_eq!(got, &vec![Some(vec![me as u8 - 1, 1])], "rank {me}");
    }
}

#[test]
fn topology_errors_are_values() {
    let cart = Cartesian::new(&[3], &[false]).unwrap();
    let e = Group::world(4)
        .with_topology(Topology::Cartesian(cart))
        .unwrap_err();
    assert!(e.to_string().contains("grid of 3"), "{e}");
    let graph = Graph::new(vec![7], vec![]).unwrap();
    assert!(Group::world(4)
        .with_topology(Topology::Graph(graph))
        .is_err());
    let out = MemTransport::run(2, |mut t| {
        let plain = Group::world(2);
        let e = neighbor_allgather(&mut t, &plain, b"x").unwrap_err();
        let g = line(2, false);
        let e2 = neighbor_alltoall(&mut t, &g, &[]).unwrap_err();
        (e.to_string(), e2.to_string())
    });
    for (e, e2) in out {
        assert!(e.contains("no topology"), "{e}");
        assert!(e2.contains("0 parts for 2 destinations"), "{e2}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Index -> coordinates -> index is the identity; shifting forth and back returns; shift
    /// sources and destinations pair up; neighbour lists are symmetric.
    #[test]
    fn grid_mapping_is_consistent(
        dims in proptest::collection::vec(1usize..5, 1..4),
        periods_bits in 0u8..8,
        disp in -3isize..4,
    ) {
        let periods: Vec<bool> = (0..dims.len()).map(|d| periods_bits & (1 << d) != 0).collect();
        let c = Cartesian::new(&dims, &periods).unwrap();
        for i in 0..c.size() {
            let xy = c.coords(i).unwrap();
            prop_assert!(xy.iter().zip(&dims).all(|(x, n)| x < n));
            let back: Vec<isize> = xy.iter().map(|&x| x as isize).collect();
            prop_assert_eq!(c.index_of(&back).unwrap(), Some(i));
            for d in 0..dims.len() {
                let (src, dst) = c.shift(i, d, disp).unwrap();
                if let Some(j) = dst {
                    prop_assert_eq!(c.shift(j, d, disp).unwrap().0, Some(i));
                    // Only coordinate d moved.
                    let xj = c.coords(j).unwrap();
                    for e in 0..dims.len() {
                        if e != d {
                            prop_assert_eq!(xj[e], xy[e]);
                        }
                    }
                }
                if let Some(j) = src {
                    prop_assert_eq!(c.shift(j, d, disp).unwrap().1, Some(i));
                }
                if !periods[d] {
                    let moved = xy[d] as isize + disp;
                    prop_assert_eq!(dst.is_some(), (0..dims[d] as isize).contains(&moved));
                }
            }
            let n = c.neighbours(i).unwrap();
            prop_assert_eq!(n.len(), 2 * dims.len());
            for (slot, j) in n.iter().enumerate() {
                if let Some(j) = j {
                    prop_assert_eq!(c.neighbours(*j).unwrap()[slot ^ 1], Some(i));
                }
            }
        }
    }

    /// Balanced extents multiply to the member count and are sorted, largest first.
    #[test]
    fn dims_create_factors(n in 1usize..2000, nd in 1usize..5) {
        let dims = Cartesian::dims_create(n, nd).unwrap();
        prop_assert_eq!(dims.len(), nd);
        prop_assert_eq!(dims.iter().product::<usize>(), n);
        prop_assert!(dims.windows(2).all(|w| w[0] >= w[1]));
    }
}
