//! jac2d_ft_data: the 2d Jacobi of `jac2d` on the data layer, surviving the death of ranks
//! (issues 07 and 08: ferry-data containers on a shrunk communicator, recoverable).
//!
//! Usage as `jac2d`: `jac2d_ft_data [-s] [-n] [<side> [<maxiter>]]`; stdout as `jac2d_ft`
//! (the same lines whatever the number of ranks). The grids are two `ferry_data`
//! containers over a SHRINK/CONT communicator ([`ferry::ft::Communicator`]), written in row
//! strips (`Partitioner::Grid`) and read through their corner halo; every switch runs under
//! the communicator's failure rules ([`ferry::ft::data::switch`]). Every 10 iterations the
//! read grid is checkpointed to the buddy ranks ([`ferry::ft::data::Checkpoints`]). When a
//! rank dies the survivors revoke, shrink, make the partitionings over the survivors, restore
//! the grid of the last checkpoint into them (the dead rank's rows from its buddy), roll back
//! to its iteration and go on. `FERRY_FT_MODE=shrink` (default) or `rebuild`: under
//! `ferry run --respawn K` the launcher restarts a killed rank, the survivors and the
//! replacement form a communicator of the original size, the replacement gets its rows (and
//! its buddy copy) back from its neighbours and every rank rolls back to the checkpoint.
//!
//! Results do not depend on the number of ranks: each cell is computed from the same
//! neighbours in the same order, the residuum is summed per global row (a rank owns whole
//! rows) and the rows in y order, and the final sum is the master's sequential sum.

mod common;

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use ferry::coll::ReduceOp;
use ferry::data::{Container, DataFlow, Partitioner, Partitioning, Space};
use ferry::ft::data::{self, Checkpoints};
use ferry::ft::recover::abandon;
use ferry::ft::{Communicator, FailureMode, MessageMode, Options};
use ferry::{Error, ErrorKind};

/// Iterations between checkpoints.
const CHECKPOINT_EVERY: i64 = 10;

#[derive(Default, Clone, Copy)]
struct Opts {
    no_corners: bool,
    print_sum: bool,
    size: i64,
    maxiter: i64,
}

const USAGE: &str = "Usage: jac2d_ft_data [-s] [-n] [<side> [<maxiter>]]\n";

fn main() -> ExitCode {
    let mut args = common::CmdLine::from_env();
    let mut opts = Opts::default();
    while let Some(letter) = args.option() {
        match letter {
            Some(b'n') => opts.no_corners = true,
            Some(b's') => opts.print_sum = true,
            Some(b'h') => return common::usage(USAGE),
            _ => {}
        }
    }
    opts.size = args.pos(0);
    opts.maxiter = args.pos(1);
    common::main_with("jac2d_ft_data", || run(opts))
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

/// The partitionings of one communicator generation.
struct Parts {
    write: Partitioning,
    read: Partitioning,
}

impl Parts {
    fn new(comm: &Communicator, space: &Space, no_corners: bool) -> ferry::Result<Parts> {
        let rows = Partitioner::Grid {
            blocks: [1, comm.size(), 1],
        };
        let write = data::partitioning(comm, space, &rows)?;
        let halo = if no_corners {
            Partitioner::Halo { depth: 1 }
        } else {
            Partitioner::CornerHalo { depth: 1 }
        };
        let read = Partitioning::derived(space, &halo, &write)?;
        Ok(Parts { write, read })
    }

    /// Both grids laid out for this generation (write and read share one placement).
    fn adopt(&self, c: &mut Container<f64>) -> ferry::Result<()> {
        c.share_layout(&self.write, &self.read)?;
        Ok(())
    }
}

/// Initial values and boundary of the read grid.
fn init(c: &mut Container<f64>, size: i64) -> ferry::Result<()> {
    for own in c.my_ranges().to_vec() {
        for y in own.from()[1]..own.to()[1] {
            for x in own.from()[0]..own.to()[0] {
                c.set(&[x, y, 0], ((x + y) & 6) as f64)?;
            }
        }
    }
    set_boundary(c, size)
}

/// Boundary values, in the order the spec applies them (columns win at corners).
fn set_boundary(c: &mut Container<f64>, size: i64) -> ferry::Result<()> {
    for own in c.my_ranges().to_vec() {
        let (f, t) = (own.from(), own.to());
        for (y, v) in [(0, -5.0), (size - 1, 10.0)] {
            if f[1] <= y && y < t[1] {
                for x in f[0]..t[0] {
                    c.set(&[x, y, 0], v)?;
                }
            }
        }
        for (x, v) in [(0, -10.0), (size - 1, 5.0)] {
            if f[0] <= x && x < t[0] {
                for y in f[1]..t[1] {
                    c.set(&[x, y, 0], v)?;
                }
            }
        }
    }
    Ok(())
}

fn is_failure(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::PeerFailed | ErrorKind::Revoked)
}

fn run(o: Opts) -> ferry::Result<()> {
    let size = if o.size <= 0 { 2500 } else { o.size };
    let maxiter = if o.maxiter <= 0 { 50 } else { o.maxiter };
    if size > 1 << 20 {
        return Err(common::usage_error(format!(
            "side length {size} is too large"
        )));
    }
    let opts = Options::from_env(Options::new(FailureMode::Shrink, MessageMode::Cont))?;
    if !matches!(opts.failure, FailureMode::Shrink | FailureMode::Rebuild) {
        return Err(Error::config(format!(
            "FERRY_FT_MODE: jac2d_ft_data recovers in mode shrink or rebuild, not {:?}",
            opts.failure
        )));
    }
    let world = ferry::init()?;
    let nprocs = world.size();
    // The facade's data layer: honours data.shared_containers (and FERRY_LAYOUT_GENERIC).
    let mut inst = world.data_instance()?;
    let mut comm = world.ft_communicator(opts)?;
    let me = comm.world_rank();
    // A replacement (REBUILD) joins a running job: the header was printed long ago.
    if comm.rank() == 0 && !comm.is_replacement() {
        println!(
            "{}",
            common::jac2d_header(size, maxiter, nprocs, o.no_corners, 0)
        );
        let _ = std::io::stdout().flush();
    }
    let space = Space::new2(size as u64, size as u64)?;
    // grids[r] is read in the next iteration, the other one written.
    let mut grids = [
        Container::<f64>::new(&mut inst, "jac2d grid 0", &space),
        Container::<f64>::new(&mut inst, "jac2d grid 1", &space),
    ];
    let mut r = 0;
    let mut saved = Checkpoints::<f64>::new("jac2d grid");
    let mut parts = Parts::new(&comm, &space, o.no_corners)?;
    // A replacement starts from the survivors' last checkpoint (the restore below lays its
    // grids out); the others start from the initial values.
    let mut restore = comm.is_replacement();
    if !restore {
        for c in grids.iter_mut() {
            parts.adopt(c)?;
            data::switch(&comm, c, &parts.write, DataFlow::None, None)?;
        }
        init(&mut grids[r], size)?;
    }
    let mut st = Progress {
        iter: 0,
        checkpointed: None,
    };
    loop {
        let attempt = (|| -> Result<(), Failure> {
            if restore {
                let t0 = Instant::now();
                parts = Parts::new(&comm, &space, o.no_corners)?;
                for c in grids.iter_mut() {
                    parts.adopt(c)?;
                }
                // Survivors may have stopped at different iterations, with the grids' roles
                // swapped differently: the restored grid is grid 0 everywhere (a container's
                // messages are tagged with its creation number, so all must pick the same).
                r = 0;
                let epoch = saved.restore(&comm, &mut grids[r], &parts.write)?;
                grids[1 - r].assume(&parts.write, None)?;
                st.checkpointed = None;
                match epoch {
                    Some(e) => st.iter = e as i64,
                    None => {
                        init(&mut grids[r], size)?;
                        st.iter = 0;
                    }
                }
                eprintln!(
                    "jac2d_ft_data: rank {me}: recovered on generation {} with {} ranks {:?}, \
                     rolled back to iteration {} (restore {:.3} ms, {} bytes held for recovery)",
                    comm.generation(),
                    comm.size(),
                    comm.members(),
                    st.iter,
                    t0.elapsed().as_secs_f64() * 1e3,
                    saved.held_bytes()
                );
            }
            iterate(
                &comm,
                &parts,
                &mut grids,
                &mut r,
                &mut saved,
                &mut st,
                (size, maxiter),
            )?;
            if o.print_sum {
                final_sum(&comm, &space, &mut grids[r], st.iter)?;
            }
            Ok(())
        })();
        match attempt {
            Ok(()) => break,
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
    }
    comm.finish()
}

/// Where the iterations are.
struct Progress {
    iter: i64,
    /// Iteration of the checkpoint taken on the current communicator, if any.
    checkpointed: Option<i64>,
}

/// Ends this rank on an error it cannot recover from, without the orderly end of the
/// communicator: the other members must see it failed, not leave.
fn die(e: &Error) -> ! {
    eprintln!("jac2d_ft_data: error: {e}");
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(1)
}

/// Iterations from `st.iter` to the end, with a checkpoint every 10 (including the first).
fn iterate(
    comm: &Communicator,
    parts: &Parts,
    grids: &mut [Container<f64>; 2],
    r: &mut usize,
    saved: &mut Checkpoints<f64>,
    st: &mut Progress,
    (size, maxiter): (i64, i64),
) -> Result<(), Failure> {
    let mut rowsum = vec![0.0f64; size as usize];
    while st.iter < maxiter {
        let (a, b) = grids.split_at_mut(1);
        let (rd, wr) = if *r == 0 {
            (&mut a[0], &mut b[0])
        } else {
            (&mut b[0], &mut a[0])
        };
        if st.iter % CHECKPOINT_EVERY == 0 && st.checkpointed != Some(st.iter) {
            saved.checkpoint(comm, st.iter as u64, rd).map_err(agreed)?;
            st.checkpointed = Some(st.iter);
        }
        data::switch(comm, rd, &parts.read, DataFlow::Preserve, None)?;
        data::switch(comm, wr, &parts.write, DataFlow::None, None)?;
        set_boundary(wr, size)?;
        let with_res = st.iter % 10 == 0;
        if with_res {
            rowsum.fill(0.0);
        }
        if wr.num_mappings() > 0 {
            let own = wr.my_ranges()[0];
            let rm = rd.mapping(0)?;
            let w = wr.mapping_mut(0)?;
            let (wf, wt, wb) = (own.from(), own.to(), w.range.from());
            let rf = rm.range.from();
            let (rsy, wsy) = (rm.strides[1], w.strides[1]);
            let (x0, x1) = (wf[0].max(1), wt[0].min(size - 1));
            let (y0, y1) = (wf[1].max(1), wt[1].min(size - 1));
            if x0 < x1 {
                let n = (x1 - x0) as usize;
                for y in y0..y1 {
                    let rc = (y - rf[1]) as usize * rsy + (x0 - rf[0]) as usize;
                    let up = &rm.data[rc - rsy..rc - rsy + n];
                    let mid = &rm.data[rc - 1..rc + n + 1];
                    let down = &rm.data[rc + rsy..rc + rsy + n];
                    let wc = (y - wb[1]) as usize * wsy + (x0 - wb[0]) as usize;
                    let out = &mut w.data[wc..wc + n];
                    if with_res {
                        let mut res = 0.0f64;
                        for k in 0..n {
                            let nv = 0.25 * (up[k] + mid[k] + mid[k + 2] + down[k]);
                            out[k] = nv;
                            let d = mid[k + 1] - nv;
                            res += d * d;
                        }
                        rowsum[y as usize] = res;
                    } else {
                        for k in 0..n {
                            out[k] = 0.25 * (up[k] + mid[k] + mid[k + 2] + down[k]);
                        }
                    }
                }
            }
        }
        *r = 1 - *r;
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

/// `-s`: the grid switched to the master, summed y outer / x inner as `jac2d` does; the run
/// counts as done once every survivor agrees that the switch worked and the master lives.
fn final_sum(
    comm: &Communicator,
    space: &Space,
    rd: &mut Container<f64>,
    iter: i64,
) -> Result<(), Failure> {
    let gathered = gather_and_print(comm, space, rd, iter);
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

fn gather_and_print(
    comm: &Communicator,
    space: &Space,
    rd: &mut Container<f64>,
    iter: i64,
) -> ferry::Result<()> {
    let master = data::partitioning(comm, space, &Partitioner::Master)?;
    data::switch(comm, rd, &master, DataFlow::Preserve, None)?;
    if comm.rank() == 0 {
        let m = rd.mapping(0)?;
        let n = space.range().extent(0) as usize;
        let mut s = 0.0f64;
        for y in 0..n {
            for x in 0..n {
                s += m.data[x + y * m.strides[1]];
            }
        }
        println!("{}", common::value_sum_line(iter, s));
        let _ = std::io::stdout().flush();
    }
    Ok(())
}
