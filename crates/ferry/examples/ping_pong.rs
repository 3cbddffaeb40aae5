//! ping_pong: switch an array back and forth between the two processes of each pair
//! (examples.md §13; D4, D5, D6). Prints timing.
//!
//! Usage: `ping_pong [options] [size [iters]]`: size in doubles (default 100000000), iters
//! (default 10). Options: `-r` no reservation, `-a` no precomputed action sequences, `-s`
//! spread pairing (pair p = ranks p and p+pairs instead of 2p and 2p+1), `-h` help.
//!
//! The array is cut into one consecutive piece per pair; in phase 0 the first process of a
//! pair owns its piece, in phase 1 the second; every iteration switches 0 -> 1 -> 0,
//! preserving the data.

mod common;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use ferry::data::{Range, Transition};
use ferry::prelude::*;

const USAGE: &str = "Usage: ping_pong [options] [<size> [<iters>]]

Options:
 -r : do not reserve memory for both partitionings
 -a : do not use pre-calculated action sequences
 -s : spread arrangement (pair p = ranks p and p+pairs) instead of close (2p, 2p+1)
 -h : print this help text and exit
";

#[derive(Default, Clone, Copy)]
struct Opts {
    no_reserve: bool,
    no_actions: bool,
    spread: bool,
}

fn main() -> ExitCode {
    let mut args = common::CmdLine::from_env();
    let mut o = Opts::default();
    while let Some(letter) = args.option() {
        match letter {
            Some(b'r') => o.no_reserve = true,
            Some(b'a') => o.no_actions = true,
            Some(b's') => o.spread = true,
            Some(b'h') => return common::usage(USAGE),
            _ => {}
        }
    }
    let (size, iters) = (args.pos(0), args.pos(1));
    common::main_with("ping_pong", || run(o, size, iters))
}

/// Phase `phase` of the pairing: piece k of the array goes to the first (phase 0) or second
/// (phase 1) process of pair k.
fn phase_partitioner(size: i64, pairs: usize, spread: bool, phase: usize) -> Partitioner {
    Partitioner::custom("ping-pong", move |ctx| {
        for k in 0..pairs {
            let from = (k as i128 * size as i128 / pairs as i128) as i64;
            let to = ((k as i128 + 1) * size as i128 / pairs as i128) as i64;
            let task = match (spread, phase) {
                (false, p) => 2 * k + p,
                (true, 0) => k,
                (true, _) => k + pairs,
            };
            ctx.append(task, Range::new1(from, to), 0)?;
        }
        Ok(())
    })
}

fn run(o: Opts, size: i64, iters: i64) -> ferry::Result<()> {
    let size = if size <= 0 { 100_000_000 } else { size };
    let iters = if iters <= 0 { 10 } else { iters };
    let mut comm = Comm::init()?;
    let (rank, nprocs) = (comm.rank(), comm.size());
    let pairs = nprocs / 2;
    if pairs == 0 {
        println!("Error: need at least one process pair to run ping-pong");
        let _ = std::io::stdout().flush();
        let _ = comm.finish();
        std::process::exit(1);
    }
    if rank == 0 {
        let mb = 8e-6 * size as f64;
        println!(
            "Do {iters} iterations, {pairs} pairs ({} arrangement: 0/{}, {}/{} ...)",
            if o.spread { "spread" } else { "close" },
            if o.spread { pairs } else { 1 },
            if o.spread { 1 } else { 2 },
            if o.spread { 1 + pairs } else { 3 },
        );
        println!(
            " with {size} doubles ({mb:.3} MB, per pair {:.3} MB)",
            mb / pairs as f64
        );
        println!(
            " mode: {}reservation, {}pre-calculated actions",
            if o.no_reserve { "no " } else { "with " },
            if o.no_actions { "no " } else { "with " }
        );
    }
    let space = Space::new1(size as u64)?;
    let p0 = comm.partitioning(&space, &phase_partitioner(size, pairs, o.spread, 0))?;
    let p1 = comm.partitioning(&space, &phase_partitioner(size, pairs, o.spread, 1))?;
    let mut a = comm.container::<f64>("array", &space);
    if !o.no_reserve {
        a.reserve(&[&p0, &p1])?;
    }
    comm.switch(&mut a, &p0, DataFlow::None)?;
    if let Some(&r) = a.my_ranges().first() {
        let from = r.from()[0];
        for (k, v) in a.local_data_mut().iter_mut().enumerate() {
            *v = (from + k as i64) as f64;
        }
    }
    let mut seqs = if o.no_actions {
        None
    } else {
        let there = Arc::new(Transition::new(&p0, &p1, rank, DataFlow::Preserve, false)?);
        let back = Arc::new(Transition::new(&p1, &p0, rank, DataFlow::Preserve, false)?);
        Some((a.bind(there)?, a.bind(back)?))
    };

    let start = Instant::now();
    for _ in 0..iters {
        match seqs.as_mut() {
            Some((there, back)) => {
                a.run(comm.transport(), there, None)?;
                a.run(comm.transport(), back, None)?;
            }
            None => {
                comm.switch(&mut a, &p1, DataFlow::Preserve)?;
                comm.switch(&mut a, &p0, DataFlow::Preserve)?;
            }
        }
    }
    let mut dt = start.elapsed().as_secs_f64();

    if pairs > 1 {
        let first = if o.spread {
            rank < pairs
        } else {
            rank % 2 == 0 && rank < 2 * pairs
        };
        // Sum of the first processes' times, combined in rank order at rank 0.
        let mut sum = [if first { dt } else { 0.0 }];
        comm.reduce_with(&mut sum, 0, Op::Sum, &CollOptions::rank_ordered())?;
        if rank == 0 {
            dt = sum[0] / pairs as f64;
        }
    }
    if rank == 0 {
        let it = iters as f64;
        println!(
            "Time: {dt:.3} s (average per iteration: {:.3} ms, per phase: {:.3} ms)",
            dt * 1e3 / it,
            dt * 1e3 / it / 2.0
        );
        println!("GB/s: {:.6}", 16.0 * it * size as f64 / dt / 1e9);
    }
    comm.finish()
}
