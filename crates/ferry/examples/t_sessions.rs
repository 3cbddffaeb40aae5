//! t_sessions: test program of sessions and process sets (X1-X4). Every rank:
//! 1. creates a session, prints `rank W: N sets: NAME(SIZE) ...`; rank 0 also prints the
//!    errors for an unknown set name and an out-of-range set index;
//! 2. makes a communicator over `ferry://world` (tag `world`) and allreduces the world ranks;
//! 3. under an MPMD launch (`ferry run`'s or mpirun's), makes one over its application's set
//!    `ferry://app/K`, allreduces there and shows that the first rank of the next application
//!    cannot be reached through it (an error, not a hang); over its application (or the
//!    world) it runs a ring shift, a broadcast and a sum through the generic
//!    `ferry::Communicator` trait;
//! 4. within its application (or the world), makes communicators of two sessions with the same
//!    tag and one with another tag, and shows that their messages never match each other's;
//!    declares a periodic 1-D grid on another one and checks its neighbours and a sum, then an
//!    open line (coordinates, shifts, neighbour all-to-all) and a directed ring graph;
//! 5. finalizes the first session (its communicators fail, the second's still work), then the
//!    second, and creates a third session that works again.
//!
//! The peer program of the MPMD test is t_mpmd_peer, which does steps 1 and 2 (and 3 without
//! the cross-application attempt). Usage: `t_sessions`.

use std::process::ExitCode;

use ferry::coll::ReduceOp;
use ferry::session::Session;

fn check(cond: bool, what: String) -> ferry::Result<()> {
    if cond {
        Ok(())
    } else {
        Err(ferry::Error::new(ferry::ErrorKind::Protocol, "t_sessions").with_detail(what))
    }
}

/// A ring shift, a broadcast and a sum written once for every communicator type.
fn ring<C: ferry::Communicator>(c: &mut C) -> ferry::Result<(u64, f64)> {
    let (me, n) = (c.rank(), c.size());
    c.send(&[me as u64, 1], (me + 1) % n, 11)?;
    let mut got = [0u64; 2];
    c.recv_into(&mut got, (me + n - 1) % n, 11)?;
    let b = c.broadcast_value(if me == 0 { 2.5f64 } else { 0.0 }, 0)?;
    Ok((got[0] + got[1] - 1, c.allreduce_value(b, ReduceOp::Sum)?))
}

fn run() -> ferry::Result<()> {
    let mut s1 = Session::init()?;
    let w = s1.world_rank();
    let mut line = format!("rank {w}: {} sets:", s1.num_psets());
    for n in 0..s1.num_psets() {
        let name = s1.pset_name(n)?;
        line += &format!(" {name}({})", s1.pset_size(&name)?);
    }
    println!("{line}");
    if w == 0 {
        match s1.pset_size("no-such-set") {
            Ok(n) => return check(false, format!("unknown set has size {n}")),
            Err(e) => println!("unknown set: {e}"),
        }
        match s1.pset_name(s1.num_psets()) {
            Ok(n) => return check(false, format!("set index past the end named {n}")),
            Err(e) => println!("set index past the end: {e}"),
        }
    }

    // 2. The world.
    let world = s1.group_from_pset("ferry://world")?;
    let cw = s1.comm_from_group(&world, "world")?;
    let mut sum = [w as u64];
    cw.allreduce(&mut sum, &ReduceOp::Sum)?;
    let n = world.size() as u64;
    check(sum[0] == n * (n - 1) / 2, format!("world sum {}", sum[0]))?;
    if w == 0 {
        println!("world: {} ranks, sum of ranks {}", world.size(), sum[0]);
    }
    // 3. The own application's set.
    let mine = s1.app_pset().unwrap_or_else(|| "ferry://world".to_string());
    let app = s1.group_from_pset(&mine)?;
    if mine != "ferry://world" {
        let ca = s1.comm_from_group(&app, "app")?;
        let mut s = [w as u64];
        ca.allreduce(&mut s, &ReduceOp::Sum)?;
        let want: u64 = app.members().iter().map(|&m| m as u64).sum();
        check(s[0] == want, format!("{mine} sum {}", s[0]))?;
        println!(
            "rank {w}: {mine} rank {} of {}, sum of world ranks {}",
            ca.rank(),
            ca.size(),
            s[0]
        );
        if ca.rank() == 0 {
            match ca.send(ca.size(), 1, b"across") {
                Ok(()) => return check(false, "a send left the application".into()),
                Err(e) => println!("rank {w}: send outside {mine}: {e}"),
            }
        }
    }

    let mut cr = s1.comm_from_group(&app, "ring")?;
    let (left, total) = ring(&mut cr)?;
    if cr.rank() == 0 {
        println!(
            "{mine} through the Communicator trait: left neighbour {left}, broadcast sum {total}"
        );
    }
    drop(cr);

    // 4. Isolation between sessions and tags, within the application.
    let mut s2 = Session::init()?;
    let g2 = s2.group_from_pset(&mine)?;
    let c1 = s1.comm_from_group(&app, "iso")?;
    let c2 = s2.comm_from_group(&g2, "iso")?;
    let c3 = s1.comm_from_group(&app, "other")?;
    // A periodic 1-D grid over the application (X6, X7): neighbours are the previous and next
    // member, and the collectives still add up.
    let mut grid = s1.comm_from_group(&app, "grid")?;
    grid.set_cartesian(&[grid.size()], &[true])?;
    let got = grid.neighbor_allgather(&(w as u64).to_le_bytes())?;
    let (n, i) = (app.size(), grid.rank());
    let want: Vec<Option<Vec<u8>>> = [(i + n - 1) % n, (i + 1) % n]
        .iter()
        .map(|&j| Some((app.members()[j] as u64).to_le_bytes().to_vec()))
        .collect();
    check(
        got == want,
        format!("grid neighbours {got:?}, want {want:?}"),
    )?;
    let mut s = [w as u64];
    grid.allreduce(&mut s, &ReduceOp::Sum)?;
    let total: u64 = app.members().iter().map(|&m| m as u64).sum();
    check(s[0] == total, format!("grid sum {}", s[0]))?;
    // The same line open at both ends: coordinates, shifts, an all-to-all along it (neighbour
    // `j` behind sent its block for "ahead", 10 j + 1; the one ahead its block for "behind",
    // 10 j), then a directed ring as a graph.
    let mut line = s1.comm_from_group(&app, "line")?;
    line.set_cartesian(&[n], &[false])?;
    let le = |v: usize| (v as u64).to_le_bytes().to_vec();
    let coords = line.cart_coords()?;
    check(coords == [i], format!("line coordinates {coords:?}"))?;
    let shift = line.cart_shift(0, 1)?;
    let behind = i.checked_sub(1);
    let ahead = (i + 1 < n).then_some(i + 1);
    check(shift == (behind, ahead), format!("line shift {shift:?}"))?;
    let got = line.neighbor_alltoall(&[le(10 * i), le(10 * i + 1)])?;
    let want = vec![behind.map(|j| le(10 * j + 1)), ahead.map(|j| le(10 * j))];
    check(
        got == want,
        format!("line all-to-all {got:?}, want {want:?}"),
    )?;
    line.set_graph(vec![(i + n - 1) % n], vec![(i + 1) % n])?;
    let got = line.neighbor_alltoall(&[le(100 + i)])?;
    check(
        got == [Some(le(100 + (i + n - 1) % n))],
        format!("graph ring {got:?}"),
    )?;
    drop(line);
    if c1.size() >= 2 {
        if c1.rank() == 0 {
            // Same member, same numeric tag, three communicators: sent in the order the
            // receiver does NOT receive them.
            c1.send(1, 7, b"one")?;
            c3.send(1, 7, b"three")?;
            c2.send(1, 7, b"two")?;
        } else if c1.rank() == 1 {
            let mut b = Vec::new();
            for (c, want) in [(&c2, "two"), (&c3, "three"), (&c1, "one")] {
                c.recv(0, 7, &mut b)?;
                check(
                    b == want.as_bytes(),
                    format!("got {:?} for {want}", String::from_utf8_lossy(&b)),
                )?;
            }
            println!("rank {w}: isolation ok: sessions and tags kept apart");
        }
    }

    // 5. Finalize one session, then the other, then start again.
    s1.finalize()?;
    match c1.barrier() {
        Ok(()) => return check(false, "a finalized session's communicator worked".into()),
        Err(e) => {
            if c1.rank() == 0 {
                println!("rank {w}: after finalize: {e}");
            }
        }
    }
    c2.barrier()?;
    drop((c1, c3, cw));
    s2.finalize()?;
    drop(c2);
    let mut s3 = Session::init()?;
    let g3 = s3.group_from_pset(&mine)?;
    let c = s3.comm_from_group(&g3, "again")?;
    let mut one = [1u32];
    c.allreduce(&mut one, &ReduceOp::Sum)?;
    check(
        one[0] as usize == g3.size(),
        format!("new session sum {}", one[0]),
    )?;
    if c.rank() == 0 {
        println!(
            "rank {w}: new session after finalizing all: {} ranks",
            one[0]
        );
    }
    drop(c);
    s3.finalize()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("t_sessions: error: {e}");
            ExitCode::from(1)
        }
    }
}
