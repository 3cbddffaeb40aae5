//! jac2d_ft: the 2d Jacobi of `jac2d` surviving the death of ranks (issue 08, F6).
//!
//! Same arguments and, when nothing fails, the same stdout as `jac2d`. The grid is kept in
//! row blocks over a SHRINK/CONT communicator ([`ferry::ft::Communicator`]) and declared
//! recoverable ([`ferry::ft::Recoverable`]): every 10 iterations a checkpoint copies each
//! rank's rows to its buddy (the next rank). When a rank dies the survivors revoke, shrink,
//! restore the rows of the last checkpoint over the smaller communicator, roll back to its
//! iteration and go on; the next checkpoint (right away) gives every part a buddy again, so a
//! later failure is survived too. `FERRY_FT_MODE=shrink` (default) or `rebuild`: under
//! `ferry run --respawn K` the launcher restarts a killed rank, the survivors and the
//! replacement form a communicator of the original size, and the replacement restores its
//! rows from its buddy's copy (without `--respawn`, REBUILD is refused at start).
//!
//! Results do not depend on the number of ranks, so a rollback onto fewer ranks prints the
//! same lines: every cell is computed from the same neighbours in the same order, the
//! residuum is summed per global row (in x order) and the rows in y order (each row's sum
//! travels in an allreduce in which every other rank adds exact zeros), and the final value
//! sum is the master's sequential sum over the gathered grid, as in `jac2d`.

mod common;

use std::io::Write;
use std::ops::Range;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ferry::coll::ReduceOp;
use ferry::ft::recover::abandon;
use ferry::ft::{Communicator, FailureMode, MessageMode, Options, Recoverable};
use ferry::{Error, ErrorKind};

const USAGE: &str = "Usage: jac2d_ft [options] [<side> [<maxiter> [<repart>]]]

Options:
 -n : use halo partitioner without corners
 -p : write profiling data to 'jac2d_ft_profiling.txt'
 -s : print value sum at end (warning: sum done at master)
 -r : reserve memory for both partitionings before the loop
 -e : pre-calculate transitions
 -a : pre-calculate action sequences
 -h : print this help text and exit

Failure mode: FERRY_FT_MODE=shrink (default) or rebuild.
";

/// Iterations between checkpoints.
const CHECKPOINT_EVERY: i64 = 10;
const TAG_UP: u32 = 1;
const TAG_DOWN: u32 = 2;
const TAG_GATHER: u32 = 3;

#[derive(Default, Clone, Copy)]
struct Opts {
    no_corners: bool,
    profile: bool,
    print_sum: bool,
    size: i64,
    maxiter: i64,
    repart: i64,
}

fn main() -> ExitCode {
    let mut args = common::CmdLine::from_env();
    let mut opts = Opts::default();
    while let Some(letter) = args.option() {
        match letter {
            Some(b'n') => opts.no_corners = true,
            Some(b'p') => opts.profile = true,
            Some(b's') => opts.print_sum = true,
            // -r, -e, -a tune ferry-data containers, which this program does not use.
            Some(b'h') => return common::usage(USAGE),
            _ => {}
        }
    }
    opts.size = args.pos(0);
    opts.maxiter = args.pos(1);
    opts.repart = args.pos(2);
    common::main_with("jac2d_ft", || run(opts))
}

/// This rank's rows of both grids (with one halo row above and below) on one communicator.
struct Grid {
    size: usize,
    /// Global rows owned.
    rows: Range<usize>,
    /// Read grid: local row `y - rows.start + 1` holds global row `y`.
    rd: Vec<f64>,
    /// Write grid, same layout.
    wr: Vec<f64>,
}

impl Grid {
    fn new(size: usize, rows: Range<usize>) -> Grid {
        let n = (rows.len() + 2) * size;
        Grid {
            size,
            rows,
            rd: vec![0.0; n],
            wr: vec![0.0; n],
        }
    }

    /// The owned rows of the read grid (what a checkpoint keeps).
    fn owned(&self) -> &[f64] {
        &self.rd[self.size..(self.rows.len() + 1) * self.size]
    }

    fn init(&mut self) {
        let s = self.size;
        for y in self.rows.clone() {
            let l = y - self.rows.start + 1;
            for x in 0..s {
                self.rd[l * s + x] = ((x + y) & 6) as f64;
            }
        }
        set_boundary(&mut self.rd, s, &self.rows);
    }
}

/// Boundary values, in the order the spec applies them (columns win at corners).
fn set_boundary(g: &mut [f64], size: usize, rows: &Range<usize>) {
    let mut row = |y: usize, v: f64| {
        if rows.contains(&y) {
            let l = y - rows.start + 1;
            g[l * size..(l + 1) * size].fill(v);
        }
    };
    row(0, -5.0);
    row(size - 1, 10.0);
    for y in rows.clone() {
        let l = y - rows.start + 1;
        g[l * size] = -10.0;
        g[l * size + size - 1] = 5.0;
    }
}

/// The values as bytes (native order: every rank runs the same build on one machine type).
fn to_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// Fills `dst` from `bytes`; false if the lengths differ.
fn copy_from_bytes(dst: &mut [f64], bytes: &[u8]) -> bool {
    if bytes.len() != dst.len() * 8 {
        return false;
    }
    for (d, c) in dst.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        *d = f64::from_ne_bytes(a);
    }
    true
}

/// An error, and whether the agreement that tells every survivor about it already happened
/// (a checkpoint's commit or the final sum's): then the program shrinks at once, otherwise it
/// first joins that agreement ([`abandon`]).
struct Failure {
    e: Error,
    agreed: bool,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure { e, agreed: false }
    }
}

fn agreed(e: Error) -> Failure {
    Failure { e, agreed: true }
}

/// Whether an error is a failure the survivors recover from.
fn is_failure(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::PeerFailed | ErrorKind::Revoked)
}

/// Communicator ranks owning at least one row, in order (all of them unless size < ranks).
fn row_owners(size: usize, n: usize) -> Vec<usize> {
    (0..n)
        .filter(|&k| !ferry::ft::recover::block_range(size, n, k).is_empty())
        .collect()
}

struct State {
    grid: Grid,
    iter: i64,
    /// Iteration of the checkpoint taken on the current communicator, if any.
    checkpointed: Option<i64>,
}

#[derive(Default)]
struct Costs {
    checkpoints: u32,
    checkpoint_time: Duration,
    iterations: u64,
    iteration_time: Duration,
    recoveries: u32,
    restore_time: Duration,
}

fn run(o: Opts) -> ferry::Result<()> {
    let size = if o.size <= 0 { 2500 } else { o.size };
    let maxiter = if o.maxiter <= 0 { 50 } else { o.maxiter };
    if size > 1 << 20 {
        return Err(common::usage_error(format!(
            "side length {size} is too large"
        )));
    }
    let size = size as usize;
    let opts = Options::from_env(Options::new(FailureMode::Shrink, MessageMode::Cont))?;
    if !matches!(opts.failure, FailureMode::Shrink | FailureMode::Rebuild) {
        return Err(Error::config(format!(
            "FERRY_FT_MODE: jac2d_ft recovers in mode shrink or rebuild, not {:?}",
            opts.failure
        )));
    }
    let world = ferry::init()?;
    let nprocs = world.size();
    let mut comm = world.ft_communicator(opts)?;
    let me = comm.world_rank();
    // A replacement (REBUILD) joins a running job: the header was printed long ago.
    if comm.rank() == 0 && !comm.is_replacement() {
        println!(
            "{}",
            common::jac2d_header(size as i64, maxiter, nprocs, o.no_corners, o.repart)
        );
        let _ = std::io::stdout().flush();
    }
    let start = Instant::now();
    let mut saved = Recoverable::<f64>::new("jac2d grid", size, size);
    let mut st = State {
        grid: Grid::new(size, saved.range(&comm)),
        iter: 0,
        checkpointed: None,
    };
    st.grid.init();
    let mut costs = Costs::default();
    // A replacement starts from the survivors' last checkpoint.
    let mut restore = comm.is_replacement();
    let final_iter = loop {
        let attempt = (|| -> Result<i64, Failure> {
            if restore {
                let t0 = Instant::now();
                let r = saved.restore(&comm)?;
                st.grid = Grid::new(size, r.range.clone());
                st.checkpointed = None;
                match r.epoch {
                    Some(e) => {
                        let n = st.grid.rows.len() * size;
                        st.grid.rd[size..size + n].copy_from_slice(&r.data);
                        st.iter = e as i64;
                    }
                    None => {
                        st.grid.init();
                        st.iter = 0;
                    }
                }
                costs.recoveries += 1;
                costs.restore_time += t0.elapsed();
                eprintln!(
                    "jac2d_ft: rank {me}: recovered on generation {} with {} ranks {:?}, \
                     rolled back to iteration {} (restore {:.3} ms)",
                    comm.generation(),
                    comm.size(),
                    comm.members(),
                    st.iter,
                    t0.elapsed().as_secs_f64() * 1e3
                );
            }
            iterate(&comm, &mut saved, &mut st, maxiter, &mut costs)?;
            if o.print_sum {
                final_sum(&comm, &st)?;
            }
            Ok(st.iter)
        })();
        match attempt {
            Ok(it) => break it,
            Err(f) if is_failure(&f.e) => {
                tracing::info!("rank {me}: {}", f.e);
                if !f.agreed {
                    abandon(&comm).unwrap_or_else(|e| die(&e));
                }
                // SHRINK compacts over the survivors; REBUILD gets replacements.
                comm = comm.recover().unwrap_or_else(|e| die(&e));
                restore = true;
            }
            Err(f) => die(&f.e),
        }
    };
    if o.profile {
        write_profile(me, final_iter, start.elapsed(), &costs, &saved)?;
    }
    comm.finish()
}

/// Ends this rank on an error it cannot recover from, without the orderly end of the
/// communicator: the other members must see it failed (and recover without it), not leave.
fn die(e: &Error) -> ! {
    eprintln!("jac2d_ft: error: {e}");
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(1)
}

/// Iterations from `st.iter` to the end, with a checkpoint every 10 (including the first).
fn iterate(
    comm: &Communicator,
    saved: &mut Recoverable<f64>,
    st: &mut State,
    maxiter: i64,
    costs: &mut Costs,
) -> Result<(), Failure> {
    let size = st.grid.size;
    let owners = row_owners(size, comm.size());
    let pos = owners.iter().position(|&k| k == comm.rank());
    let up = pos.and_then(|p| p.checked_sub(1)).map(|p| owners[p]);
    let down = pos.and_then(|p| owners.get(p + 1)).copied();
    let mut rowsum = vec![0.0f64; size];
    while st.iter < maxiter {
        if st.iter % CHECKPOINT_EVERY == 0 && st.checkpointed != Some(st.iter) {
            let t0 = Instant::now();
            saved
                .checkpoint(comm, st.iter as u64, st.grid.owned())
                .map_err(agreed)?;
            st.checkpointed = Some(st.iter);
            costs.checkpoints += 1;
            costs.checkpoint_time += t0.elapsed();
        }
        let t0 = Instant::now();
        let g = &mut st.grid;
        let nrows = g.rows.len();
        // Halo rows of the read grid from the neighbours in the row order.
        if nrows > 0 {
            let mut above = Vec::new();
            let mut below = Vec::new();
            let first = to_bytes(&g.rd[size..2 * size]);
            let last = to_bytes(&g.rd[nrows * size..(nrows + 1) * size]);
            let mut sends = Vec::with_capacity(2);
            let mut recvs: Vec<(usize, u32, &mut Vec<u8>)> = Vec::with_capacity(2);
            if let Some(u) = up {
                sends.push((u, TAG_UP, &first[..]));
                recvs.push((u, TAG_DOWN, &mut above));
            }
            if let Some(d) = down {
                sends.push((d, TAG_DOWN, &last[..]));
                recvs.push((d, TAG_UP, &mut below));
            }
            comm.sendrecv(&sends, &mut recvs)?;
            drop(recvs);
            let ok = (up.is_none() || copy_from_bytes(&mut g.rd[..size], &above))
                && (down.is_none() || copy_from_bytes(&mut g.rd[(nrows + 1) * size..], &below));
            if !ok {
                return Err(Error::new(ErrorKind::Protocol, "halo exchange")
                    .on_rank(comm.world_rank())
                    .with_detail("a halo row of the wrong length")
                    .into());
            }
        }
        set_boundary(&mut g.wr, size, &g.rows);
        let with_res = st.iter % 10 == 0;
        if with_res {
            rowsum.fill(0.0);
        }
        let (y0, y1) = (g.rows.start.max(1), g.rows.end.min(size - 1));
        for (y, row_res) in rowsum.iter_mut().enumerate().take(y1).skip(y0) {
            let l = y - g.rows.start + 1;
            let (x0, x1) = (1, size - 1);
            if x0 >= x1 {
                break;
            }
            let n = x1 - x0;
            let rc = l * size + x0;
            let upr = &g.rd[rc - size..rc - size + n];
            let mid = &g.rd[rc - 1..rc + n + 1];
            let dn = &g.rd[rc + size..rc + size + n];
            let out = &mut g.wr[rc..rc + n];
            if with_res {
                let mut res = 0.0f64;
                for k in 0..n {
                    let nv = 0.25 * (upr[k] + mid[k] + mid[k + 2] + dn[k]);
                    out[k] = nv;
                    let d = mid[k + 1] - nv;
                    res += d * d;
                }
                *row_res = res;
            } else {
                for k in 0..n {
                    out[k] = 0.25 * (upr[k] + mid[k] + mid[k + 2] + dn[k]);
                }
            }
        }
        std::mem::swap(&mut g.rd, &mut g.wr);
        costs.iterations += 1;
        costs.iteration_time += t0.elapsed();
        if with_res {
            // Every row's sum comes from one rank; the others add exact zeros.
            comm.allreduce(&mut rowsum, &ReduceOp::Sum)?;
            let res = rowsum.iter().fold(0.0f64, |a, &r| a + r);
            if comm.rank() == 0 {
                println!("{}", common::residuum_line(st.iter + 1, res));
                let _ = std::io::stdout().flush();
            }
            if res < 0.001 {
                break;
            }
        }
        st.iter += 1;
    }
    Ok(())
}

/// `-s`: the grid gathered to the master, summed y outer / x inner as `jac2d` does; the run
/// counts as done once every survivor agrees that the gather worked and the master lives
/// (if the master died, the survivors roll back and the new master prints it).
fn final_sum(comm: &Communicator, st: &State) -> Result<(), Failure> {
    let gathered = gather_and_print(comm, st);
    if gathered.is_err() {
        comm.revoke().map_err(agreed)?;
    }
    let master = comm.members()[0];
    let (ok, failed) = comm.agree(u64::from(gathered.is_ok())).map_err(agreed)?;
    gathered.map_err(agreed)?;
    if ok & 1 == 0 || failed.contains(&master) {
        return Err(agreed(
            Error::new(ErrorKind::PeerFailed, "final sum")
                .on_rank(comm.world_rank())
                .with_peer(failed.first().copied().unwrap_or(master))
                .with_detail(format!(
                    "failed ranks {failed:?} before the sum was printed"
                )),
        ));
    }
    Ok(())
}

fn gather_and_print(comm: &Communicator, st: &State) -> ferry::Result<()> {
    let size = st.grid.size;
    let n = comm.size();
    if comm.rank() != 0 {
        let mine = to_bytes(st.grid.owned());
        if !mine.is_empty() {
            comm.send(0, TAG_GATHER, &mine)?;
        }
        return Ok(());
    }
    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut recvs: Vec<(usize, u32, &mut Vec<u8>)> = bufs
        .iter_mut()
        .enumerate()
        .skip(1)
        .filter(|(k, _)| !ferry::ft::recover::block_range(size, n, *k).is_empty())
        .map(|(k, b)| (k, TAG_GATHER, b))
        .collect();
    comm.sendrecv(&[], &mut recvs)?;
    drop(recvs);
    let mut s = 0.0f64;
    for (k, b) in bufs.iter().enumerate() {
        let rows = ferry::ft::recover::block_range(size, n, k);
        let mut part = vec![0.0f64; rows.len() * size];
        if k == 0 {
            part.copy_from_slice(st.grid.owned());
        } else if !copy_from_bytes(&mut part, b) {
            return Err(Error::new(ErrorKind::Protocol, "gather")
                .on_rank(comm.world_rank())
                .with_peer(comm.members()[k])
                .with_detail(format!("{} bytes for rows {rows:?}", b.len())));
        }
        for v in part {
            s += v;
        }
    }
    println!("{}", common::value_sum_line(st.iter, s));
    let _ = std::io::stdout().flush();
    Ok(())
}

/// `-p`: one line per rank appended to `jac2d_ft_profiling.txt`: total, iteration,
/// checkpoint and restore times and the bytes held for recovery.
fn write_profile(
    rank: usize,
    iters: i64,
    total: Duration,
    c: &Costs,
    saved: &Recoverable<f64>,
) -> ferry::Result<()> {
    let per = |d: Duration, n: u64| d.as_secs_f64() * 1e3 / n.max(1) as f64;
    let line = format!(
        "rank {rank}: {iters} iterations, total {:.6} s, {:.3} ms per iteration, {} checkpoints \
         {:.3} ms each, {} recoveries {:.3} ms each, {} bytes held for recovery\n",
        total.as_secs_f64(),
        per(c.iteration_time, c.iterations),
        c.checkpoints,
        per(c.checkpoint_time, u64::from(c.checkpoints)),
        c.recoveries,
        per(c.restore_time, u64::from(c.recoveries)),
        saved.held_bytes()
    );
    common::append_line("jac2d_ft_profiling.txt", &line)
}
