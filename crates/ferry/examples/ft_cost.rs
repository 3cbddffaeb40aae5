//! ft_cost: what fault tolerance costs an allreduce without failures (issue 07, F5).
//!
//! `ferry run -n N target/release/examples/ft_cost [ITERS] [BLOCKS]` times, in one run and on
//! the same ranks, an allreduce (sum of i64) of 8 B and of 1 MiB three ways: plain
//! (`ferry::coll` on the transport underneath), on a SHRINK/CONT fault-tolerant communicator,
//! and on the same communicator with the all-or-nothing option. The three alternate in BLOCKS
//! blocks (default 7) of ITERS calls each (default 500; a tenth of that for 1 MiB), so that a
//! change of load on a shared machine hits all three alike; rank 0 prints the median over the
//! blocks of each block's mean: `SIZE B  plain X us  ft Y us  all-or-nothing Z us`.

use std::time::Instant;

use ferry::coll::{Group, ReduceOp};
use ferry::ft::{Communicator, FailureMode, MessageMode, Options};

fn mean_us(iters: usize, mut f: impl FnMut() -> ferry::Result<()>) -> ferry::Result<f64> {
    let t = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / iters as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> ferry::Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let iters = args.next().flatten().unwrap_or(500);
    let blocks = args.next().flatten().unwrap_or(7).max(1);
    let world = ferry::init()?;
    let rank = world.rank();
    let group = Group::world(world.size());
    let mut comm = Communicator::new(
        world.into_transport(),
        Options::new(FailureMode::Shrink, MessageMode::Cont),
    )?;
    for n in [1usize, 131_072] {
        let it = if n > 1 { (iters / 10).max(1) } else { iters };
        let mut v = vec![rank as i64; n];
        let mut t = [Vec::new(), Vec::new(), Vec::new()];
        for b in 0..=blocks {
            // Block 0 warms up and is not counted.
            let plain = {
                let mut raw = comm.raw_transport();
                ferry::coll::barrier(&mut **raw, &group)?;
                mean_us(it, || {
                    ferry::coll::allreduce(&mut **raw, &group, &mut v, &ReduceOp::Sum)
                })?
            };
            comm.set_all_or_nothing(false);
            comm.barrier()?;
            let ft = mean_us(it, || comm.allreduce(&mut v, &ReduceOp::Sum))?;
            comm.set_all_or_nothing(true);
            comm.barrier()?;
            let aon = mean_us(it, || comm.allreduce(&mut v, &ReduceOp::Sum))?;
            if b > 0 {
                t[0].push(plain);
                t[1].push(ft);
                t[2].push(aon);
            }
        }
        if rank == 0 {
            let [p, f, a] = t.map(median);
            println!(
                "{:>8} B  plain {p:9.1} us  ft {f:9.1} us  all-or-nothing {a:9.1} us",
                n * 8
            );
        }
    }
    comm.finish()
}
