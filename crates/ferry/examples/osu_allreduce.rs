//! osu_allreduce: latency of `ferry::coll::allreduce` (f32 sum) on all ranks, in the format of
//! the OSU micro-benchmarks (a `#` header, then `size avg_latency_us` per line).
//!
//! Same methodology as OSU 5.x: sizes from 4 B (one f32) to 4 MiB in powers of two (or
//! `-m [MIN:]MAX`); per size 200 warm-up + 1000 timed calls up to 8 KiB, 10 + 100 above; only
//! the allreduce is timed, a barrier separates iterations; the figure is the average over
//! ranks of each rank's mean time. `-a ALG` forces an algorithm (auto, linear, master, direct,
//! binomial, rdouble, rabenseifner, ring, pipeline, hier), `-o` asks for the rank-ordered left
//! fold. After each size one untimed call checks the result (every element must equal the
//! number of ranks times the input); a wrong result ends the program with an error.
//! Run: `ferry run -n 4 --backend tcp target/release/examples/osu_allreduce -m 65536`.

mod osu_common;

use std::process::ExitCode;
use std::time::Instant;

use ferry::coll::{self, Algorithm, CollOptions, Group, ReduceOp, ReduceOrder};
use ferry::Transport;

const LARGE: usize = 8192;

struct Args {
    min: usize,
    max: usize,
    iters: Option<usize>,
    warmup: Option<usize>,
    opts: CollOptions,
}

fn parse_args() -> Result<Args, String> {
    let mut opts = CollOptions::default();
    let sizes = osu_common::parse("osu_allreduce", " [-a ALG] [-o]", 4, |flag, value| {
        match flag {
            "-a" => opts.algorithm = value()?.parse::<Algorithm>().map_err(|e| e.to_string())?,
            "-o" => opts.order = ReduceOrder::RankOrderedFold,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(Args {
        min: sizes.min,
        max: sizes.max,
        iters: sizes.iters,
        warmup: sizes.warmup,
        opts,
    })
}

fn run(args: &Args) -> ferry::Result<()> {
    let mut world = ferry::init()?;
    let rank = world.rank();
    let size_ranks = world.size();
    if rank == 0 {
        println!(
            "# ferry osu_allreduce (OSU methodology, f32 sum), backend {}, {} ranks, algorithm {}{}",
            world.backend(),
            size_ranks,
            args.opts.algorithm.name(),
            if args.opts.order == ReduceOrder::RankOrderedFold { ", rank-ordered fold" } else { "" }
        );
        println!("# Size       Avg Latency(us)");
    }
    let t: &mut dyn Transport = world.transport();
    let g = Group::world(size_ranks);
    let mut size = 4;
    while size < args.min {
        size *= 2;
    }
    let max_elems = args.max / 4;
    let input: Vec<f32> = (0..max_elems).map(|i| (i % 97) as f32 * 0.5).collect();
    let mut buf = input.clone();
    while size <= args.max {
        let n = size / 4;
        let (iters, warmup) = if size > LARGE {
            (args.iters.unwrap_or(100), args.warmup.unwrap_or(10))
        } else {
            (args.iters.unwrap_or(1000), args.warmup.unwrap_or(200))
        };
        let mut total = 0.0f64;
        for i in 0..iters + warmup {
            // MPI's allreduce is out of place; ours is in place: restore the input untimed.
            buf[..n].copy_from_slice(&input[..n]);
            let start = Instant::now();
            coll::allreduce_with(t, &g, &mut buf[..n], &ReduceOp::Sum, &args.opts)?;
            let dt = start.elapsed().as_secs_f64();
            if i >= warmup {
                total += dt;
            }
            coll::barrier(t, &g)?;
        }
        // Untimed check: every rank contributed the same input, so each element must be
        // exactly size_ranks times it (small multiples of 0.5 are exact in f32).
        buf[..n].copy_from_slice(&input[..n]);
        coll::allreduce_with(t, &g, &mut buf[..n], &ReduceOp::Sum, &args.opts)?;
        if let Some(i) = (0..n).find(|&i| buf[i] != input[i] * size_ranks as f32) {
            return Err(
                ferry::Error::new(ferry::ErrorKind::Protocol, "osu_allreduce")
                    .on_rank(rank)
                    .with_detail(format!(
                        "wrong result at element {i} of {n}: {} instead of {}",
                        buf[i],
                        input[i] * size_ranks as f32
                    )),
            );
        }
        let mut mean = [total * 1e6 / iters as f64];
        coll::allreduce(t, &g, &mut mean, &ReduceOp::Sum)?;
        if rank == 0 {
            let avg = mean[0] / size_ranks as f64;
            println!("{size:<10}{avg:>18.2}");
        }
        size *= 2;
    }
    world.finish()
}

fn main() -> ExitCode {
    osu_common::main("osu_allreduce", parse_args, run)
}
