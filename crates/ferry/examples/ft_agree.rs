//! ft_agree: rounds of an all-or-nothing allreduce that survive the death of ranks (issue 07).
//!
//! `ferry run -n N --keep-going target/release/examples/ft_agree ROUNDS` runs ROUNDS rounds on
//! a SHRINK/CONT communicator over all ranks (`FERRY_FT_MODE` may choose another failure
//! mode). Round r (1-based) is an all-or-nothing allreduce (sum, i64) of `r * (world rank + 1)`
//! followed by about 1 ms of sleep. When a round fails, the survivors revoke, agree, shrink,
//! print `rank W: shrink G: failed [a, b] survivors [c, d, e]` (every world rank lost so far,
//! and the members of the new communicator) and redo the round. At the end every survivor
//! prints `rank W: done ROUNDS rounds, size S, checksum C` (C: the sum of the rounds'
//! results) and exits 0.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use ferry::coll::ReduceOp;
use ferry::ft::{Communicator, FailureMode, MessageMode, Options};
use ferry::ErrorKind;

fn run(rounds: u64) -> ferry::Result<()> {
    let world = ferry::init()?;
    let world_size = world.size();
    let w = world.rank();
    let opts = Options::from_env(
        Options::new(FailureMode::Shrink, MessageMode::Cont).all_or_nothing(true),
    )?;
    let mut comm = Communicator::new(world.into_transport(), opts)?;
    let mut checksum: i64 = 0;
    let mut round = 1;
    while round <= rounds {
        let mut v = [(round as i64).wrapping_mul(w as i64 + 1)];
        match comm.allreduce(&mut v, &ReduceOp::Sum) {
            Ok(()) => {
                checksum = checksum.wrapping_add(v[0]);
                round += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if matches!(e.kind(), ErrorKind::PeerFailed | ErrorKind::Revoked) => {
                tracing::info!("round {round}: {e}");
                comm.revoke()?;
                comm.agree(1)?;
                comm = comm.shrink()?;
                let survivors = comm.members().to_vec();
                let failed: Vec<usize> =
                    (0..world_size).filter(|r| !survivors.contains(r)).collect();
                println!(
                    "rank {w}: shrink {}: failed {failed:?} survivors {survivors:?}",
                    comm.generation()
                );
                let _ = std::io::stdout().flush();
            }
            Err(e) => return Err(e),
        }
    }
    println!(
        "rank {w}: done {rounds} rounds, size {}, checksum {checksum}",
        comm.size()
    );
    let _ = std::io::stdout().flush();
    comm.finish()
}

fn main() -> ExitCode {
    let Some(rounds) = std::env::args().nth(1).and_then(|a| a.parse::<u64>().ok()) else {
        eprintln!("usage: ft_agree ROUNDS");
        return ExitCode::from(2);
    };
    match run(rounds) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ft_agree: error: {e}");
            ExitCode::from(1)
        }
    }
}
