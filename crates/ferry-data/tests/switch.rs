//! Multi-rank tests of container switches (D4, D5, D6) on the in-memory backend
//! (threads as ranks).

use std::sync::Arc;

use ferry_core::mem::MemTransport;
use ferry_core::Transport;
use ferry_data::{
    Block, Container, DataFlow, Instance, LayoutOrder, Partitioner, Partitioning, ReduceOp, Space,
};
use proptest::prelude::*;

fn local_values_1d(c: &Container<f64>) -> Vec<(i64, f64)> {
    let mut out = Vec::new();
    for (no, r) in c.my_ranges().iter().enumerate() {
        let (_, view) = c.range_mapping(no).unwrap();
        for i in r.from()[0]..r.to()[0] {
            let off = (i - view.range.from()[0]) as usize;
            out.push((i, view.data[off]));
        }
    }
    out
}

#[test]
fn preserve_through_block_weighted_cyclic_and_master() {
    for n in [1usize, 2, 3, 4, 5] {
        let sums = MemTransport::run(n, |mut t| {
            let mut inst = Instance::for_transport(&t).unwrap();
            let s = Space::new1(1000).unwrap();
            let w = inst.world().clone();
            let master = Partitioning::new(&s, &w, &Partitioner::Master).unwrap();
            let block = Partitioning::new(&s, &w, &Partitioner::block()).unwrap();
            let weighted = Partitioning::new(
                &s,
                &w,
                &Partitioner::Block(Block {
                    cycles: 3,
                    index_weight: Some(Arc::new(|i| (i % 13) as f64)),
                    ..Block::default()
                }),
            )
            .unwrap();
            let mut c = Container::<f64>::new(&mut inst, "a", &s);
            c.switch_to(&mut t, &master, DataFlow::None, None).unwrap();
            if t.rank() == 0 {
                for (i, v) in c.local_data_mut().iter_mut().enumerate() {
                    *v = i as f64;
                }
            }
            let mut count = 0;
            for p in [&block, &weighted, &block, &master, &weighted] {
                c.switch_to(&mut t, p, DataFlow::Preserve, None).unwrap();
                for (i, v) in local_values_1d(&c) {
                    assert_eq!(v, i as f64, "rank {} index {i}", t.rank());
                }
                count += c.local_count();
            }
            count
        });
        assert_eq!(sums.iter().sum::<u64>(), 5000, "{n} ranks");
    }
}

#[test]
fn halo_exchange_2d_and_3d_fills_neighbours() {
    MemTransport::run(4, |mut t| {
        let mut inst = Instance::for_transport(&t).unwrap();
        let w = inst.world().clone();
        for (dims, s) in [
            (2, Space::new2(9, 7).unwrap()),
            (3, Space::new3(6, 5, 7).unwrap()),
        ] {
            let write = Partitioning::new(&s, &w, &Partitioner::Bisection).unwrap();
            for halo in [
                Partitioner::CornerHalo { depth: 1 },
                Partitioner::Halo { depth: 1 },
            ] {
                let read = Partitioning::derived(&s, &halo, &write).unwrap();
                let mut c = Container::<i64>::new(&mut inst, "g", &s);
                c.switch_to(&mut t, &write, DataFlow::None, None).unwrap();
                let enc = |x: i64, y: i64, z: i64| x + 100 * y + 10000 * z;
                for r in c.my_ranges().to_vec() {
                    for z in r.from()[2]..r.to()[2] {
                        for y in r.from()[1]..r.to()[1] {
                            for x in r.from()[0]..r.to()[0] {
                                c.set(&[x, y, z], enc(x, y, z)).unwrap();
                            }
                        }
                    }
                }
                for _ in 0..2 {
                    c.switch_to(&mut t, &read, DataFlow::Preserve, None)
                        .unwrap();
                    for r in c.my_ranges() {
                        for z in r.from()[2]..r.to()[2] {
                            for y in r.from()[1]..r.to()[1] {
                                for x in r.from()[0]..r.to()[0] {
                                    assert_eq!(c.get(&[x, y, z]).unwrap(), enc(x, y, z), "{dims}d");
                                }
                            }
                        }
                    }
                    c.switch_to(&mut t, &write, DataFlow::Preserve, None)
                        .unwrap();
                }
            }
        }
    });
}

/// Values whose float sum depends on the order: only a strict rank-ordered left fold gives
/// the expected bits, on every rank.
#[test]
fn sum_reduction_is_rank_ordered_left_fold() {
    let vals = [1e16, 1.0, -1e16, 1.0, 3.5, 1e-3];
    for n in 1..=6 {
        let want_all = vals[..n]
            .iter()
            .fold(None, |a: Option<f64>, v| Some(a.map_or(*v, |a| a + v)));
        let got = MemTransport::run(n, |mut t| {
            let mut inst = Instance::for_transport(&t).unwrap();
            let w = inst.world().clone();
            let s = Space::new1(3).unwrap();
            let all = Partitioning::new(&s, &w, &Partitioner::All).unwrap();
            let master = Partitioning::new(&s, &w, &Partitioner::Master).unwrap();
            let mut c = Container::<f64>::new(&mut inst, "s", &s);
            c.switch_to(&mut t, &all, DataFlow::None, None).unwrap();
            c.fill(vals[t.rank()]);
            // allreduce: All -> All
            let all2 = Partitioning::new(&s, &w, &Partitioner::All).unwrap();
            c.switch_to(&mut t, &all2, DataFlow::Preserve, Some(&ReduceOp::Sum))
                .unwrap();
            let a = c.local_data().to_vec();
            // reduce to master
            c.fill(vals[t.rank()]);
            c.switch_to(&mut t, &master, DataFlow::Preserve, Some(&ReduceOp::Sum))
                .unwrap();
            (a, c.local_data().to_vec())
        });
        for (r, (a, m)) in got.iter().enumerate() {
            assert!(
                a.iter().all(|v| v.to_bits() == want_all.unwrap().to_bits()),
                "n={n} rank {r}: {a:?}"
            );
            if r == 0 {
                assert_eq!(m, &vec![want_all.unwrap(); 3]);
            } else {
                assert!(m.is_empty());
            }
        }
    }
}

#[test]
fn min_max_prod_and_custom_reductions() {
    let out = MemTransport::run(4, |mut t| {
        let mut inst = Instance::for_transport(&t).unwrap();
        let w = inst.world().clone();
        let s = Space::new1(2).unwrap();
        let all = Partitioning::new(&s, &w, &Partitioner::All).unwrap();
        let all2 = Partitioning::new(&s, &w, &Partitioner::All).unwrap();
        let mut c = Container::<i32>::new(&mut inst, "r", &s);
        c.switch_to(&mut t, &all, DataFlow::None, None).unwrap();
        let r = t.rank() as i32;
        let mut res = Vec::new();
        // Non-commutative custom op: a*10 + b shows the fold order 0,1,2,3.
        let digits =
            ReduceOp::<i32>::custom(|a, b| a.iter_mut().zip(b).for_each(|(a, b)| *a = *a * 10 + b));
        for op in [
            ReduceOp::Min,
            ReduceOp::Max,
            ReduceOp::Prod,
            ReduceOp::Sum,
            digits,
        ] {
            c.switch_to(&mut t, &all, DataFlow::None, None).unwrap();
            c.fill(r + 1);
            c.switch_to(&mut t, &all2, DataFlow::Preserve, Some(&op))
                .unwrap();
            res.push(c.local_data()[0]);
        }
        res
    });
    for r in out {
        assert_eq!(r, vec![1, 4, 24, 10, 1234]);
    }
}

/// markov2 pattern: Init+Sum to overlapping write copies, accumulate, then Preserve+Sum back.
#[test]
fn init_then_sum_of_overlapping_copies() {
    let out = MemTransport::run(3, |mut t| {
        let mut inst = Instance::for_transport(&t).unwrap();
        let w = inst.world().clone();
        let s = Space::new1(30).unwrap();
        let read = Partitioning::new(&s, &w, &Partitioner::block()).unwrap();
        let write = Partitioning::new(
            &s,
            &w,
            &Partitioner::custom("everyone-writes-window", |ctx| {
                for task in 0..ctx.ntasks() {
                    let from = task as i64 * 7;
                    ctx.append(task, ferry_data::Range::new1(from, from + 20), 0)?;
                }
                Ok(())
            }),
        )
        .unwrap();
        let mut c = Container::<f64>::new(&mut inst, "m", &s);
        c.switch_to(&mut t, &read, DataFlow::None, None).unwrap();
        c.switch_to(&mut t, &write, DataFlow::Init, Some(&ReduceOp::Sum))
            .unwrap();
        assert!(c.local_data().iter().all(|v| *v == 0.0));
        for v in c.local_data_mut() {
            *v += 1.0;
        }
        c.switch_to(&mut t, &read, DataFlow::Preserve, Some(&ReduceOp::Sum))
            .unwrap();
        local_values_1d(&c)
    });
    let all: Vec<(i64, f64)> = out.into_iter().flatten().collect();
    assert_eq!(all.len(), 30);
    for (i, v) in all {
        let holders = (0..3).filter(|t| (t * 7..t * 7 + 20).contains(&i)).count();
        assert_eq!(v, holders as f64, "index {i}");
    }
}

/// vsum pattern: a partitioning in which rank 0 owns nothing migrates to the group without
/// rank 0; the container follows without moving data; later switches run on the subgroup.
#[test]
fn shrinked_group_migration() {
    let out = MemTransport::run(4, |mut t| {
        let mut inst = Instance::for_transport(&t).unwrap();
        let w = inst.world().clone();
        let s = Space::new1(100).unwrap();
        let master = Partitioning::new(&s, &w, &Partitioner::Master).unwrap();
        let tw = Partitioning::new(
            &s,
            &w,
            &Partitioner::Block(Block {
                task_weight: Some(Arc::new(|t| if t == 0 { 0.0 } else { 1.0 })),
                ..Block::default()
            }),
        )
        .unwrap();
        let mut c = Container::<f64>::new(&mut inst, "v", &s);
        c.switch_to(&mut t, &master, DataFlow::None, None).unwrap();
        if t.rank() == 0 {
            for (i, v) in c.local_data_mut().iter_mut().enumerate() {
                *v = i as f64;
            }
        }
        c.switch_to(&mut t, &tw, DataFlow::Preserve, None).unwrap();
        let small = inst.shrink(&w, &[0]).unwrap();
        let migrated = tw.migrate(&small).unwrap();
        let seq = c.prepare(&migrated, DataFlow::Preserve, false).unwrap();
        assert_eq!(seq.transition().sent_elems(), 0);
        c.switch_to(&mut t, &migrated, DataFlow::Preserve, None)
            .unwrap();
        let in_group = small.index_of(t.rank());
        let s3: f64 = local_values_1d(&c).iter().map(|(_, v)| v).sum();
        // On the subgroup: equal blocks over 3 tasks.
        let b3 = Partitioning::new(&s, &small, &Partitioner::block()).unwrap();
        c.switch_to(&mut t, &b3, DataFlow::Preserve, None).unwrap();
        for (i, v) in local_values_1d(&c) {
            assert_eq!(v, i as f64);
        }
        (in_group, s3)
    });
    assert_eq!(out[0], (None, 0.0));
    assert_eq!(out[1].0, Some(0));
    assert_eq!(out.iter().map(|o| o.1).sum::<f64>(), 4950.0);
}

#[test]
fn errors_are_values() {
    MemTransport::run(2, |mut t| {
        let mut inst = Instance::for_transport(&t).unwrap();
        let w = inst.world().clone();
        let s = Space::new1(10).unwrap();
        let other = Space::new1(11).unwrap();
        let p_other = Partitioning::new(&other, &w, &Partitioner::block()).unwrap();
        let block = Partitioning::new(&s, &w, &Partitioner::block()).unwrap();
        let mut c = Container::<u8>::new(&mut inst, "e", &s);
        let e = c
            .switch_to(&mut t, &p_other, DataFlow::None, None)
            .unwrap_err();
        assert!(e.to_string().contains("rank"), "{e}");
        c.switch_to(&mut t, &block, DataFlow::None, None).unwrap();
        let outside = if t.rank() == 0 { 7 } else { 2 };
        assert!(c.local_index(&[outside, 0, 0]).is_err());
        assert!(c.get(&[outside, 0, 0]).is_err());
        assert!(c.mapping(5).is_err());
        // Init with a custom operator has no neutral element.
        let op = ReduceOp::<u8>::custom(|_, _| {});
        assert!(c
            .switch_to(&mut t, &block, DataFlow::Init, Some(&op))
            .is_err());
        assert!(c.set_layout_order(LayoutOrder::Lexicographic).is_err());
        assert!(Partitioning::new(&Space::new2(3, 3).unwrap(), &w, &Partitioner::block()).is_err());
    });
}

#[test]
fn generic_paths_and_custom_layout_give_same_values() {
    let run = |generic: bool, zfast: bool| {
        MemTransport::run(3, move |mut t| {
            let mut inst = Instance::for_transport(&t).unwrap();
            inst.set_generic_layout(generic);
            let w = inst.world().clone();
            let s = Space::new3(5, 6, 7).unwrap();
            let write = Partitioning::new(&s, &w, &Partitioner::Bisection).unwrap();
            let read =
                Partitioning::derived(&s, &Partitioner::CornerHalo { depth: 1 }, &write).unwrap();
            let all = Partitioning::new(&s, &w, &Partitioner::All).unwrap();
            let mut c = Container::<f64>::new(&mut inst, "l", &s);
            if zfast {
                c.set_layout_order(LayoutOrder::Custom(Arc::new(|r| {
                    let (ey, ez) = (r.extent(1) as usize, r.extent(2) as usize);
                    [ey * ez, ez, 1]
                })))
                .unwrap();
            }
            c.switch_to(&mut t, &write, DataFlow::None, None).unwrap();
            for r in c.my_ranges().to_vec() {
                for z in r.from()[2]..r.to()[2] {
                    for y in r.from()[1]..r.to()[1] {
                        for x in r.from()[0]..r.to()[0] {
                            c.set(&[x, y, z], (x * 7 + y * 3 + z) as f64 * 0.1).unwrap();
                        }
                    }
                }
            }
            c.switch_to(&mut t, &read, DataFlow::Preserve, None)
                .unwrap();
            c.switch_to(&mut t, &all, DataFlow::Preserve, Some(&ReduceOp::Sum))
                .unwrap();
            let mut v = Vec::new();
            for z in 0..7 {
                for y in 0..6 {
                    for x in 0..5 {
                        v.push(c.get(&[x, y, z]).unwrap());
                    }
                }
            }
            v
        })
    };
    let base = run(false, false);
    assert_eq!(run(true, false), base);
    assert_eq!(run(false, true), base);
    assert_eq!(run(true, true), base);
    // index (x,y,z) held as halo by several ranks is summed: at least its own value
    assert!(base[0].iter().zip(&base[1]).all(|(a, b)| a == b));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random block partitionings: after any chain of preserving switches every rank holds
    /// the right values, on random rank counts.
    #[test]
    fn random_switch_chains_preserve_values(
        n in 1u64..200, p in 1usize..5,
        chain in proptest::collection::vec((1usize..3, 0u8..4), 1..5),
    ) {
        let res = MemTransport::run(p, |mut t| {
            let mut inst = Instance::for_transport(&t).unwrap();
            let w = inst.world().clone();
            let s = Space::new1(n).unwrap();
            let master = Partitioning::new(&s, &w, &Partitioner::Master).unwrap();
            let mut c = Container::<f64>::new(&mut inst, "p", &s);
            c.switch_to(&mut t, &master, DataFlow::None, None).unwrap();
            if t.rank() == 0 {
                for (i, v) in c.local_data_mut().iter_mut().enumerate() { *v = i as f64 * 0.5; }
            }
            for &(cycles, kind) in &chain {
                let part = match kind {
                    0 => Partitioner::All,
                    1 => Partitioner::Master,
                    2 => Partitioner::Block(Block { cycles, ..Block::default() }),
                    _ => Partitioner::Block(Block {
                        cycles,
                        index_weight: Some(Arc::new(|i| ((i * 31) % 7) as f64)),
                        ..Block::default()
                    }),
                };
                let np = Partitioning::new(&s, &w, &part).unwrap();
                c.switch_to(&mut t, &np, DataFlow::Preserve, None).unwrap();
                for (i, v) in local_values_1d(&c) {
                    if v != i as f64 * 0.5 { return false; }
                }
            }
            true
        });
        prop_assert!(res.iter().all(|&ok| ok));
    }
}

/// A partitioning and its halo share one placement: the switch between them runs in place,
/// values survive, and a pair that is not a halo pair keeps the double-buffered path.
#[test]
fn halo_pairs_switch_in_place() {
    MemTransport::run(3, |mut t| {
        let mut inst = Instance::for_transport(&t).unwrap();
        let w = inst.world().clone();
        let s = Space::new2(12, 9).unwrap();
        let write = Partitioning::new(&s, &w, &Partitioner::Bisection).unwrap();
        let read =
            Partitioning::derived(&s, &Partitioner::CornerHalo { depth: 1 }, &write).unwrap();
        let all = Partitioning::new(&s, &w, &Partitioner::All).unwrap();
        let mut c = Container::<f64>::new(&mut inst, "ip", &s);
        c.switch_to(&mut t, &write, DataFlow::None, None).unwrap();
        let own = c.my_ranges()[0];
        for y in own.from()[1]..own.to()[1] {
            for x in own.from()[0]..own.to()[0] {
                c.set(&[x, y, 0], (x * 100 + y) as f64).unwrap();
            }
        }
        assert!(c.share_layout(&write, &read).unwrap());
        // values moved once into the shared placement
        assert_eq!(
            c.get(&[own.from()[0], own.from()[1], 0]).unwrap(),
            (own.from()[0] * 100 + own.from()[1]) as f64
        );
        let mut seq = c.prepare(&read, DataFlow::Preserve, false).unwrap();
        assert!(seq.in_place());
        c.run(&mut t, &mut seq, None).unwrap();
        for r in c.my_ranges().to_vec() {
            for y in r.from()[1]..r.to()[1] {
                for x in r.from()[0]..r.to()[0] {
                    assert_eq!(c.get(&[x, y, 0]).unwrap(), (x * 100 + y) as f64);
                }
            }
        }
        assert!(!c
            .prepare(&all, DataFlow::Preserve, false)
            .unwrap()
            .in_place());
        // an action sequence bound before a layout change is refused, not misused
        c.switch_to(&mut t, &write, DataFlow::Preserve, None)
            .unwrap();
        let mut stale = c.prepare(&read, DataFlow::Preserve, false).unwrap();
        assert!(c.share_layout(&write, &all).unwrap());
        assert!(c.run(&mut t, &mut stale, None).is_err());
    });
}

/// An All -> All reduction runs as `ferry-coll`'s all-reduce (switch_to) or as a transition
/// (prepare/run); both must give the same bits, for small and large arrays (where the
/// collective picks other algorithms) and several rank counts.
#[test]
fn allreduce_path_matches_transition_fold_bitwise() {
    for n in [2usize, 3, 5] {
        for len in [7u64, 40_000] {
            let out = MemTransport::run(n, |mut t| {
                let mut inst = Instance::for_transport(&t).unwrap();
                let w = inst.world().clone();
                let s = Space::new1(len).unwrap();
                let all = Partitioning::new(&s, &w, &Partitioner::All).unwrap();
                let all2 = Partitioning::new(&s, &w, &Partitioner::All).unwrap();
                let init = |c: &mut Container<f64>, r: usize| {
                    for (i, v) in c.local_data_mut().iter_mut().enumerate() {
                        // magnitudes spread so that the summation order shows in the bits
                        *v = ((i * 7919 + r * 104_729) % 1000) as f64
                            * 10f64.powi((r as i32 * 5) % 17 - 8);
                    }
                };
                let mut a = Container::<f64>::new(&mut inst, "coll", &s);
                a.switch_to(&mut t, &all, DataFlow::None, None).unwrap();
                init(&mut a, t.rank());
                a.switch_to(&mut t, &all2, DataFlow::Preserve, Some(&ReduceOp::Sum))
                    .unwrap();
                let mut b = Container::<f64>::new(&mut inst, "trans", &s);
                b.switch_to(&mut t, &all, DataFlow::None, None).unwrap();
                init(&mut b, t.rank());
                let mut seq = b.prepare(&all2, DataFlow::Preserve, true).unwrap();
                b.run(&mut t, &mut seq, Some(&ReduceOp::Sum)).unwrap();
                let same = a
                    .local_data()
                    .iter()
                    .zip(b.local_data())
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                (same, a.local_data()[..3].to_vec())
            });
            assert!(out.iter().all(|o| o.0), "{n} ranks, {len} elements");
            assert!(out.windows(2).all(|w| w[0].1 == w[1].1));
        }
    }
}

/// A user element type (two fields) travels through switches and reduces with a custom
/// operator; f32 containers work like f64 ones.
#[test]
fn user_element_types_and_f32() {
    #[derive(Clone, Copy, Default, PartialEq, Debug)]
    #[repr(C)]
    struct MinLoc {
        value: f32,
        index: u32,
    }
    // SAFETY: f32 + u32, no padding, every bit pattern valid.
    unsafe impl ferry_core::Element for MinLoc {
        const NAME: &'static str = "MinLoc";
    }
    let out = MemTransport::run(3, |mut t| {
        let mut inst = Instance::for_transport(&t).unwrap();
        let w = inst.world().clone();
        let s = Space::new1(9).unwrap();
        let block = Partitioning::new(&s, &w, &Partitioner::block()).unwrap();
        let master = Partitioning::new(&s, &w, &Partitioner::Master).unwrap();
        let all = Partitioning::new(&s, &w, &Partitioner::All).unwrap();
        let mut c = Container::<MinLoc>::new(&mut inst, "minloc", &s);
        c.switch_to(&mut t, &block, DataFlow::None, None).unwrap();
        let r = c.my_ranges()[0];
        for i in r.from()[0]..r.to()[0] {
            let v = MinLoc {
                value: ((i * 5) % 7) as f32,
                index: i as u32,
            };
            c.set(&[i, 0, 0], v).unwrap();
        }
        c.switch_to(&mut t, &master, DataFlow::Preserve, None)
            .unwrap();
        let gathered: Vec<MinLoc> = c.local_data().to_vec();
        // user reduction over replicated copies: keep the smaller value (first on ties)
        let minloc = ReduceOp::<MinLoc>::custom(|acc, x| {
            for (a, b) in acc.iter_mut().zip(x) {
                if b.value < a.value {
                    *a = *b;
                }
            }
        });
        let mut m = Container::<MinLoc>::new(&mut inst, "m", &Space::new1(1).unwrap());
        let one = Space::new1(1).unwrap();
        let all1 = Partitioning::new(&one, &w, &Partitioner::All).unwrap();
        let all1b = Partitioning::new(&one, &w, &Partitioner::All).unwrap();
        m.switch_to(&mut t, &all1, DataFlow::None, None).unwrap();
        m.local_data_mut()[0] = MinLoc {
            value: 10.0 - t.rank() as f32,
            index: t.rank() as u32,
        };
        m.switch_to(&mut t, &all1b, DataFlow::Preserve, Some(&minloc))
            .unwrap();
        // built-in Sum is refused for a non-numeric type
        assert!(m
            .switch_to(&mut t, &all1, DataFlow::Preserve, Some(&ReduceOp::Sum))
            .is_err());
        let mut f = Container::<f32>::new(&mut inst, "f", &s);
        f.switch_to(&mut t, &all, DataFlow::None, None).unwrap();
        f.fill(0.5);
        f.switch_to(&mut t, &master, DataFlow::Preserve, Some(&ReduceOp::Max))
            .unwrap();
        (gathered, m.local_data()[0], f.local_data().to_vec())
    });
    let (g, m, f) = &out[0];
    assert_eq!(g.len(), 9);
    for (i, v) in g.iter().enumerate() {
        assert_eq!(v.index, i as u32);
        assert_eq!(v.value, ((i * 5) % 7) as f32);
    }
    assert_eq!(m.index, 2);
    assert_eq!(f, &vec![0.5f32; 9]);
    assert!(out.iter().all(|o| o.1 == *m));
}
