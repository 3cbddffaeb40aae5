//! jac2d: 2d Jacobi, 5-point stencil (examples.md §6; D2, D4, D5, D6).
//!
//! Usage: `jac2d [options] [size [maxiter [repart]]]`, defaults 2500 and 50; repart is only
//! echoed. Options (only the second character counts): `-n` halo without corners, `-p`
//! profiling into `jac2d_profiling.txt`, `-s` print the value sum at the end, `-r` reserve
//! memory for both partitionings, `-e` precompute the transition, `-a` precompute action
//! sequences, `-h` usage. None of them changes the printed numbers.
//!
//! Writes use the bisection partitioning, reads its (corner) halo of depth 1.

mod common;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry::data::{ActionSeq, Transition};
use ferry::prelude::*;

const USAGE: &str = "Usage: jac2d [options] [<side> [<maxiter> [<repart>]]]

Options:
 -n : use halo partitioner without corners
 -p : write profiling data to 'jac2d_profiling.txt'
 -s : print value sum at end (warning: sum done at master)
 -r : reserve memory for both partitionings before the loop
 -e : pre-calculate transitions
 -a : pre-calculate action sequences
 -h : print this help text and exit
";

fn main() -> ExitCode {
    let mut args = common::CmdLine::from_env();
    let mut opts = Opts::default();
    while let Some(letter) = args.option() {
        match letter {
            Some(b'n') => opts.no_corners = true,
            Some(b'p') => opts.profile = true,
            Some(b's') => opts.print_sum = true,
            Some(b'r') => opts.reserve = true,
            Some(b'e') => opts.transitions = true,
            Some(b'a') => opts.actions = true,
            Some(b'h') => return common::usage(USAGE),
            _ => {}
        }
    }
    opts.size = args.pos(0);
    opts.maxiter = args.pos(1);
    opts.repart = args.pos(2);
    common::main_with("jac2d", || run(opts))
}

#[derive(Default, Clone, Copy)]
struct Opts {
    no_corners: bool,
    profile: bool,
    print_sum: bool,
    reserve: bool,
    transitions: bool,
    actions: bool,
    size: i64,
    maxiter: i64,
    repart: i64,
}

/// A container with the precomputed write->read switch bound to it (`-e`/`-a`).
struct Buf {
    c: Container<f64>,
    to_read: Option<ActionSeq<f64>>,
}

/// Boundary values, in the order the spec applies them (columns win at corners).
fn set_boundary(c: &mut Container<f64>, size: i64) -> ferry::Result<()> {
    if c.num_mappings() == 0 {
        return Ok(());
    }
    let own = c.my_ranges()[0];
    let m = c.mapping_mut(0)?;
    let (f, t) = (own.from(), own.to());
    let b = m.range.from();
    let sy = m.strides[1];
    let at = |x: i64, y: i64| (x - b[0]) as usize + (y - b[1]) as usize * sy;
    let row = |y: i64, v: f64, d: &mut [f64]| {
        if f[1] <= y && y < t[1] {
            for x in f[0]..t[0] {
                d[at(x, y)] = v;
            }
        }
    };
    row(0, -5.0, m.data);
    row(size - 1, 10.0, m.data);
    let col = |x: i64, v: f64, d: &mut [f64]| {
        if f[0] <= x && x < t[0] {
            for y in f[1]..t[1] {
                d[at(x, y)] = v;
            }
        }
    };
    col(0, -10.0, m.data);
    col(size - 1, 5.0, m.data);
    Ok(())
}

fn run(o: Opts) -> ferry::Result<()> {
    let size = if o.size <= 0 { 2500 } else { o.size };
    let maxiter = if o.maxiter <= 0 { 50 } else { o.maxiter };
    if size > 1 << 20 {
        return Err(common::usage_error(format!(
            "side length {size} is too large"
        )));
    }
    let mut comm = Comm::init()?;
    let (rank, nprocs) = (comm.rank(), comm.size());
    if rank == 0 {
        println!(
            "{}",
            common::jac2d_header(size, maxiter, nprocs, o.no_corners, o.repart)
        );
    }
    let start = Instant::now();
    let space = Space::new2(size as u64, size as u64)?;
    let pwrite = comm.partitioning(&space, &Partitioner::Bisection)?;
    let halo = if o.no_corners {
        Partitioner::Halo { depth: 1 }
    } else {
        Partitioner::CornerHalo { depth: 1 }
    };
    let pread = Partitioning::derived(&space, &halo, &pwrite)?;
    let mut rd = Buf {
        c: comm.container("data1", &space),
        to_read: None,
    };
    let mut wr = Buf {
        c: comm.container("data2", &space),
        to_read: None,
    };
    for b in [&mut rd, &mut wr] {
        // Write and read partitionings share one placement: the switch only moves halos.
        b.c.share_layout(&pwrite, &pread)?;
        if o.reserve {
            b.c.reserve(&[&pwrite, &pread])?;
        }
        comm.switch(&mut b.c, &pwrite, DataFlow::None)?;
    }
    if o.transitions || o.actions {
        let shared = Arc::new(Transition::new(
            &pwrite,
            &pread,
            rank,
            DataFlow::Preserve,
            false,
        )?);
        for b in [&mut rd, &mut wr] {
            b.to_read = Some(if o.actions {
                b.c.prepare(&pread, DataFlow::Preserve, false)?
            } else {
                b.c.bind(shared.clone())?
            });
        }
    }

    // Initial values into the buffer read first.
    if rd.c.num_mappings() > 0 {
        let own = rd.c.my_ranges()[0];
        let m = rd.c.mapping_mut(0)?;
        let (f, tt, b) = (own.from(), own.to(), m.range.from());
        for y in f[1]..tt[1] {
            for x in f[0]..tt[0] {
                m.data[(x - b[0]) as usize + (y - b[1]) as usize * m.strides[1]] =
                    ((x + y) & 6) as f64;
            }
        }
    }
    set_boundary(&mut rd.c, size)?;

    let mut comm_time = Duration::ZERO;
    let mut iter = 0i64;
    while iter < maxiter {
        let c0 = Instant::now();
        match rd.to_read.as_mut() {
            Some(seq) => rd.c.run(comm.transport(), seq, None)?,
            None => comm.switch(&mut rd.c, &pread, DataFlow::Preserve)?,
        }
        comm.switch(&mut wr.c, &pwrite, DataFlow::None)?;
        comm_time += c0.elapsed();
        set_boundary(&mut wr.c, size)?;
        let with_res = iter % 10 == 0;
        let mut res = 0.0f64;
        if wr.c.num_mappings() > 0 {
            let own = wr.c.my_ranges()[0];
            let r = rd.c.mapping(0)?;
            let w = wr.c.mapping_mut(0)?;
            let (wf, wt, wb) = (own.from(), own.to(), w.range.from());
            let rf = r.range.from();
            let (rsy, wsy) = (r.strides[1], w.strides[1]);
            let (x0, x1) = (wf[0].max(1), wt[0].min(size - 1));
            let (y0, y1) = (wf[1].max(1), wt[1].min(size - 1));
            if x0 < x1 {
                let n = (x1 - x0) as usize;
                for y in y0..y1 {
                    let rc = (y - rf[1]) as usize * rsy + (x0 - rf[0]) as usize;
                    let up = &r.data[rc - rsy..rc - rsy + n];
                    let mid = &r.data[rc - 1..rc + n + 1];
                    let down = &r.data[rc + rsy..rc + rsy + n];
                    let wc = (y - wb[1]) as usize * wsy + (x0 - wb[0]) as usize;
                    let out = &mut w.data[wc..wc + n];
                    if with_res {
                        for k in 0..n {
                            let nv = 0.25 * (up[k] + mid[k] + mid[k + 2] + down[k]);
                            out[k] = nv;
                            let d = mid[k + 1] - nv;
                            res += d * d;
                        }
                    } else {
                        for k in 0..n {
                            out[k] = 0.25 * (up[k] + mid[k] + mid[k + 2] + down[k]);
                        }
                    }
                }
            }
        }
        std::mem::swap(&mut rd, &mut wr);
        if with_res {
            let c0 = Instant::now();
            // Rank-ordered left fold: the same digits on every backend.
            let res = comm.allreduce_value_with(res, Op::Sum, &CollOptions::rank_ordered())?;
            comm_time += c0.elapsed();
            if rank == 0 {
                println!("{}", common::residuum_line(iter + 1, res));
            }
            if res < 0.001 {
                break;
            }
        }
        iter += 1;
    }

    if o.print_sum {
        let master = comm.partitioning(&space, &Partitioner::Master)?;
        comm.switch(&mut rd.c, &master, DataFlow::Preserve)?;
        if rank == 0 {
            let m = rd.c.mapping(0)?;
            let mut s = 0.0f64;
            for y in 0..size as usize {
                for x in 0..size as usize {
                    s += m.data[x + y * m.strides[1]];
                }
            }
            println!("{}", common::value_sum_line(iter, s));
        }
    }
    if o.profile {
        write_profile(rank, iter, start.elapsed(), comm_time)?;
    }
    comm.finish()
}

/// `-p`: one line per rank appended to `jac2d_profiling.txt` (total and switch time).
fn write_profile(rank: usize, iters: i64, total: Duration, comm: Duration) -> ferry::Result<()> {
    common::append_line(
        "jac2d_profiling.txt",
        &format!(
            "rank {rank}: {iters} iterations, total {:.6} s, switches and reductions {:.6} s\n",
            total.as_secs_f64(),
            comm.as_secs_f64()
        ),
    )
}
