//! t_ft_data: a `ferry_data` container carried over a shrink without a checkpoint (issue 07:
//! the data layer on a shrunk communicator; the lost part is reported lost).
//!
//! `ferry run -n N --keep-going target/release/examples/t_ft_data ROUNDS [ELEMS]` keeps a
//! container of ELEMS (default 2400) i64 values, value `3 i + 1` at index i, on a SHRINK/CONT
//! communicator, and switches it ROUNDS times between two block partitionings (one and two
//! cycles) with about 1 ms of sleep per round. When a switch fails, the survivors revoke,
//! shrink, make the partitionings over the survivors and carry the container over
//! ([`ferry::ft::data::salvage`]); each prints
//! `rank W: salvage G: failed [a] lost L of ELEMS, kept values ok` (L: indexes no survivor
//! held), puts the lost values back (recomputed) and goes on from the earliest round any
//! survivor was in. At the end each survivor prints
//! `rank W: done ROUNDS rounds, size S, values ok` and exits 0. A value found wrong is
//! reported as `values WRONG (K)` and the rank exits 1.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use ferry::coll::ReduceOp;
use ferry::data::{Block, Container, DataFlow, Partitioner, Partitioning, Space};
use ferry::ft::data::{self, salvage};
use ferry::ft::{Communicator, FailureMode, MessageMode, Options};
use ferry::{Error, ErrorKind};

fn value(i: i64) -> i64 {
    3 * i + 1
}

/// The two partitionings of one communicator generation.
fn parts(comm: &Communicator, space: &Space) -> ferry::Result<[Partitioning; 2]> {
    let one = data::partitioning(comm, space, &Partitioner::block())?;
    let two = data::partitioning(
        comm,
        space,
        &Partitioner::Block(Block {
            cycles: 2,
            ..Block::default()
        }),
    )?;
    Ok([one, two])
}

/// Indexes of this rank whose value is wrong; values at `lost` indexes are put back first.
fn check(c: &mut Container<i64>, lost: &[ferry::data::Range]) -> ferry::Result<usize> {
    let mut wrong = 0;
    for r in c.my_ranges().to_vec() {
        for i in r.from()[0]..r.to()[0] {
            let idx = [i, 0, 0];
            if lost.iter().any(|l| l.contains(&idx)) {
                c.set(&idx, value(i))?;
            } else if c.get(&idx)? != value(i) {
                wrong += 1;
            }
        }
    }
    Ok(wrong)
}

fn run(rounds: u64, elems: u64) -> ferry::Result<bool> {
    let world = ferry::init()?;
    let w = world.rank();
    // The facade's data layer: honours data.shared_containers (and FERRY_LAYOUT_GENERIC).
    let mut inst = world.data_instance()?;
    let opts = Options::from_env(Options::new(FailureMode::Shrink, MessageMode::Cont))?;
    let mut comm = Communicator::new(world.into_transport(), opts)?;
    let space = Space::new1(elems)?;
    let mut p = parts(&comm, &space)?;
    let mut c = Container::<i64>::new(&mut inst, "t_ft_data values", &space);
    data::switch(&comm, &mut c, &p[0], DataFlow::None, None)?;
    check(&mut c, &[space.range()])?;
    // Tells a harness that start-up and the first switch are behind this rank: a kill before
    // that is a death during start-up, which fails the job instead of shrinking it.
    println!("rank {w}: running");
    let _ = std::io::stdout().flush();
    let mut round = 1;
    while round <= rounds {
        let res = data::switch(&comm, &mut c, &p[1], DataFlow::Preserve, None)
            .and_then(|()| data::switch(&comm, &mut c, &p[0], DataFlow::Preserve, None));
        match res {
            Ok(()) => {
                round += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if matches!(e.kind(), ErrorKind::PeerFailed | ErrorKind::Revoked) => {
                tracing::info!("round {round}: {e}");
                comm.revoke()?;
                comm = comm.shrink()?;
                p = parts(&comm, &space)?;
                let s = salvage(&comm, &mut c, &p[0])?;
                let lost: u64 = s.lost.iter().map(|r| r.size()).sum();
                let wrong = check(&mut c, &s.lost)?;
                let verdict = if wrong == 0 {
                    "ok".to_string()
                } else {
                    format!("WRONG ({wrong})")
                };
                println!(
                    "rank {w}: salvage {}: failed {:?} lost {lost} of {elems}, kept values {verdict}",
                    comm.generation(),
                    s.failed
                );
                let _ = std::io::stdout().flush();
                if wrong > 0 {
                    return Ok(false);
                }
                // A rank that exchanged nothing with the failed one may have finished the
                // round the others failed in: all go on from the earliest (a round only
                // moves values, so redoing it changes nothing).
                let mut at = [round as i64];
                comm.allreduce(&mut at, &ReduceOp::Min)?;
                round = at[0] as u64;
            }
            Err(e) => return Err(e),
        }
    }
    let wrong = check(&mut c, &[])?;
    let verdict = if wrong == 0 {
        "ok".to_string()
    } else {
        format!("WRONG ({wrong})")
    };
    println!(
        "rank {w}: done {rounds} rounds, size {}, values {verdict}",
        comm.size()
    );
    let _ = std::io::stdout().flush();
    comm.finish()?;
    Ok(wrong == 0)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(rounds) = args.next().and_then(|a| a.parse::<u64>().ok()) else {
        eprintln!("usage: t_ft_data ROUNDS [ELEMS]");
        return ExitCode::from(2);
    };
    let elems = args.next().and_then(|a| a.parse().ok()).unwrap_or(2400);
    match run(rounds, elems) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            let e: Error = e;
            eprintln!("t_ft_data: error: {e}");
            ExitCode::from(1)
        }
    }
}
