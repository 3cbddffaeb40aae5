//! The communicator's typed operations on in-process jobs of several ranks.

use super::run_threads;
use crate::prelude::*;

#[test]
fn gather_family_places_blocks_by_rank() {
    let out = run_threads(4, |mut c: Comm| {
        let (r, n) = (c.rank(), c.size());
        let send = [r as u16, 100 + r as u16];
        let mut at_root = vec![0u16; if r == 3 { 2 * n } else { 0 }];
        c.gather_into(&send, &mut at_root, 3)?;
        if r == 3 {
            assert_eq!(at_root, [0, 100, 1, 101, 2, 102, 3, 103]);
        }
        // Block j of rank i's send is 10*i + j; after the all-to-all rank i holds 10*j + i.
        let send: Vec<i32> = (0..n).map(|j| (10 * r + j) as i32).collect();
        let mut recv = vec![0i32; n];
        for _ in 0..3 {
            // Repeated calls: sequence numbers keep consecutive collectives apart.
            c.alltoall_into(&send, &mut recv)?;
            let want: Vec<i32> = (0..n).map(|j| (10 * j + r) as i32).collect();
            assert_eq!(recv, want);
        }
        let g = c.gather(&[r as f32], 0)?;
        assert_eq!(g.is_some(), r == 0);
        let all = c.allgather::<u8>(&[])?;
        assert!(all.is_empty());
        c.allgather(&[r as u64])
    })
    .unwrap();
    assert!(out.iter().all(|v| v == &[0, 1, 2, 3]));
}

#[test]
fn reductions_and_broadcast_on_slices() {
    run_threads(3, |mut c: Comm| {
        let r = c.rank();
        let mut v = [r as i64, -(r as i64)];
        c.reduce(&mut v, 1, Op::Sum)?;
        if r == 1 {
            assert_eq!(v, [3, -3]);
        } else {
            assert_eq!(v, [r as i64, -(r as i64)]);
        }
        let mut out = [0.0f64; 2];
        c.allreduce_into(&[r as f64, 1.0], &mut out, Op::Max)?;
        assert_eq!(out, [2.0, 1.0]);
        let ordered =
            c.allreduce_value_with(0.1 * r as f64, Op::Sum, &CollOptions::rank_ordered())?;
        assert_eq!(ordered.to_bits(), ((0.0 + 0.1) + 0.2f64).to_bits());
        let mut b = [r as u8; 5];
        c.broadcast(&mut b, 2)?;
        assert_eq!(b, [2; 5]);
        c.finish()
    })
    .unwrap();
}

#[test]
fn bad_arguments_are_errors_naming_rank_and_operation() {
    let errs = run_threads(2, |mut c: Comm| {
        let r = c.rank();
        let e = c.send(&[1u8], 5, 0).unwrap_err();
        assert!(e.to_string().contains(&format!("rank {r}")), "{e}");
        assert!(e.to_string().contains("send"), "{e}");
        let e = c.allgather_into(&[1u8, 2], &mut [0u8; 3]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        // A receive buffer of the wrong length: an error on the receiver, not a panic.
        if r == 0 {
            c.send(&[1u32, 2, 3], 1, 9)?;
            Ok(String::new())
        } else {
            let mut two = [0u32; 2];
            let e = c.recv_into(&mut two, 0, 9).unwrap_err();
            Ok(e.to_string())
        }
    })
    .unwrap();
    assert!(errs[1].contains("12 bytes"), "{}", errs[1]);
    assert!(errs[1].contains("rank 1"), "{}", errs[1]);
}

#[test]
fn recv_vec_refuses_a_partial_element() {
    let errs = run_threads(2, |mut c: Comm| {
        if c.rank() == 0 {
            c.send(&[1u8, 2, 3], 1, 4)?;
            Ok(None)
        } else {
            Ok(c.recv_vec::<u32>(0, 4).err().map(|e| e.to_string()))
        }
    })
    .unwrap();
    let e = errs[1]
        .as_deref()
        .expect("receiving 3 bytes as u32 must fail");
    assert!(e.contains("3 bytes") && e.contains("u32"), "{e}");
}

#[test]
fn set_group_renumbers_and_scopes_collectives() {
    let out = run_threads(4, |mut c: Comm| {
        let wg = c.group().clone();
        let g = c.data().shrink(&wg, &[0])?;
        if c.world_rank() == 0 {
            let e = c.set_group(g).unwrap_err();
            assert!(e.to_string().contains("rank 0"), "{e}");
            // Not a member: ends without meeting the others.
            c.into_world().finish()?;
            return Ok((usize::MAX, 0));
        }
        c.set_group(g)?;
        assert_eq!((c.size(), c.rank()), (3, c.world_rank() - 1));
        // Only the three members take part; rank 0 has already left.
        let s = c.allreduce_value(c.world_rank(), Op::Sum)?;
        let mut all = [0usize; 3];
        c.allgather_into(&[c.world_rank()], &mut all)?;
        assert_eq!(all, [1, 2, 3]);
        let r = c.rank();
        c.finish()?;
        Ok((r, s))
    })
    .unwrap();
    assert_eq!(out[1..], [(0, 6), (1, 6), (2, 6)]);
}

#[test]
fn a_cartesian_communicator_keeps_results_and_offers_neighbour_exchange() {
    let out = run_threads(5, |mut c: Comm| {
        let r = c.rank();
        c.set_cartesian(&[5], &[true])?;
        assert_eq!(c.cart_coords()?, vec![r]);
        assert_eq!(c.cart_shift(0, 2)?, (Some((r + 3) % 5), Some((r + 2) % 5)));
        let n = c.neighbor_allgather(&[r as u16, 7])?;
        assert_eq!(
            n,
            vec![
                Some(vec![((r + 4) % 5) as u16, 7]),
                Some(vec![((r + 1) % 5) as u16, 7])
            ]
        );
        // The gather family along the chain, into the caller's buffers.
        let mut at_root = vec![0u32; if r == 2 { 10 } else { 0 }];
        c.gather_into(&[r as u32, 50 + r as u32], &mut at_root, 2)?;
        if r == 2 {
            assert_eq!(at_root, [0, 50, 1, 51, 2, 52, 3, 53, 4, 54]);
        }
        let mut all = vec![0i8; 5];
        c.allgather_into(&[-(r as i8)], &mut all)?;
        assert_eq!(all, [0, -1, -2, -3, -4]);
        let src: Vec<u64> = if r == 4 { (0..10).collect() } else { vec![] };
        let mut mine = [0u64; 2];
        c.scatter_into(&src, &mut mine, 4)?;
        assert_eq!(mine, [2 * r as u64, 2 * r as u64 + 1]);
        // A wrong buffer is still an error value, not a hang or a panic.
        let mut short = vec![0i8; 4];
        assert!(c.allgather_into(&[1i8], &mut short).is_err());
        let e = c.set_cartesian(&[2, 2], &[false, false]).unwrap_err();
        assert!(e.to_string().contains("grid of 4"), "{e}");
        let total = c.allreduce_value(r as u64, Op::Sum)?;
        c.finish()?;
        Ok(total)
    })
    .unwrap();
    assert_eq!(out, [10; 5]);
}

#[test]
fn persistent_collectives_free_their_flows() {
    // Without retirement every persistent collective would leave its flows (one per peer and
    // direction, plus the init's) in the transport's table: 300 of them, hundreds of entries.
    let counts = run_threads(4, |mut c: Comm| {
        let r = c.rank();
        let mut after_first = 0;
        for i in 0..300u32 {
            let mut b = c.bcast_init(vec![r as u32; 2], (i % 4) as usize)?;
            b.run(&mut c)?;
            assert_eq!(b.data()?, [i % 4, i % 4]);
            b.free(&mut c)?;
            let mut g = c.gather_init(vec![r as u8], 1)?;
            g.run(&mut c)?;
            if r == 1 {
                assert_eq!(g.output()?, Some(&[0u8, 1, 2, 3][..]));
            }
            g.free(&mut c)?;
            let mut a = c.allreduce_init(vec![1i32], Op::Sum)?;
            a.run(&mut c)?;
            assert_eq!(a.data()?, [4]);
            a.free(&mut c)?;
            let n = c.transport().flow_count().unwrap_or(0);
            if i == 0 {
                after_first = n;
            }
        }
        Ok((
            after_first,
            c.transport().flow_count().unwrap_or(usize::MAX),
        ))
    })
    .unwrap();
    for (first, last) in counts {
        assert!(last <= first + 4, "flows grew from {first} to {last}");
    }
}

#[test]
fn persistent_collective_on_a_cartesian_communicator_keeps_to_the_chain() {
    run_threads(5, |mut c: Comm| {
        c.set_cartesian(&[5], &[false])?;
        let b = c.bcast_init(vec![0u8; 3], 2)?;
        assert_eq!(b.algorithm(), crate::coll::Algorithm::Chain);
        let r = c.rank();
        let want: Vec<usize> = [r.wrapping_sub(1), r + 1]
            .into_iter()
            .filter(|&x| x < 5)
            .collect();
        assert_eq!(b.peers(), want);
        b.free(&mut c)
    })
    .unwrap();
}
