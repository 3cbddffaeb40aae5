//! t_ft_comms: several fault-tolerant communicators in one process, each with its own modes,
//! generation, revoke and agreement (issue 07). 6 ranks under `ferry run --keep-going`;
//! rank 4 SIGKILLs itself 300 ms after a first barrier.
//!
//! - `world`: every rank, SHRINK/NOP (after the failure every operation on it fails until
//!   it is recovered).
//! - `half`: `world.split(rank % 2)`, BLANK/CONT: `half 0` = ranks 0, 2, 4 contains the dead
//!   rank, `half 1` = ranks 1, 3, 5 does not.
//!
//! What each survivor checks and prints (`rank W: comms ok ...`):
//! 1. `half 1` runs allreduces across the failure, all successful, and knows no failed member;
//! 2. in `half 0` rank 0's receive from rank 4 fails naming it (time printed), ranks 0 and 2
//!    exchange messages afterwards (CONT), then recover it (BLANK: size 3, live size 2, the gap
//!    refused at once);
//! 3. `world` fails naming rank 4 (NOP), and is shrunk to generation 1 over 5 ranks;
//! 4. rank 1 revokes `half 1`: ranks 3 and 5 see their operation on it revoked, while the
//!    shrunk world still works; `half 1` is then shrunk (a revoke without failure: generation
//!    1, same 3 members);
//! 5. a last allreduce on the shrunk world sums to 5, and the communicators are freed.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use ferry::coll::ReduceOp;
use ferry::ft::{Communicator, FailureMode, MessageMode, Options};
use ferry::{Error, ErrorKind, Result};

mod common;

use common::{die_by_sigkill, say};

const VICTIM: usize = 4;

fn fail(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Protocol, "t_ft_comms").with_detail(what.to_string())
}

/// `e` must be a failure naming the victim.
fn names_victim(e: &Error, what: &str) -> Result<()> {
    if e.kind() == ErrorKind::PeerFailed && e.peer() == Some(VICTIM) {
        Ok(())
    } else {
        Err(fail(format!(
            "{what}: expected a failure naming rank {VICTIM}, got: {e}"
        )))
    }
}

fn run() -> Result<()> {
    let world = ferry::init()?;
    if world.size() != 6 {
        return Err(fail("needs 6 ranks"));
    }
    let w = world.rank();
    let world = Communicator::new(
        world.into_transport(),
        Options::new(FailureMode::Shrink, MessageMode::Nop),
    )?;
    let half = world
        .split(
            Some(w as u32 % 2),
            w as u32,
            Options::new(FailureMode::Blank, MessageMode::Cont),
        )?
        .ok_or_else(|| fail("split gave no communicator"))?;
    if world.id() == half.id() {
        return Err(fail("the world and its split share an id"));
    }
    world.barrier()?;
    if w == VICTIM {
        std::thread::sleep(Duration::from_millis(300));
        die_by_sigkill();
    }
    let dead_at = Instant::now() + Duration::from_millis(300);

    // 1 and 2: the halves.
    if w % 2 == 1 {
        // Allreduces until three of them started well after the death at every member (the
        // sum of the "started after" flags tells all of them the same).
        let mut after = 0;
        while after < 3 {
            let past = Instant::now() > dead_at + Duration::from_millis(200);
            let mut v = [1i64, i64::from(past)];
            half.allreduce(&mut v, &ReduceOp::Sum)?;
            if v[0] != 3 {
                return Err(fail(format!("half 1 summed {} instead of 3", v[0])));
            }
            if v[1] == 3 {
                after += 1;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if !half.failed_members().is_empty() {
            return Err(fail(format!(
                "half 1 lists failed members {:?}",
                half.failed_members()
            )));
        }
        say(format!(
            "rank {w}: comms ok half 1 across the failure, generation {}",
            half.generation()
        ));
    } else {
        // half 0: world ranks 0, 2, 4 are its ranks 0, 1, 2.
        let victim_rank = 2;
        if w == 0 {
            let t0 = Instant::now();
            let mut buf = Vec::new();
            let e = half
                .recv(victim_rank, 1, &mut buf)
                .err()
                .ok_or_else(|| fail("a receive from the dead rank succeeded"))?;
            names_victim(&e, "half 0 receive")?;
            let after = t0.elapsed().as_millis();
            say(format!(
                "rank {w}: comms ok half 0 recv error after {after} ms"
            ));
            half.send(1, 2, b"ping")?;
            half.recv(1, 3, &mut buf)?;
            if buf != b"pong" {
                return Err(fail("half 0: wrong answer"));
            }
        } else {
            std::thread::sleep(Duration::from_millis(500));
            let mut buf = Vec::new();
            half.recv(0, 2, &mut buf)?;
            half.send(0, 3, b"pong")?;
        }
        say(format!("rank {w}: comms ok half 0 p2p across the failure"));
        let half = half.recover()?;
        let t0 = Instant::now();
        let e = half
            .send(victim_rank, 4, b"x")
            .err()
            .ok_or_else(|| fail("a send to the gap succeeded"))?;
        if e.kind() != ErrorKind::InvalidArgument || t0.elapsed() > Duration::from_millis(100) {
            return Err(fail(format!("the gap was not refused at once: {e}")));
        }
        half.barrier()?;
        say(format!(
            "rank {w}: comms ok half 0 recovered generation {} size {} live {}",
            half.generation(),
            half.size(),
            half.live_size()
        ));
        half.free()?;
    }

    // 3: the world, NOP: everything fails until it is recovered.
    let e = loop {
        if let Err(e) = world.barrier() {
            break e;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    names_victim(&e, "world barrier")?;
    say(format!(
        "rank {w}: comms ok world error names rank {VICTIM}"
    ));
    let world = world.recover()?;
    say(format!(
        "rank {w}: comms ok world shrink {} members {:?}",
        world.generation(),
        world.members()
    ));

    // 4: a revoke of half 1 leaves the world working.
    if w % 2 == 1 {
        if w == 1 {
            half.revoke()?;
        }
        let e = loop {
            if let Err(e) = half.barrier() {
                break e;
            }
        };
        if e.kind() != ErrorKind::Revoked {
            return Err(fail(format!("half 1 after the revoke: {e}")));
        }
        say(format!("rank {w}: comms ok half 1 revoked"));
    }
    world.barrier()?;
    say(format!(
        "rank {w}: comms ok world works after the revoke of half 1"
    ));
    if w % 2 == 1 {
        let half = half.shrink()?;
        say(format!(
            "rank {w}: comms ok half 1 shrink {} members {:?}",
            half.generation(),
            half.members()
        ));
        half.barrier()?;
        half.free()?;
    }

    // 5.
    let mut v = [1i64];
    world.allreduce(&mut v, &ReduceOp::Sum)?;
    say(format!("rank {w}: comms ok done sum {}", v[0]));
    world.finish()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("t_ft_comms: error: {e}");
            ExitCode::from(1)
        }
    }
}
