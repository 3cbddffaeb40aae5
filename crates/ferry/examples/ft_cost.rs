//! ft_cost: what fault tolerance costs an allreduce without failures (issue 07, F5).
//!
//! `ferry run -n N target/release/examples/ft_cost [ITERS]` times, in one run and on the
//! same ranks, an allreduce (sum of i64) of 8 B and of 1 MiB: plain (`ferry::coll` on the
//! world), on a SHRINK/CONT fault-tolerant communicator, and on the same communicator with
//! the all-or-nothing option. Rank 0 prints one line per case:
//! `SIZE B  plain X us  ft Y us  all-or-nothing Z us` (mean over ITERS, default 1000; a
//! tenth of that for 1 MiB).

use std::time::Instant;

use ferry::coll::{Group, ReduceOp};
use ferry::ft::{Communicator, FailureMode, MessageMode, Options};

fn mean_us(iters: usize, mut f: impl FnMut() -> ferry::Result<()>) -> ferry::Result<f64> {
    for _ in 0..iters / 10 + 1 {
        f()?;
    }
    let t = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / iters as f64)
}

fn main() -> ferry::Result<()> {
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let mut world = ferry::init()?;
    let rank = world.rank();
    let group = Group::world(world.size());
    let sizes = [1usize, 131_072];
    let mut plain = Vec::new();
    for &n in &sizes {
        let it = if n > 1 { iters / 10 } else { iters };
        let mut v = vec![rank as i64; n];
        ferry::coll::barrier(world.transport(), &group)?;
        plain.push(mean_us(it, || {
            ferry::coll::allreduce(world.transport(), &group, &mut v, &ReduceOp::Sum)
        })?);
    }
    let mut comm = Communicator::new(
        world.into_transport(),
        Options::new(FailureMode::Shrink, MessageMode::Cont),
    )?;
    let mut ft = Vec::new();
    let mut aon = Vec::new();
    for (out, on) in [(&mut ft, false), (&mut aon, true)] {
        comm.set_all_or_nothing(on);
        for &n in &sizes {
            let it = if n > 1 { iters / 10 } else { iters };
            let mut v = vec![rank as i64; n];
            comm.barrier()?;
            out.push(mean_us(it, || comm.allreduce(&mut v, &ReduceOp::Sum))?);
        }
    }
    if rank == 0 {
        for (i, &n) in sizes.iter().enumerate() {
            println!(
                "{:>8} B  plain {:9.1} us  ft {:9.1} us  all-or-nothing {:9.1} us",
                n * 8,
                plain[i],
                ft[i],
                aon[i]
            );
        }
    }
    comm.finish()
}
