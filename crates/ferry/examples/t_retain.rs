//! t_retain: test program for retained messages (T6, `tcp.retain`) in hand-started tcp jobs.
//!
//! Usage: `t_retain ITERS [ELEMS [SLEEP_MS [CKPT_EVERY CKPT_DIR]]]` (defaults 200, 1000, 0).
//! Every rank holds ELEMS doubles; in each iteration it swaps them with both ring neighbours
//! (point-to-point) and smooths its values with theirs, then sleeps SLEEP_MS (so that a test
//! can kill it mid-run). Every 10 iterations the ranks send their sums to rank 0 and run two
//! collectives (an allreduce of the largest value, an allgather of the sums); rank 0 prints
//! `iter I sum S max M allgather A`. At the end rank 0 prints `Global sum after ITERS
//! iterations: S`.
//!
//! With CKPT_EVERY and CKPT_DIR, every CKPT_EVERY iterations each rank writes its values and
//! its retention token to `CKPT_DIR/rank-R.ckpt` (a temporary file renamed into place) and
//! marks the checkpoint ([`ferry::retain::checkpoint`]), so that its senders drop what it
//! consumed; a rank that is a restart ([`ferry::Comm::is_restart`]) resumes from its file
//! ([`ferry::retain::resume`]; a file found by a first start is an earlier job's and ignored).
//! Without them a restarted rank runs again from the start.
//! Either way the output equals that of an undisturbed run (rank 0 is the one that prints; a
//! restarted rank 0 prints its lines again).

mod common;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use ferry::coll::ReduceOp;
use ferry::{Comm, Error, ErrorKind};

const HALO: u32 = 1;
const SUM: u32 = 2;

fn main() -> ExitCode {
    common::main_with("t_retain", run)
}

struct Args {
    iters: usize,
    elems: usize,
    sleep: Duration,
    ckpt: Option<(usize, PathBuf)>,
}

fn args() -> ferry::Result<Args> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: i64| a.get(i).map_or(default, |s| common::atoi(s));
    let ckpt = match (a.get(3), a.get(4)) {
        (Some(k), Some(dir)) if common::atoi(k) > 0 => {
            Some((common::atoi(k) as usize, PathBuf::from(dir)))
        }
        (None, None) => None,
        _ => {
            return Err(Error::new(ErrorKind::InvalidArgument, "t_retain")
                .with_detail("usage: t_retain ITERS [ELEMS [SLEEP_MS [CKPT_EVERY CKPT_DIR]]]"))
        }
    };
    Ok(Args {
        iters: num(0, 200).max(1) as usize,
        elems: num(1, 1000).max(1) as usize,
        sleep: Duration::from_millis(num(2, 0).max(0) as u64),
        ckpt,
    })
}

fn io_err(op: &'static str, path: &Path, e: std::io::Error) -> Error {
    Error::io(op, e).with_detail(format!("{}", path.display()))
}

/// Checkpoint file: iteration (8 bytes), element count (8), values, token length (8), token.
fn save(path: &Path, iter: usize, values: &[f64], token: &[u8]) -> ferry::Result<()> {
    let mut b = Vec::with_capacity(24 + values.len() * 8 + token.len());
    b.extend_from_slice(&(iter as u64).to_le_bytes());
    b.extend_from_slice(&(values.len() as u64).to_le_bytes());
    for v in values {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&(token.len() as u64).to_le_bytes());
    b.extend_from_slice(token);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, &b).map_err(|e| io_err("checkpoint", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io_err("checkpoint", path, e))
}

/// A saved checkpoint: iteration, values, retention token.
type Saved = (usize, Vec<f64>, Vec<u8>);

fn load(path: &Path, elems: usize) -> ferry::Result<Option<Saved>> {
    let b = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("resume", path, e)),
    };
    let bad = || {
        Error::new(ErrorKind::InvalidArgument, "resume")
            .with_detail(format!("{} is not a t_retain checkpoint", path.display()))
    };
    let word = |i: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            b.get(i * 8..i * 8 + 8)?.try_into().ok()?,
        ))
    };
    let iter = word(0).ok_or_else(bad)? as usize;
    let n = word(1).ok_or_else(bad)? as usize;
    if n != elems {
        return Err(bad());
    }
    let values: Option<Vec<f64>> = (0..n).map(|i| word(2 + i).map(f64::from_bits)).collect();
    let values = values.ok_or_else(bad)?;
    let tlen = word(2 + n).ok_or_else(bad)? as usize;
    let token = b.get((3 + n) * 8..(3 + n) * 8 + tlen).ok_or_else(bad)?;
    Ok(Some((iter, values, token.to_vec())))
}

fn run() -> ferry::Result<()> {
    let a = args()?;
    let mut comm = Comm::init()?;
    let (me, n) = (comm.rank(), comm.size());
    let mut x: Vec<f64> = (0..a.elems)
        .map(|i| ((me * a.elems + i) % 97) as f64)
        .collect();
    let mut start = 0;
    let ckpt_file = a
        .ckpt
        .as_ref()
        .map(|(_, dir)| dir.join(format!("rank-{me}.ckpt")));
    if let Some(file) = &ckpt_file {
        // Only a restart resumes; a file found by a first start is an earlier job's.
        if comm.is_restart()? {
            match load(file, a.elems)? {
                Some((iter, values, token)) => {
                    ferry::retain::resume(&mut comm, &token)?;
                    x = values;
                    start = iter;
                    eprintln!("t_retain: rank {me} resumes at iteration {iter}");
                }
                None => eprintln!("t_retain: rank {me} restarts without a checkpoint"),
            }
        }
    }
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    let mut from_left = vec![0.0; a.elems];
    let mut from_right = vec![0.0; a.elems];
    for iter in start..a.iters {
        if n > 1 {
            comm.sendrecv_into(&x, right, &mut from_left, left, HALO)?;
            comm.sendrecv_into(&x, left, &mut from_right, right, HALO)?;
        } else {
            from_left.copy_from_slice(&x);
            from_right.copy_from_slice(&x);
        }
        for i in 0..a.elems {
            x[i] = 0.5 * x[i] + 0.25 * (from_left[i] + from_right[(i + 1) % a.elems]);
        }
        let done = iter + 1;
        if done.is_multiple_of(10) || done == a.iters {
            let mine: f64 = x.iter().sum();
            // Two collectives as well (their sequence numbers must survive a resume from a
            // checkpoint): the largest value, and every rank's sum.
            let top =
                comm.allreduce_value(x.iter().copied().fold(f64::MIN, f64::max), ReduceOp::Max)?;
            let sums = comm.allgather(&[mine])?;
            if me == 0 {
                let mut total = mine;
                for r in 1..n {
                    total += comm.recv_value::<f64>(r, SUM)?;
                }
                let check: f64 = sums.iter().sum();
                if done == a.iters {
                    println!("Global sum after {done} iterations: {total:.9}");
                } else {
                    println!("iter {done} sum {total:.9} max {top:.9} allgather {check:.9}");
                }
            } else {
                comm.send_value(mine, 0, SUM)?;
            }
        }
        if let (Some((every, _)), Some(file)) = (&a.ckpt, &ckpt_file) {
            if done.is_multiple_of(*every) && done < a.iters {
                let values = x.clone();
                ferry::retain::checkpoint(&mut comm, |token| save(file, done, &values, token))?;
            }
        }
        if !a.sleep.is_zero() {
            std::thread::sleep(a.sleep);
        }
    }
    comm.finish()
}
