//! Several fault-tolerant communicators per process over the threads-as-ranks backend: each
//! has its own id, generation, revoke and agreement; a failure notice reaches the
//! communicators that contain the dead rank, including at ranks that never detected it
//! themselves, and the others go on; the table stays bounded over many dup/free cycles.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferry_coll::ReduceOp;
use ferry_core::mem::MemTransport;
use ferry_core::{Error, ErrorKind, Exchange, OpState, Result, Transport};
use ferry_ft::{Communicator, FailureMode, MessageMode, Options};

mod support;

use support::Hooked;

fn opts(failure: FailureMode, message: MessageMode) -> Options {
    Options::new(failure, message)
}

fn sum(c: &Communicator) -> Result<i64> {
    let mut v = [1i64];
    c.allreduce(&mut v, &ReduceOp::Sum)?;
    Ok(v[0])
}

#[test]
fn a_revoke_and_a_shrink_of_one_communicator_leave_the_others_working() {
    let res = MemTransport::run(4, |t| -> Result<()> {
        let w = t.rank();
        let world = Communicator::new(Box::new(t), opts(FailureMode::Shrink, MessageMode::Cont))?;
        let dup = world.dup_with(opts(FailureMode::Blank, MessageMode::Cont))?;
        let half = world
            .split(
                Some(w as u32 % 2),
                u32::MAX - w as u32,
                opts(FailureMode::Shrink, MessageMode::Nop),
            )?
            .expect("a color was given");
        assert_eq!(world.id(), 0);
        assert_ne!(dup.id(), world.id());
        assert!(half.id() != world.id() && half.id() != dup.id());
        assert_eq!(dup.options().failure, FailureMode::Blank);
        // The key orders the split: the higher world rank first.
        let expect: Vec<usize> = if w % 2 == 0 { vec![2, 0] } else { vec![3, 1] };
        assert_eq!(half.members(), &expect[..]);
        assert_eq!((sum(&world)?, sum(&dup)?, sum(&half)?), (4, 4, 2));

        // Rank 0 revokes the world: operations there fail everywhere, the others go on.
        if w == 0 {
            world.revoke()?;
        }
        let e = loop {
            match world.barrier() {
                Err(e) => break e,
                Ok(()) => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        assert_eq!(e.kind(), ErrorKind::Revoked, "rank {w}: {e}");
        assert!(world.is_revoked() && !dup.is_revoked() && !half.is_revoked());
        assert_eq!(sum(&dup)?, 4);
        assert_eq!(sum(&half)?, 2);
        assert_eq!(dup.agree(0b110 | w as u64 & 1)?, (0b110, vec![]));

        // Shrinking the world moves its generation only.
        let world = world.shrink()?;
        assert_eq!(
            (world.generation(), dup.generation(), half.generation()),
            (1, 0, 0)
        );
        assert_eq!(sum(&world)?, 4);

        // A revoke of one half concerns that half alone.
        if w == 1 {
            half.revoke()?;
        }
        if w % 2 == 1 {
            let e = half.barrier().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Revoked, "rank {w}: {e}");
        } else {
            assert_eq!(sum(&half)?, 2);
        }
        assert_eq!(sum(&world)?, 4);
        assert_eq!(sum(&dup)?, 4);
        half.free()?;
        dup.free()?;
        world.finish()
    });
    for (r, out) in res.into_iter().enumerate() {
        out.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
}

#[test]
fn split_with_no_color_gives_no_communicator_and_the_others_work() {
    let res = MemTransport::run(3, |t| -> Result<(bool, i64)> {
        let w = t.rank();
        let world = Communicator::new(Box::new(t), opts(FailureMode::Shrink, MessageMode::Cont))?;
        let color = (w != 1).then_some(7);
        let sub = world.split(color, 0, opts(FailureMode::Blank, MessageMode::Cont))?;
        let s = match &sub {
            Some(c) => sum(c)?,
            None => 0,
        };
        let got = sub.is_some();
        drop(sub);
        world.finish()?;
        Ok((got, s))
    });
    let res: Vec<(bool, i64)> = res.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(res, vec![(true, 2), (false, 0), (true, 2)]);
}

#[test]
fn creating_and_freeing_many_communicators_keeps_the_table_and_the_flows_bounded() {
    let res = MemTransport::run(3, |t| -> Result<(usize, usize, (usize, usize))> {
        let world = Communicator::new(Box::new(t), opts(FailureMode::Shrink, MessageMode::Cont))?;
        // The world's own collectives (an exchange and an agreement per dup) cycle through a
        // window of tags: run past it before counting.
        let cycle = |n: usize| -> Result<()> {
            for i in 0..n {
                let c = world.dup()?;
                if sum(&c)? != 3 {
                    return Err(
                        Error::new(ErrorKind::Protocol, "test").with_detail(format!("dup {i}"))
                    );
                }
                c.free()?;
            }
            Ok(())
        };
        cycle(300)?;
        let flows_before = world.raw_transport().flow_count().unwrap_or(0);
        // More than the ids a process can hold at once, and than the retired ones kept.
        cycle(300)?;
        let flows_after = world.raw_transport().flow_count().unwrap_or(usize::MAX);
        let table = world.communicators_in_use();
        // Ids in use at once are bounded: holding more than there are fails cleanly.
        let mut held = Vec::new();
        let err = loop {
            match world.dup() {
                Ok(c) => held.push(c),
                Err(e) => break e,
            }
            if held.len() > 1000 {
                panic!("no bound on communicators in use");
            }
        };
        assert_eq!(err.kind(), ErrorKind::ResourceExhausted, "{err}");
        assert_eq!(held.len(), 127, "{err}");
        drop(held);
        assert_eq!(sum(&world.dup()?)?, 3);
        world.finish()?;
        Ok((flows_before, flows_after, table))
    });
    for (r, out) in res.into_iter().enumerate() {
        let (before, after, table) = out.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        assert!(after <= before + 8, "rank {r}: flows {before} -> {after}");
        assert_eq!(table.0, 1, "rank {r}: {table:?}");
        assert!(table.1 <= 4, "rank {r}: {table:?}");
    }
}

/// A transport whose rank `dead` is gone: once it is set, this rank's transport reports any
/// pending operation with it as a failed peer, if this rank `detects` failures at all (the
/// others must learn it from notices).
fn killable(t: MemTransport, dead: Arc<AtomicUsize>, detects: bool) -> impl Transport {
    let hook = move |t: &MemTransport, ex: &Exchange<'_>| {
        let dead = dead.load(Ordering::Acquire);
        if !detects || dead == usize::MAX {
            return None;
        }
        let pending = ex
            .sends
            .iter()
            .any(|s| s.peer == dead && s.state != OpState::Done)
            || ex
                .recvs
                .iter()
                .any(|r| r.peer == dead && r.state != OpState::Done);
        pending.then(|| {
            Error::new(ErrorKind::PeerFailed, "exchange")
                .on_rank(t.rank())
                .with_peer(dead)
                .with_detail("killed by the test")
        })
    };
    Hooked::new(t, "mem", hook).polling()
}

/// World of 4 (SHRINK/CONT) split into A = {0, 1} and B = {2, 3} (BLANK/CONT). Rank 3 dies;
/// only rank 2 detects it. Ranks 0 and 1 learn it through the world's notice (they never
/// talked to rank 3 there): their world operation fails naming it, while A, which does not
/// contain it, goes on and lists no failed member. Rank 2's receive on B fails naming it;
/// after recovery B keeps its size with a gap.
#[test]
fn a_failure_notice_reaches_the_communicators_that_contain_the_dead_rank_only() {
    let dead = Arc::new(AtomicUsize::new(usize::MAX));
    let res = MemTransport::run(4, |t| -> Result<Vec<String>> {
        let w = t.rank();
        let t = killable(t, dead.clone(), w == 2);
        let world = Communicator::new(Box::new(t), opts(FailureMode::Shrink, MessageMode::Cont))?;
        let sub = world
            .split(
                Some(w as u32 / 2),
                0,
                opts(FailureMode::Blank, MessageMode::Cont),
            )?
            .expect("a color was given");
        world.barrier()?;
        let mut seen = Vec::new();
        if w == 3 {
            // Dies without a word once the barrier's messages are through: no orderly end,
            // nothing more sent.
            std::thread::sleep(Duration::from_millis(50));
            dead.store(3, Ordering::Release);
            std::mem::forget(sub);
            std::mem::forget(world);
            return Ok(seen);
        }
        if w == 2 {
            let mut buf = Vec::new();
            let e = sub.recv(1, 5, &mut buf).unwrap_err();
            seen.push(format!("B recv: {:?} peer {:?}", e.kind(), e.peer()));
            let sub = sub.recover()?;
            seen.push(format!(
                "B after recover: size {} live {}",
                sub.size(),
                sub.live_size()
            ));
            let e = sub.send(1, 5, b"x").unwrap_err();
            seen.push(format!("B gap: {:?}", e.kind()));
        } else {
            // A: no failure here, before and after rank 3's death.
            for _ in 0..20 {
                assert_eq!(sum(&sub)?, 2);
                std::thread::sleep(Duration::from_millis(2));
            }
            seen.push(format!("A failed members {:?}", sub.failed_members()));
        }
        let e = loop {
            match sum(&world) {
                Err(e) => break e,
                Ok(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        seen.push(format!("world: {:?} peer {:?}", e.kind(), e.peer()));
        let world = world.shrink()?;
        seen.push(format!(
            "world shrink {} {:?}",
            world.generation(),
            world.members()
        ));
        if w < 2 {
            assert_eq!(sum(&sub)?, 2);
            seen.push(format!("A generation {} still works", sub.generation()));
        }
        seen.push(format!("world sum {}", sum(&world)?));
        world.finish()?;
        Ok(seen)
    });
    let res: Vec<Vec<String>> = res
        .into_iter()
        .enumerate()
        .map(|(r, o)| o.unwrap_or_else(|e| panic!("rank {r}: {e}")))
        .collect();
    for r in [0, 1] {
        assert_eq!(
            res[r],
            vec![
                "A failed members []".to_string(),
                "world: PeerFailed peer Some(3)".to_string(),
                "world shrink 1 [0, 1, 2]".to_string(),
                "A generation 0 still works".to_string(),
                "world sum 3".to_string(),
            ],
            "rank {r}"
        );
    }
    assert_eq!(
        res[2],
        vec![
            "B recv: PeerFailed peer Some(3)".to_string(),
            "B after recover: size 2 live 1".to_string(),
            "B gap: InvalidArgument".to_string(),
            "world: PeerFailed peer Some(3)".to_string(),
            "world shrink 1 [0, 1, 2]".to_string(),
            "world sum 3".to_string(),
        ]
    );
}

/// The notice crosses over to communicators the detector is not in. Five ranks; the world is
/// freed after two splits: X = {0, 1, 2}, Y = {1, 2, 3}, and {3, 4}, {0, 4} without the
/// victim. Rank 2 dies and only rank 0 detects it (in X). Rank 1 learns it on X and floods it
/// on Y, so rank 3, which shares nothing with rank 0 but the freed world, has its operation on
/// Y fail naming rank 2 instead of waiting for it. Rank 4's communicators do not contain the
/// victim and see nothing.
#[test]
fn a_failure_notice_crosses_to_communicators_the_detector_is_not_in() {
    let dead = Arc::new(AtomicUsize::new(usize::MAX));
    let res = MemTransport::run(5, |t| -> Result<Vec<String>> {
        let w = t.rank();
        let t = killable(t, dead.clone(), w == 0);
        let world = Communicator::new(Box::new(t), opts(FailureMode::Shrink, MessageMode::Cont))?;
        let cont = opts(FailureMode::Shrink, MessageMode::Cont);
        let first = world
            .split(Some(u32::from(w >= 3)), 0, cont)?
            .expect("colored");
        let second = world
            .split(Some(u32::from(!(1..=3).contains(&w))), 0, cont)?
            .expect("colored");
        world.barrier()?;
        world.free()?;
        let mut seen = Vec::new();
        if w == 2 {
            std::thread::sleep(Duration::from_millis(50));
            dead.store(2, Ordering::Release);
            std::mem::forget(first);
            std::mem::forget(second);
            return Ok(seen);
        }
        // X is `first` at ranks 0, 1; Y is `second` at ranks 1, 3.
        let (x, y) = match w {
            0 => (Some(&first), None),
            1 => (Some(&first), Some(&second)),
            3 => (None, Some(&second)),
            _ => (None, None),
        };
        if w == 0 {
            let mut buf = Vec::new();
            let e = first.recv(2, 1, &mut buf).unwrap_err();
            seen.push(format!("X recv: {:?} peer {:?}", e.kind(), e.peer()));
        }
        for (name, c) in [("X", x), ("Y", y)] {
            let Some(c) = c else { continue };
            let e = loop {
                match sum(c) {
                    Err(e) => break e,
                    Ok(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            };
            seen.push(format!("{name}: {:?} peer {:?}", e.kind(), e.peer()));
        }
        for (name, c) in [("X", x), ("Y", y)] {
            let Some(c) = c else { continue };
            let c = c.shrink()?;
            seen.push(format!("{name} shrink {:?} sum {}", c.members(), sum(&c)?));
        }
        // The communicators without the victim: {3, 4} and {0, 4}.
        let clean: Vec<&Communicator> = match w {
            0 => vec![&second],
            3 => vec![&first],
            4 => vec![&first, &second],
            _ => vec![],
        };
        for c in clean {
            let s = sum(c)?;
            seen.push(format!(
                "{:?}: sum {s}, failed {:?}",
                c.members(),
                c.failed_members()
            ));
        }
        Ok(seen)
    });
    let res: Vec<Vec<String>> = res
        .into_iter()
        .enumerate()
        .map(|(r, o)| o.unwrap_or_else(|e| panic!("rank {r}: {e}")))
        .collect();
    assert_eq!(
        res[0],
        [
            "X recv: PeerFailed peer Some(2)",
            "X: PeerFailed peer Some(2)",
            "X shrink [0, 1] sum 2",
            "[0, 4]: sum 2, failed []"
        ]
    );
    assert_eq!(
        res[1],
        [
            "X: PeerFailed peer Some(2)",
            "Y: PeerFailed peer Some(2)",
            "X shrink [0, 1] sum 2",
            "Y shrink [1, 3] sum 2"
        ]
    );
    assert_eq!(
        res[3],
        [
            "Y: PeerFailed peer Some(2)",
            "Y shrink [1, 3] sum 2",
            "[3, 4]: sum 2, failed []"
        ]
    );
    assert_eq!(
        res[4],
        ["[3, 4]: sum 2, failed []", "[0, 4]: sum 2, failed []"]
    );
}
