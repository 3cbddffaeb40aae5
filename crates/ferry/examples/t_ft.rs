//! t_ft: test program for the failure and message modes (issue 07), 4 ranks or more under
//! `ferry run --keep-going`. Rank 1 SIGKILLs itself 300 ms after a first barrier.
//!
//! Usage: `t_ft SCENARIO` with SCENARIO one of
//! - `cont`: SHRINK/CONT. Rank 0 blocks in a receive from rank 1 and prints how long after
//!   posting it the error naming rank 1 came; ranks 2 and 3 keep exchanging messages across the
//!   failure (CONT: they do not involve rank 1). Then all survivors shrink and pass a barrier.
//! - `nop`: SHRINK/NOP. Ranks 2 and 3 exchange messages until the first error, which must name
//!   rank 1; after `recover` they exchange again.
//! - `blank`: BLANK/CONT. After `recover` the size stays, the live size drops, an operation
//!   naming rank 1 fails at once with "invalid rank", and a barrier of the live ranks passes.
//! - `abort`: ABORT. Every rank loops on barriers; the failure ends each survivor non-zero.
//! - `agree-kill`: SHRINK/CONT. After the failure the survivors revoke and agree; rank 2 kills
//!   itself as it enters the agreement, so the agreement and shrink lose a second rank.
//! - `rebuild`: REBUILD is refused at creation with an error naming issue 08.
//!
//! Every survivor prints `rank W: SCENARIO ok ...` lines; errors go to stderr with exit 1.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use ferry::ft::{Communicator, FailureMode, MessageMode, Options};
use ferry::{Error, ErrorKind, Result};

mod common;

use common::{die_by_sigkill, say};

const VICTIM: usize = 1;

fn fail(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Protocol, "t_ft").with_detail(what.to_string())
}

fn comm(failure: FailureMode, message: MessageMode) -> Result<Communicator> {
    let world = ferry::init()?;
    Communicator::new(world.into_transport(), Options::new(failure, message))
}

/// Rank 1 dies 300 ms from now.
fn victim_dies(c: &Communicator) {
    if c.world_rank() == VICTIM {
        std::thread::sleep(Duration::from_millis(300));
        die_by_sigkill();
    }
}

/// Ranks 2 and 3 exchange `n` messages 5 ms apart (ping-pong); returns the first error.
fn ping_pong(c: &Communicator, n: usize) -> Result<()> {
    let w = c.world_rank();
    let mut buf = Vec::new();
    for i in 0..n {
        if w == 2 {
            c.send(3, 7, &(i as u64).to_le_bytes())?;
            c.recv(3, 7, &mut buf)?;
        } else {
            c.recv(2, 7, &mut buf)?;
            c.send(2, 7, &buf.clone())?;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn names_victim(e: &Error) -> bool {
    e.peer() == Some(VICTIM) && e.to_string().contains(&format!("rank {VICTIM} failed"))
}

fn cont() -> Result<()> {
    let c = comm(FailureMode::Shrink, MessageMode::Cont)?;
    let w = c.world_rank();
    c.barrier()?;
    victim_dies(&c);
    match w {
        0 => {
            let t = Instant::now();
            let mut buf = Vec::new();
            let e = c
                .recv(VICTIM, 1, &mut buf)
                .err()
                .ok_or_else(|| fail("a receive from a dead rank succeeded"))?;
            if !names_victim(&e) {
                return Err(fail(format!("error does not name rank 1: {e}")));
            }
            say(format!(
                "rank 0: cont ok recv error after {} ms: {e}",
                t.elapsed().as_millis()
            ));
        }
        2 | 3 => {
            // 200 round trips, about 1 s, across the failure.
            ping_pong(&c, 200)?;
            say(format!("rank {w}: cont ok p2p across the failure"));
        }
        _ => {}
    }
    // Collectives involve rank 1: they fail (at once once it is known); then shrink.
    let _ = c.barrier();
    let c = c.shrink()?;
    c.barrier()?;
    say(format!(
        "rank {w}: cont ok shrink {} size {} members {:?}",
        c.generation(),
        c.size(),
        c.members()
    ));
    c.finish()
}

fn nop() -> Result<()> {
    let c = comm(FailureMode::Shrink, MessageMode::Nop)?;
    let w = c.world_rank();
    c.barrier()?;
    victim_dies(&c);
    let t = Instant::now();
    let e = match w {
        2 | 3 => ping_pong(&c, 100_000).err(),
        _ => c.barrier().err(),
    }
    .ok_or_else(|| fail("no error after a failure in NOP mode"))?;
    if !names_victim(&e) {
        return Err(fail(format!("error does not name rank 1: {e}")));
    }
    say(format!(
        "rank {w}: nop ok error after {} ms",
        t.elapsed().as_millis()
    ));
    let c = c.recover()?;
    if w == 2 || w == 3 {
        // Communicator ranks changed: world 2 and 3 are now ranks 1 and 2.
        let peer = if w == 2 { 2 } else { 1 };
        let mut buf = Vec::new();
        if w == 2 {
            c.send(peer, 9, b"again")?;
        } else {
            c.recv(peer, 9, &mut buf)?;
        }
        say(format!("rank {w}: nop ok p2p after recover"));
    }
    c.barrier()?;
    c.finish()
}

fn blank() -> Result<()> {
    let c = comm(FailureMode::Blank, MessageMode::Cont)?;
    let w = c.world_rank();
    let size = c.size();
    c.barrier()?;
    victim_dies(&c);
    // Every survivor finds out through a collective that involves rank 1.
    let e = loop {
        if let Err(e) = c.barrier() {
            break e;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    if !names_victim(&e) {
        return Err(fail(format!("error does not name rank 1: {e}")));
    }
    let c = c.recover()?;
    let t = Instant::now();
    let refused = c
        .send(VICTIM, 3, b"x")
        .err()
        .ok_or_else(|| fail("a send to a gap succeeded"))?;
    let took = t.elapsed();
    if refused.kind() != ErrorKind::InvalidArgument || !refused.to_string().contains("invalid rank")
    {
        return Err(fail(format!("a gap must be an invalid rank: {refused}")));
    }
    if took > Duration::from_millis(50) {
        return Err(fail(format!("refusing the gap took {took:?}")));
    }
    c.barrier()?;
    if c.size() != size || c.rank() != w {
        return Err(fail("BLANK changed the size or the ranks"));
    }
    say(format!(
        "rank {w}: blank ok size {} live {} refused: {refused}",
        c.size(),
        c.live_size()
    ));
    c.finish()
}

fn abort() -> Result<()> {
    let c = comm(FailureMode::Abort, MessageMode::Cont)?;
    c.barrier()?;
    victim_dies(&c);
    loop {
        c.barrier()?;
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn agree_kill() -> Result<()> {
    let c = comm(FailureMode::Shrink, MessageMode::Cont)?;
    let w = c.world_rank();
    c.barrier()?;
    victim_dies(&c);
    while c.barrier().is_ok() {
        std::thread::sleep(Duration::from_millis(1));
    }
    c.revoke()?;
    if w == 2 {
        // The others are in (or about to enter) the agreement.
        std::thread::sleep(Duration::from_millis(20));
        die_by_sigkill();
    }
    let (value, failed) = c.agree(5)?;
    let c = c.shrink()?;
    c.barrier()?;
    say(format!(
        "rank {w}: agree-kill ok value {value} failed-seen {failed:?} shrink {} members {:?}",
        c.generation(),
        c.members()
    ));
    c.finish()
}

fn rebuild() -> Result<()> {
    let world = ferry::init()?;
    let w = world.rank();
    match Communicator::new(
        world.into_transport(),
        Options::new(FailureMode::Rebuild, MessageMode::Cont),
    ) {
        Ok(_) => Err(fail("REBUILD was accepted")),
        Err(e) => {
            say(format!("rank {w}: rebuild ok refused: {e}"));
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    let res = match scenario.as_str() {
        "cont" => cont(),
        "nop" => nop(),
        "blank" => blank(),
        "abort" => abort(),
        "agree-kill" => agree_kill(),
        "rebuild" => rebuild(),
        _ => {
            eprintln!("usage: t_ft cont|nop|blank|abort|agree-kill|rebuild");
            return ExitCode::from(2);
        }
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("t_ft: error: {e}");
            ExitCode::from(1)
        }
    }
}
