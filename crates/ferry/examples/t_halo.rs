//! t_halo: a 1-D halo exchange that talks only to its neighbours (X5 test program). Each rank
//! owns CELLS values; in each of ITERS iterations it exchanges its edge values with ranks
//! `rank - 1` and `rank + 1` (none at the ends) and relaxes its cells (Jacobi, fixed 0 and 1
//! at the outer boundaries). At the end the sum of all cells travels along the chain of
//! neighbours (left to right, then the result back), so no rank ever talks to a rank that is
//! not its neighbour. Rank 0 prints `halo ok: N ranks, ITERS iterations, sum S`.
//!
//! With `FERRY_STATS=1` every rank reports the connections (tcp) or rings (shm) it opened:
//! at most two peers each, whatever the number of ranks.
//! Usage: `t_halo [ITERS [CELLS]]`.

use std::process::ExitCode;

use ferry::{Exchange, MsgKey};

const LEFT_EDGE: u32 = 1;
const RIGHT_EDGE: u32 = 2;
const SUM_UP: u32 = 3;
const SUM_DOWN: u32 = 4;

fn f64s(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect()
}

fn run(iters: usize, cells: usize) -> ferry::Result<()> {
    let mut world = ferry::init()?;
    let (rank, size) = (world.rank(), world.size());
    let t = world.transport();
    let left = rank.checked_sub(1);
    let right = (rank + 1 < size).then_some(rank + 1);
    let mut u = vec![0.0f64; cells + 2];
    if left.is_none() {
        u[0] = 1.0;
    }
    let mut next = u.clone();
    for _ in 0..iters {
        // Both edges go out and both halos come in as one exchange.
        let (to_left, to_right) = (u[1].to_le_bytes(), u[cells].to_le_bytes());
        let (mut from_left, mut from_right) = (Vec::new(), Vec::new());
        let mut ex = Exchange::new();
        if let Some(l) = left {
            ex.send(l, MsgKey::user(LEFT_EDGE), &to_left);
            ex.recv(l, MsgKey::user(RIGHT_EDGE), &mut from_left);
        }
        if let Some(r) = right {
            ex.send(r, MsgKey::user(RIGHT_EDGE), &to_right);
            ex.recv(r, MsgKey::user(LEFT_EDGE), &mut from_right);
        }
        t.exchange(&mut ex)?;
        drop(ex);
        if left.is_some() {
            u[0] = f64s(&from_left).first().copied().unwrap_or(0.0);
        }
        if right.is_some() {
            u[cells + 1] = f64s(&from_right).first().copied().unwrap_or(0.0);
        }
        for i in 1..=cells {
            next[i] = 0.5 * (u[i - 1] + u[i + 1]);
        }
        next[0] = u[0];
        next[cells + 1] = u[cells + 1];
        std::mem::swap(&mut u, &mut next);
    }
    // The sum along the chain: partial sums flow right, the total flows back left.
    let mut sum: f64 = u[1..=cells].iter().sum();
    if let Some(l) = left {
        let mut v = Vec::new();
        t.recv(l, MsgKey::user(SUM_UP), &mut v)?;
        sum += f64s(&v).first().copied().unwrap_or(0.0);
    }
    if let Some(r) = right {
        t.send(r, MsgKey::user(SUM_UP), &sum.to_le_bytes())?;
        let mut v = Vec::new();
        t.recv(r, MsgKey::user(SUM_DOWN), &mut v)?;
        sum = f64s(&v).first().copied().unwrap_or(0.0);
    }
    if let Some(l) = left {
        t.send(l, MsgKey::user(SUM_DOWN), &sum.to_le_bytes())?;
    }
    if rank == 0 {
        println!("halo ok: {size} ranks, {iters} iterations, sum {sum:.6}");
    }
    world.finish()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num =
        |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    match run(num(0, 100), num(1, 100)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("t_halo: error: {e}");
            ExitCode::from(1)
        }
    }
}
