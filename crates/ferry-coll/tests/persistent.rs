//! Persistent broadcast, gather and allreduce on the in-memory backend (threads as ranks):
//! every algorithm x root x group size 1..9, several starts with new contents each, the same
//! bits as the one-shot collectives, mismatched inits, failed peers, and a start that does not
//! wait for its peers.

use ferry_coll::{
    allreduce_with, Algorithm, CollOptions, Group, Persistent, ReduceOp, ReduceOrder,
};
use ferry_core::mem::MemTransport;
use ferry_core::{MsgKey, Transport};

const SIZES: std::ops::RangeInclusive<usize> = 1..=9;
const ROUNDS: usize = 3;

fn opts(a: Algorithm) -> CollOptions {
    CollOptions {
        algorithm: a,
        order: ReduceOrder::Auto,
        // Small segments so that the pipelined broadcasts run several steps.
        segment_bytes: 8,
    }
}

/// A group of its own for each persistent collective (generation `g`).
fn group(p: usize, g: u32) -> Group {
    Group::new((0..p).collect(), g).expect("group")
}

fn value(round: usize, rank: usize, i: usize) -> i64 {
    (round * 1000 + rank * 10 + i) as i64
}

#[test]
fn broadcast_every_algorithm_every_root_several_starts() {
    for p in SIZES {
        for alg in [
            Algorithm::Auto,
            Algorithm::Linear,
            Algorithm::BinomialTree,
            Algorithm::Chain,
            Algorithm::Pipeline,
        ] {
            for n in [0usize, 1, 5] {
                MemTransport::run(p, |mut t| {
                    let me = t.rank();
                    for root in 0..p {
                        let g = group(p, 10 + root as u32);
                        let mut pc =
                            Persistent::broadcast(&mut t, g, root, vec![-1i64; n], &opts(alg))
                                .expect("init");
                        assert_ne!(pc.algorithm(), Algorithm::Auto);
                        for round in 0..ROUNDS {
                            if me == root {
                                for (i, x) in pc.data_mut().unwrap().iter_mut().enumerate() {
                                    *x = value(round, root, i);
                                }
                            }
                            pc.start(&mut t).expect("start");
                            pc.wait(&mut t).expect("wait");
                            let want: Vec<i64> = (0..n).map(|i| value(round, root, i)).collect();
                            assert_eq!(pc.data().unwrap(), &want[..], "{alg:?} p{p} root{root}");
                        }
                        assert_eq!(pc.completed(), ROUNDS as u64);
                    }
                });
            }
        }
    }
}

#[test]
fn gather_every_algorithm_every_root_several_starts() {
    for p in SIZES {
        for alg in [
            Algorithm::Auto,
            Algorithm::Linear,
            Algorithm::BinomialTree,
            Algorithm::Chain,
        ] {
            for n in [0usize, 1, 3] {
                MemTransport::run(p, |mut t| {
                    let me = t.rank();
                    for root in 0..p {
                        let g = group(p, 10 + root as u32);
                        let mut pc = Persistent::gather(&mut t, g, root, vec![0i64; n], &opts(alg))
                            .expect("init");
                        for round in 0..ROUNDS {
                            for (i, x) in pc.data_mut().unwrap().iter_mut().enumerate() {
                                *x = value(round, me, i);
                            }
                            pc.run(&mut t).expect("run");
                            let out = pc.output().unwrap();
                            if me == root {
                                let want: Vec<i64> = (0..p)
                                    .flat_map(|r| (0..n).map(move |i| value(round, r, i)))
                                    .collect();
                                assert_eq!(out, Some(&want[..]), "{alg:?} p{p} root{root} n{n}");
                            } else {
                                assert_eq!(out, None);
                            }
                        }
                    }
                });
            }
        }
    }
}

/// Inputs whose float sum depends on the order of additions.
fn input_f64(round: usize, rank: usize, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let x = (rank * 31 + i * 7 + round) as f64;
            if rank & 1 == 0 {
                1e16 / (x + 1.0)
            } else {
                -(x + 0.1) / 3.0
            }
        })
        .collect()
}

#[test]
fn allreduce_gives_the_bits_of_the_one_shot_algorithm() {
    for p in SIZES {
        for (alg, one_shot, order) in [
            (
                Algorithm::BinomialTree,
                Algorithm::BinomialTree,
                ReduceOrder::Auto,
            ),
            (Algorithm::Chain, Algorithm::Chain, ReduceOrder::Auto),
            // The rank-ordered fold: chain, the same bits as the linear fold.
            (
                Algorithm::Auto,
                Algorithm::Linear,
                ReduceOrder::RankOrderedFold,
            ),
        ] {
            let n = 7;
            MemTransport::run(p, |mut t| {
                let me = t.rank();
                let o = CollOptions { order, ..opts(alg) };
                let mut pc =
                    Persistent::allreduce(&mut t, group(p, 50), vec![0.0f64; n], ReduceOp::Sum, &o)
                        .expect("init");
                let world = Group::world(p);
                for round in 0..ROUNDS {
                    pc.data_mut()
                        .unwrap()
                        .copy_from_slice(&input_f64(round, me, n));
                    pc.run(&mut t).expect("run");
                    let mut want = input_f64(round, me, n);
                    let oo = CollOptions {
                        order,
                        ..opts(one_shot)
                    };
                    allreduce_with(&mut t, &world, &mut want, &ReduceOp::Sum, &oo).unwrap();
                    let got: Vec<u64> = pc.data().unwrap().iter().map(|x| x.to_bits()).collect();
                    let want: Vec<u64> = want.iter().map(|x| x.to_bits()).collect();
                    assert_eq!(got, want, "{alg:?} {order:?} p{p} round {round}");
                }
            });
        }
    }
}

#[test]
fn a_custom_operator_keeps_group_order() {
    // Concatenation of decimal digits: associative, not commutative.
    let cat = ReduceOp::custom(|acc: &mut [u64], x: &[u64]| {
        for (a, b) in acc.iter_mut().zip(x) {
            let mut shift = 10;
            while shift <= *b {
                shift *= 10;
            }
            *a = *a * shift + *b;
        }
    });
    for alg in [Algorithm::BinomialTree, Algorithm::Chain] {
        let out = MemTransport::run(5, |mut t| {
            let me = t.rank() as u64;
            let mut pc =
                Persistent::allreduce(&mut t, group(5, 3), vec![me + 1], cat.clone(), &opts(alg))
                    .unwrap();
            pc.run(&mut t).unwrap();
            pc.data().unwrap()[0]
        });
        assert_eq!(out, vec![12345; 5], "{alg:?}");
    }
}

#[test]
fn mismatched_inits_are_errors_naming_the_peer() {
    let out = MemTransport::run(3, |mut t| {
        let me = t.rank();
        let n = if me == 1 { 5 } else { 4 };
        Persistent::broadcast(
            &mut t,
            group(3, 7),
            0,
            vec![0u32; n],
            &opts(Algorithm::Linear),
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    });
    let e0 = out[0].as_ref().unwrap_err();
    assert!(e0.starts_with("rank 0: broadcast (peer rank 1)"), "{e0}");
    assert!(
        e0.contains(
            "rank 1 initialised a broadcast (linear) from root 0 over 3 members, 5 elements"
        ),
        "{e0}"
    );
    let e1 = out[1].as_ref().unwrap_err();
    assert!(
        e1.contains(
            "rank 0 initialised a broadcast (linear) from root 0 over 3 members, 4 elements"
        ),
        "{e1}"
    );
    assert!(out[2].is_ok(), "{:?}", out[2]);
}

#[test]
fn bad_arguments_are_errors() {
    let out = MemTransport::run(2, |mut t| {
        vec![
            Persistent::broadcast(
                &mut t,
                group(2, 1),
                2,
                vec![0u8; 1],
                &opts(Algorithm::Linear),
            )
            .unwrap_err()
            .to_string(),
            Persistent::gather(&mut t, group(2, 1), 0, vec![0u8; 1], &opts(Algorithm::Ring))
                .unwrap_err()
                .to_string(),
            Persistent::allreduce(
                &mut t,
                group(2, 1),
                vec![0u8; 1],
                ReduceOp::Sum,
                &CollOptions {
                    order: ReduceOrder::RankOrderedFold,
                    ..opts(Algorithm::BinomialTree)
                },
            )
            .unwrap_err()
            .to_string(),
            Persistent::broadcast(
                &mut t,
                Group::new(vec![0, 5], 1).unwrap(),
                0,
                vec![0u8; 1],
                &opts(Algorithm::Linear),
            )
            .unwrap_err()
            .to_string(),
        ]
    });
    let e = &out[0];
    assert!(e[0].contains("root index 2 out of range"), "{}", e[0]);
    assert!(
        e[1].contains(
            "`ring` is not available for a persistent gather (one of auto, linear, binomial, \
             chain)"
        ),
        "{}",
        e[1]
    );
    assert!(e[2].contains("rank-ordered fold"), "{}", e[2]);
    assert!(e[3].contains("group member 5 is not a rank"), "{}", e[3]);
}

#[test]
fn a_started_collective_refuses_a_second_start_and_buffer_access() {
    MemTransport::run(2, |mut t| {
        let me = t.rank();
        let mut pc = Persistent::broadcast(
            &mut t,
            group(2, 1),
            0,
            vec![7u16; 3],
            &opts(Algorithm::Linear),
        )
        .unwrap();
        if me == 1 {
            // The receiver's start cannot complete before the root starts (below, after the
            // root heard from us): it stays started.
            pc.start(&mut t).unwrap();
            assert!(pc.is_active());
            let e = pc.start(&mut t).unwrap_err().to_string();
            assert!(
                e.contains("start while the persistent broadcast is started"),
                "{e}"
            );
            assert!(pc.data().is_err());
            assert!(pc.data_mut().is_err());
            t.send(0, MsgKey::user(9), b"go").unwrap();
            pc.wait(&mut t).unwrap();
        } else {
            let mut go = Vec::new();
            t.recv(1, MsgKey::user(9), &mut go).unwrap();
            pc.data_mut().unwrap().copy_from_slice(&[1, 2, 3]);
            pc.run(&mut t).unwrap();
        }
        assert!(!pc.is_active());
        assert_eq!(pc.data().unwrap(), &[1, 2, 3]);
        // Waiting with nothing started is a no-op.
        pc.wait(&mut t).unwrap();
    });
}

/// Start does not wait for peers: every non-root starts, then tells the root over
/// point-to-point, and only then does the root start. A start that blocked until the data
/// arrived would deadlock here (and fail with the transport's timeout).
#[test]
fn start_returns_before_the_peers_take_part() {
    for alg in [Algorithm::Linear, Algorithm::BinomialTree, Algorithm::Chain] {
        MemTransport::run(4, |mut t| {
            let me = t.rank();
            let mut pc =
                Persistent::broadcast(&mut t, group(4, 2), 0, vec![0u32; 2], &opts(alg)).unwrap();
            for round in 0..ROUNDS as u32 {
                if me == 0 {
                    for r in 1..4 {
                        let mut go = Vec::new();
                        t.recv(r, MsgKey::user(round), &mut go).unwrap();
                    }
                    pc.data_mut().unwrap().copy_from_slice(&[round, round + 1]);
                    pc.start(&mut t).unwrap();
                } else {
                    pc.start(&mut t).unwrap();
                    t.send(0, MsgKey::user(round), &[]).unwrap();
                }
                pc.wait(&mut t).unwrap();
                assert_eq!(pc.data().unwrap(), &[round, round + 1], "{alg:?}");
            }
        });
    }
}

/// (The in-memory backend notices a dead peer when sending to it; receiving from dead peers
/// is covered through the launcher, `crates/ferry/tests/persistent.rs`.)
#[test]
fn a_failed_peer_is_named_by_wait_and_later_starts() {
    let gate = std::sync::Barrier::new(2);
    let out = MemTransport::run(2, |mut t| {
        let mut pc = Persistent::broadcast(
            &mut t,
            group(2, 4),
            0,
            vec![1u8; 2],
            &opts(Algorithm::Linear),
        )
        .unwrap();
        if t.rank() == 1 {
            drop(pc);
            drop(t);
            gate.wait();
            return (String::new(), String::new());
        }
        gate.wait();
        let first = pc.run(&mut t).unwrap_err().to_string();
        let again = pc.start(&mut t).unwrap_err().to_string();
        (first, again)
    });
    let (first, again) = &out[0];
    assert!(
        first.starts_with("rank 0: broadcast (peer rank 1): peer failed"),
        "{first}"
    );
    assert!(
        again.starts_with("rank 0: broadcast (peer rank 1): peer failed"),
        "{again}"
    );
    assert!(again.contains("an earlier start failed"), "{again}");
}

#[test]
fn the_schedule_peers_are_the_algorithms_pairs() {
    let out = MemTransport::run(8, |mut t| {
        let chain = Persistent::broadcast(
            &mut t,
            group(8, 1),
            3,
            vec![0u8; 4],
            &opts(Algorithm::Chain),
        )
        .unwrap()
        .peers();
        let tree = Persistent::gather(
            &mut t,
            group(8, 2),
            0,
            vec![0u8; 4],
            &opts(Algorithm::BinomialTree),
        )
        .unwrap()
        .peers();
        (chain, tree)
    });
    assert_eq!(out[3].0, vec![2, 4]);
    assert_eq!(out[0].0, vec![1]);
    assert_eq!(out[7].0, vec![6]);
    // Binomial tree from 0 over 8: 0 talks to 1, 2, 4; 4 to 0, 5, 6; 7 to 6.
    assert_eq!(out[0].1, vec![1, 2, 4]);
    assert_eq!(out[4].1, vec![0, 5, 6]);
    assert_eq!(out[7].1, vec![6]);
}
