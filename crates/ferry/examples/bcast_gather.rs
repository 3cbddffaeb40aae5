//! bcast_gather: seed 004's collective experiment (§4.2.2) on ferry. Usage:
//! `bcast_gather OP ALG INTS CONN [ITERS [WARMUP [MODE]]]`
//! - OP: `bcast` or `gather` (root 0), `allreduce` (sum) or `barrier` (INTS unused);
//! - ALG: `linear`, `chain` (004's "ring": each rank talks to its rank neighbours only),
//!   `binomial` or `auto` (the flat automatic choice), forced for every call;
//! - INTS: elements (i32) per rank;
//! - CONN: `lazy` (connections open on first use: only the algorithm's pairs) or `mesh`
//!   (every pair connected first by an all-to-all of empty messages, as a transport that
//!   connects all-to-all at start-up);
//! - ITERS (default 100) timed calls after WARMUP (default 5) untimed ones;
//! - MODE: `persistent` (default; as 004: the collective is set up once with
//!   `Comm::bcast_init` / `gather_init` / `allreduce_init`, then started and waited for each
//!   time) or `call` (the same one-shot call repeated, the algorithm resolved per call).
//!   The barrier has no persistent form and always runs as `call`.
//!
//! Rank 0 prints one line:
//! `OP ALG INTS CONN setup_ms S root_avg_us R avg_us A max_us M peers P init_ms I mode MODE`
//! where `setup_ms` is the mesh set-up (the slowest rank's; 0 for lazy), `root_avg_us` the
//! root's mean call time, `avg_us` the largest mean call time of any rank, `max_us` the slowest
//! single call on any rank, `peers` the most peers any rank exchanged messages with (from its
//! statistics), `init_ms` the slowest rank's persistent init (0 for `call`).

use std::process::ExitCode;
use std::time::Instant;

use ferry::coll::{self, Algorithm, CollOptions, ReduceOp};
use ferry::{Comm, PersistentColl};

fn bad(what: &str) -> ferry::Error {
    ferry::Error::invalid(
        "bcast_gather",
        format!("{what}; usage: bcast_gather bcast|gather|allreduce|barrier linear|chain|binomial|rdouble|auto INTS lazy|mesh [ITERS [WARMUP [persistent|call]]]"),
    )
}

fn run() -> ferry::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 {
        return Err(bad("too few arguments"));
    }
    let op = args[0].as_str();
    let alg = match args[1].as_str() {
        "linear" => Algorithm::Linear,
        "chain" | "ring" => Algorithm::Chain,
        "binomial" => Algorithm::BinomialTree,
        "auto" => Algorithm::Auto,
        "rdouble" => Algorithm::RecursiveDoubling,
        a => return Err(bad(&format!("unknown algorithm `{a}`"))),
    };
    let ints: usize = args[2].parse().map_err(|_| bad("INTS is not a number"))?;
    let mesh = match args[3].as_str() {
        "lazy" => false,
        "mesh" => true,
        c => return Err(bad(&format!("unknown connection mode `{c}`"))),
    };
    let iters: usize = args
        .get(4)
        .map_or(Ok(100), |a| a.parse())
        .map_err(|_| bad("ITERS"))?;
    let warmup: usize = args
        .get(5)
        .map_or(Ok(5), |a| a.parse())
        .map_err(|_| bad("WARMUP"))?;
    if !["bcast", "gather", "allreduce", "barrier"].contains(&op) {
        return Err(bad(&format!("unknown operation `{op}`")));
    }

    let persistent = match args.get(6).map_or("persistent", String::as_str) {
        "persistent" => op != "barrier",
        "call" => false,
        m => return Err(bad(&format!("unknown mode `{m}`"))),
    };

    let mut comm = Comm::init()?;
    let (rank, size) = (comm.rank(), comm.size());
    let setup_ms = if mesh {
        let start = Instant::now();
        let empty = vec![Vec::new(); size];
        let (t, g) = comm.transport_and_group();
        coll::alltoall(t, g, &empty)?;
        start.elapsed().as_secs_f64() * 1e3
    } else {
        0.0
    };
    let opts = CollOptions::with_algorithm(alg);
    let mine: Vec<i32> = (0..ints).map(|i| (i + rank) as i32).collect();
    let mut times = Vec::with_capacity(iters);
    let init_ms = if persistent {
        let start = Instant::now();
        let mut pc: PersistentColl<i32> = match op {
            "bcast" => comm.bcast_init_with(mine.clone(), 0, &opts)?,
            "gather" => comm.gather_init_with(mine.clone(), 0, &opts)?,
            _ => comm.allreduce_init_with(vec![1i32; ints], ReduceOp::Sum, &opts)?,
        };
        let init_ms = start.elapsed().as_secs_f64() * 1e3;
        for i in 0..warmup + iters {
            if op == "allreduce" {
                pc.data_mut()?.fill(1);
            }
            let start = Instant::now();
            pc.start(&mut comm)?;
            pc.wait(&mut comm)?;
            if i >= warmup {
                times.push(start.elapsed().as_secs_f64() * 1e6);
            }
            check(op, &pc, size, ints)?;
        }
        pc.free(&mut comm)?;
        init_ms
    } else {
        let send: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut buf = mine.clone();
        let (t, g) = comm.transport_and_group();
        for i in 0..warmup + iters {
            let start = Instant::now();
            if op == "bcast" {
                coll::broadcast_slice_with(t, g, 0, &mut buf, &opts)?;
            } else if op == "barrier" {
                coll::barrier_with(t, g, &opts)?;
            } else if op == "allreduce" {
                let mut v = vec![1i32; ints];
                coll::allreduce_with(t, g, &mut v, &ReduceOp::Sum, &opts)?;
                if v.iter().any(|&x| x != size as i32) {
                    return Err(bad("allreduce computed the wrong sum"));
                }
            } else {
                let got = coll::gather_with(t, g, 0, &send, &opts)?;
                if let Some(blocks) = got {
                    if blocks.len() != size || blocks.iter().any(|b| b.len() != send.len()) {
                        return Err(bad("gather returned the wrong blocks"));
                    }
                }
            }
            if i >= warmup {
                times.push(start.elapsed().as_secs_f64() * 1e6);
            }
        }
        if op == "bcast" && buf.iter().enumerate().any(|(i, &x)| x != i as i32) {
            return Err(bad("broadcast delivered the wrong data"));
        }
        0.0
    };
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    let slowest = times.iter().copied().fold(0.0f64, f64::max);
    let (t, g) = comm.transport_and_group();
    // Counted before the summaries below add their own (chain) messages.
    let st = t.stats();
    let peers = st
        .sent
        .iter()
        .zip(&st.received)
        .filter(|(s, r)| s.messages + r.messages > 0)
        .count() as f64;
    let chain = CollOptions::with_algorithm(Algorithm::Chain);
    let mut maxes = [mean, slowest, peers, setup_ms, init_ms];
    coll::allreduce_with(t, g, &mut maxes, &ReduceOp::Max, &chain)?;
    if rank == 0 {
        println!(
            "{op} {} {ints} {} setup_ms {:.2} root_avg_us {mean:.1} avg_us {:.1} max_us {:.1} \
             peers {} init_ms {:.2} mode {}",
            args[1],
            args[3],
            maxes[3],
            maxes[0],
            maxes[1],
            maxes[2],
            maxes[4],
            if persistent { "persistent" } else { "call" }
        );
    }
    comm.finish()
}

/// Checks a persistent round's result on this rank.
fn check(op: &str, pc: &PersistentColl<i32>, size: usize, ints: usize) -> ferry::Result<()> {
    match op {
        "bcast" => {
            if pc.data()?.iter().enumerate().any(|(i, &x)| x != i as i32) {
                return Err(bad("broadcast delivered the wrong data"));
            }
        }
        "allreduce" => {
            if pc.data()?.iter().any(|&x| x != size as i32) {
                return Err(bad("allreduce computed the wrong sum"));
            }
        }
        _ => {
            if let Some(out) = pc.output()? {
                let ok = out.len() == size * ints
                    && (0..size).all(|r| (0..ints).all(|i| out[r * ints + i] == (i + r) as i32));
                if !ok {
                    return Err(bad("gather returned the wrong blocks"));
                }
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bcast_gather: error: {e}");
            ExitCode::from(1)
        }
    }
}
