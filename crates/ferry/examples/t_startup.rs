//! t_startup: the start-up benchmark's program (X8). Initialises ferry, does one barrier and
//! one allreduce (sum of the ranks, checked) and finishes. Rank 0 prints `startup ok: N ranks,
//! backend B, init+barrier S s` (its own time from `main` to the barrier's completion) and,
//! when the caller sets `FERRY_LAUNCH_T0` (wall-clock nanoseconds since the epoch), the time
//! from then to the barrier's completion (`since launch T s`, what bench/startup.sh reports).
//! Usage: `t_startup`.

use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use ferry::coll::{self, Group, ReduceOp};

fn run() -> ferry::Result<()> {
    let t0 = Instant::now();
    let mut world = ferry::init()?;
    let (rank, size) = (world.rank(), world.size());
    let after_init = t0.elapsed();
    let g = Group::world(size);
    coll::barrier(world.transport(), &g)?;
    let after_barrier = t0.elapsed();
    let barrier_wall = SystemTime::now();
    if std::env::var_os("T_STARTUP_PHASES").is_some() && (rank == 0 || rank + 1 == size) {
        eprintln!(
            "t_startup: rank {rank}: init {:.3} s, barrier {:.3} s",
            after_init.as_secs_f64(),
            (after_barrier - after_init).as_secs_f64()
        );
    }
    let sum = coll::allreduce_value(world.transport(), &g, rank as u64, &ReduceOp::Sum)?;
    let want = (size as u64) * (size as u64 - 1) / 2;
    if sum != want {
        return Err(ferry::Error::new(ferry::ErrorKind::Protocol, "t_startup")
            .on_rank(rank)
            .with_detail(format!("allreduce gave {sum}, expected {want}")));
    }
    if rank == 0 {
        let since_launch = std::env::var("FERRY_LAUNCH_T0")
            .ok()
            .and_then(|v| v.parse::<u128>().ok())
            .and_then(|t| {
                let done = barrier_wall.duration_since(UNIX_EPOCH).ok()?.as_nanos();
                done.checked_sub(t)
            })
            .map(|ns| format!(", since launch {:.3} s", ns as f64 / 1e9))
            .unwrap_or_default();
        println!(
            "startup ok: {size} ranks, backend {}, init+barrier {:.3} s{since_launch}",
            world.backend(),
            after_barrier.as_secs_f64()
        );
    }
    world.finish()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("t_startup: error: {e}");
            ExitCode::from(1)
        }
    }
}
