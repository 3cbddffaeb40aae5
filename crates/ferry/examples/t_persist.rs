//! t_persist: test program for persistent collectives under the launcher. Usage:
//! `t_persist ROUNDS [FAIL_RANK]`.
//!
//! Sets up a persistent broadcast (binomial, root 1 when there are two ranks or more), gather
//! (linear, root 0) and allreduce (chain, sum) once, then runs ROUNDS rounds; in each, every
//! collective is started, a ring shift of point-to-point messages runs between the start and
//! the wait (the collectives do not hold the transport), and the results are checked. Rank 0
//! prints `round K ok` per round and `persistent ok` at the end. With FAIL_RANK, that rank
//! exits (code 3) before round 2, so the others see a failed peer: each prints
//! `rank R: error: ...` on stderr and exits with code 1.

use std::process::ExitCode;

use ferry::coll::ReduceOp;
use ferry::coll::{Algorithm, CollOptions};
use ferry::Comm;

fn fail(what: String) -> ferry::Error {
    ferry::Error::invalid("t_persist", what)
}

fn run(comm: &mut Comm, rounds: usize, fail_rank: Option<usize>) -> ferry::Result<()> {
    let (me, p) = (comm.rank(), comm.size());
    let broot = if p > 1 { 1 } else { 0 };
    let mut bcast = comm.bcast_init_with(
        vec![0u64; 3],
        broot,
        &CollOptions::with_algorithm(Algorithm::BinomialTree),
    )?;
    let mut gather = comm.gather_init_with(
        vec![0u32; 2],
        0,
        &CollOptions::with_algorithm(Algorithm::Linear),
    )?;
    let mut sum = comm.allreduce_init_with(
        vec![0i64; 4],
        ReduceOp::Sum,
        &CollOptions::with_algorithm(Algorithm::Chain),
    )?;
    for round in 0..rounds {
        if fail_rank == Some(me) && round == 2 {
            std::process::exit(3);
        }
        let r = round as u64;
        if me == broot {
            bcast.data_mut()?.copy_from_slice(&[r, r * 2, r * 3]);
        }
        gather
            .data_mut()?
            .copy_from_slice(&[me as u32, round as u32]);
        for (i, x) in sum.data_mut()?.iter_mut().enumerate() {
            *x = (me * 10 + i + round) as i64;
        }
        bcast.start(comm)?;
        gather.start(comm)?;
        sum.start(comm)?;
        let mut got = [0u64; 1];
        comm.sendrecv_into(
            &[r * 100 + me as u64],
            (me + 1) % p,
            &mut got,
            (me + p - 1) % p,
            7,
        )?;
        if got[0] != r * 100 + ((me + p - 1) % p) as u64 {
            return Err(fail(format!("ring shift got {}", got[0])));
        }
        bcast.wait(comm)?;
        gather.wait(comm)?;
        sum.wait(comm)?;
        if bcast.data()? != [r, r * 2, r * 3] {
            return Err(fail(format!(
                "round {round}: broadcast got {:?}",
                bcast.data()?
            )));
        }
        if let Some(out) = gather.output()? {
            let want: Vec<u32> = (0..p).flat_map(|q| [q as u32, round as u32]).collect();
            if out != want.as_slice() {
                return Err(fail(format!("round {round}: gather got {out:?}")));
            }
        }
        let want: Vec<i64> = (0..4)
            .map(|i| (0..p).map(|q| (q * 10 + i + round) as i64).sum())
            .collect();
        if sum.data()? != want.as_slice() {
            return Err(fail(format!(
                "round {round}: allreduce got {:?}",
                sum.data()?
            )));
        }
        if me == 0 {
            println!("round {round} ok");
        }
    }
    bcast.free(comm)?;
    gather.free(comm)?;
    sum.free(comm)?;
    if me == 0 {
        println!("persistent ok");
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(rounds) = args.first().and_then(|a| a.parse::<usize>().ok()) else {
        eprintln!("usage: t_persist ROUNDS [FAIL_RANK]");
        return ExitCode::from(2);
    };
    let fail_rank = args.get(1).and_then(|a| a.parse::<usize>().ok());
    let mut comm = match Comm::init() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("t_persist: error: {e}");
            return ExitCode::from(1);
        }
    };
    let rank = comm.rank();
    match run(&mut comm, rounds, fail_rank).and_then(|()| comm.finish()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rank {rank}: error: {e}");
            ExitCode::from(1)
        }
    }
}
