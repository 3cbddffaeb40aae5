//! t_liveness: launcher test program (failures by liveness, not elapsed time). Rank SLOW_RANK
//! first sleeps MS milliseconds (`sleep`: a slow rank is not a dead one) or SIGKILLs itself
//! after MS milliseconds (`kill`); then every rank enters a barrier of the whole world and
//! prints `rank R barrier ok`, or the error it got (which must name the dead rank) and exits 1.
//! Usage: `t_liveness SLOW_RANK sleep|kill MS`.

use std::io::Write;
use std::process::{Command, ExitCode};
use std::time::Duration;

use ferry::coll::Group;

fn run(slow: usize, mode: &str, ms: u64) -> ferry::Result<()> {
    let mut world = ferry::init()?;
    let rank = world.rank();
    let group = Group::world(world.size());
    if rank == slow {
        std::thread::sleep(Duration::from_millis(ms));
        if mode == "kill" {
            // The `kill` utility delivers a real SIGKILL to this process.
            let _ = Command::new("kill")
                .args(["-KILL", &std::process::id().to_string()])
                .status();
            std::thread::sleep(Duration::from_secs(60));
        }
    }
    ferry::coll::barrier(world.transport(), &group)?;
    println!("rank {rank} barrier ok");
    let _ = std::io::stdout().flush();
    world.finish()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(slow), Some(mode), Some(ms)) = (
        args.first().and_then(|a| a.parse::<usize>().ok()),
        args.get(1).filter(|m| *m == "sleep" || *m == "kill"),
        args.get(2).and_then(|a| a.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: t_liveness SLOW_RANK sleep|kill MS");
        return ExitCode::from(2);
    };
    match run(slow, mode, ms) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("t_liveness: error: {e}");
            ExitCode::from(1)
        }
    }
}
