//! Self-test and micro-benchmark of the MPI backend, run under `mpirun` (used by
//! `tests/mpirun.rs`).
//!
//! `mpirun -n N mpi_selftest check`    exchanges of many shapes; prints `ok <name>` lines and
//!                                     exits 1 on the first failure.
//! `mpirun -n N mpi_selftest timeout`  rank 0 waits for a message that never comes and must get a
//!                                     timeout error (set `FERRY_GENERAL_OPERATION_TIMEOUT_MS`).
//! `mpirun -n 2 mpi_selftest bench`    ping-pong latency (8 B) and bandwidth (1 MiB) figures.
//! `mpirun -n N mpi_selftest stress [ROUNDS]`  random all-to-all rounds (sizes, keys incl.
//!                                     colliding hashed ones, receive order), every byte checked.
//! `mpirun -n N mpi_selftest threads`  the MPI thread level, and a send from a second thread
//!                                     (refused below `FERRY_MPI_THREAD_LEVEL=serialized`).
//!
//! With `MPI_SELFTEST_PREINIT=1` the program initialises MPI itself before the transport, as
//! a program with MPI traffic of its own does (the transport then works on duplicates).

mod bench;
mod check;
mod stress;

use std::process::ExitCode;
use std::time::Instant;

use ferry_core::{Config, ErrorKind, Exchange, MsgKey, Transport};
use ferry_mpi::MpiTransport;

fn fail(rank: usize, what: &str) -> ExitCode {
    eprintln!("rank {rank}: FAILED {what}");
    ExitCode::from(1)
}

pub(crate) fn pattern(from: usize, to: usize, len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ (from as u8) ^ ((to as u8) << 4) ^ salt)
        .collect()
}

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "check".into());
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    // Declared before the transport, so dropped (MPI_Finalize) after it.
    let _own_mpi = if std::env::var("MPI_SELFTEST_PREINIT").is_ok_and(|v| v == "1") {
        match mpi::initialize() {
            Some(universe) => Some(universe),
            None => {
                eprintln!("MPI_SELFTEST_PREINIT: MPI was initialised already");
                return ExitCode::from(2);
            }
        }
    } else {
        None
    };
    let mut t = match MpiTransport::init(&config) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let rank = t.rank();
    let result = match mode.as_str() {
        "check" => check::check(&mut t),
        "bench" => bench::bench(&mut t),
        // `selfbench [ITERS]`: a smaller count suits instruction-counting profilers.
        "selfbench" => {
            let iters = std::env::args()
                .nth(2)
                .and_then(|a| a.parse().ok())
                .unwrap_or(200_000);
            bench::selfbench(&mut t, iters)
        }
        "crossing" => stress::crossing(&mut t),
        "threads" => bench::threads(&mut t),
        "stress" => {
            let rounds = std::env::args()
                .nth(2)
                .and_then(|a| a.parse().ok())
                .unwrap_or(200);
            stress::stress(&mut t, rounds)
        }
        // With FERRY_MPI_ZERO_COPY_SENDS=1 and a short timeout: rank 0's exchange times out
        // while MPI still reads its buffer, and must not return before rank 1 took it.
        "settle" => {
            let data = pattern(0, 1, 1 << 20, 7);
            if rank == 0 {
                let start = Instant::now();
                let mut ex = Exchange::new();
                ex.send(1, MsgKey::user(42), &data);
                match t.exchange(&mut ex) {
                    Err(err) if err.kind() == ErrorKind::Timeout => {
                        println!("ok settle: timed out, returned after {:?}", start.elapsed());
                        Ok(())
                    }
                    Ok(()) => {
                        println!(
                            "ok settle: completed (buffered) after {:?}",
                            start.elapsed()
                        );
                        Ok(())
                    }
                    Err(other) => Err(format!("settle gave {other}")),
                }
            } else if rank == 1 {
                std::thread::sleep(std::time::Duration::from_millis(1500));
                let mut got = Vec::new();
                match t.recv(0, MsgKey::user(42), &mut got) {
                    Ok(()) if got == data => {
                        println!("ok settle: received intact");
                        Ok(())
                    }
                    Ok(()) => Err("settle: received data differs".into()),
                    Err(e) => Err(format!("settle receive: {e}")),
                }
            } else {
                Ok(())
            }
        }
        "timeout" => {
            if rank == 0 {
                let mut buf = Vec::new();
                let start = Instant::now();
                match t.recv(t.size() - 1, MsgKey::user(99), &mut buf) {
                    Err(err) if err.kind() == ErrorKind::Timeout => {
                        println!("ok timeout after {:?}: {err}", start.elapsed());
                        Ok(())
                    }
                    other => Err(format!("waiting for a missing message gave {other:?}")),
                }
            } else {
                Ok(())
            }
        }
        other => Err(format!("unknown mode `{other}`")),
    };
    if let Err(what) = result {
        return fail(rank, &what);
    }
    if let Err(e) = t.finish() {
        return fail(rank, &format!("finish: {e}"));
    }
    ExitCode::SUCCESS
}
