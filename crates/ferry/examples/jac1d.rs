//! jac1d: 1d Jacobi with halo exchange and optional repartitioning (examples.md §5; D2, D4, D5).
//!
//! Usage: `jac1d [ksize [maxiter [repart]]]`: ksize thousands of cells (default 10000),
//! maxiter (default 50), repart > 0 repartitions with changing task weights every `repart`
//! iterations, repart < 0 offers a world-resize point every `-repart` iterations: spares of
//! `ferry run --spares` join there (starting at that iteration), processes named by
//! `ferry ctl NAME remove` hand their cells on and leave, and the partitionings are re-created
//! over the new world (D7 migration).
//!
//! Writes go to a block partitioning, reads to its corner halo (depth 1); two containers
//! alternate roles. Residuum and final sum are Sum-reduced through a 1-element container
//! switched from All to All (a rank-ordered left fold, so every backend prints the same
//! digits). The ranks form a 1-D Cartesian grid, so every collective runs along the chain of
//! neighbours: each rank talks to ranks `r - 1` and `r + 1` only (X7).

mod common;

use std::process::ExitCode;
use std::sync::Arc;

use ferry::coll::Group;
use ferry::data::Block;
use ferry::prelude::*;

fn main() -> ExitCode {
    common::main_with("jac1d", run)
}

fn partitionings(
    space: &Space,
    g: &Group,
    weights: Option<Vec<f64>>,
) -> ferry::Result<(Partitioning, Partitioning)> {
    let block = Block {
        task_weight: weights
            .map(|w| Arc::new(move |t: usize| w[t]) as ferry::data::partitioner::TaskWeight),
        ..Block::default()
    };
    let write = Partitioning::new(space, g, &Partitioner::Block(block))?;
    let read = Partitioning::derived(space, &Partitioner::CornerHalo { depth: 1 }, &write)?;
    Ok((write, read))
}

/// Sum over the members in rank order (a left fold: the same digits on every backend).
fn allreduce(comm: &mut Comm, v: f64) -> ferry::Result<f64> {
    comm.allreduce_value_with(v, Op::Sum, &CollOptions::rank_ordered())
}

fn run() -> ferry::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map_or(0, |a| common::atoi(a));
    let mut ksize = arg(1);
    if ksize <= 0 {
        ksize = 10_000;
    }
    let mut maxiter = arg(2);
    if maxiter <= 0 {
        maxiter = 50;
    }
    let repart = arg(3);
    let size = ksize
        .checked_mul(1000)
        .filter(|s| *s <= i64::from(i32::MAX))
        .ok_or_else(|| common::usage_error(format!("{ksize} k cells is too large")))?;

    let mut comm = Comm::init()?;
    let rank = comm.world_rank();
    let mut resizer = comm.world().resizer();
    // Spares of an elastic run wait here for a resize point (or the end of the job).
    let (joined, phase) = resizer.join_world(comm.transport())?;
    if joined.my_index.is_none() {
        return comm.into_world().finish();
    }
    let joiner = joined.changed;
    let mut epoch = joined.epoch;
    comm.set_group(joined.group)?;
    // A 1-D grid: the halo exchange talks to rank +-1 only, and declaring it keeps the
    // collectives (residuum, final sum, the finishing barrier) on those links too (X7).
    comm.set_cartesian(&[comm.size()], &[false])?;
    let nprocs = comm.size();
    if rank == 0 {
        println!(
            "{ksize} k cells (mem {:.1} MB), running {maxiter} iterations with {nprocs} tasks",
            0.016 * ksize as f64
        );
        if repart > 0 {
            println!("  with repartitioning every {repart} iterations");
        }
    }
    let space = Space::new1(size as u64)?;
    let (mut pwrite, mut pread) = partitionings(&space, comm.group(), None)?;
    let mut rd = comm.container::<f64>("data1", &space);
    let mut wr = comm.container::<f64>("data2", &space);

    if joiner {
        // The members swapped the two buffers once per iteration done: hold the same
        // container as the last written one (data ids must match for the migration).
        if phase % 2 == 1 {
            std::mem::swap(&mut rd, &mut wr);
        }
        // An empty part of the previous world's write partitioning: the switch fetches this
        // process's cells from their old holders (the members do the same switch).
        let (old_write, _) = partitionings(&space, &joined.previous, None)?;
        comm.switch(&mut rd, &old_write, DataFlow::None)?;
        comm.switch(&mut rd, &pwrite, DataFlow::Preserve)?;
    } else {
        // Initial values on the write partitioning; `rd` holds the last written values.
        comm.switch(&mut rd, &pwrite, DataFlow::None)?;
    }
    if !joiner && rd.num_mappings() > 0 {
        let own = rd.my_ranges()[0];
        let v = rd.mapping_mut(0)?;
        let base = v.range.from()[0];
        for g in own.from()[0]..own.to()[0] {
            v.data[(g - base) as usize] = if g == 0 {
                -5.0
            } else if g == size - 1 {
                10.0
            } else {
                (g & 6) as f64
            };
        }
    }

    // Joiners start at the iteration of the resize point that admitted them.
    let mut iter = phase;
    let mut removed = false;
    while iter < maxiter {
        comm.switch(&mut rd, &pread, DataFlow::Preserve)?;
        comm.switch(&mut wr, &pwrite, DataFlow::None)?;
        let with_res = iter % 10 == 0;
        let mut res = 0.0f64;
        if wr.num_mappings() > 0 {
            let own = wr.my_ranges()[0];
            let r = rd.mapping(0)?;
            let w = wr.mapping_mut(0)?;
            let (wf, wt) = (own.from()[0], own.to()[0]);
            let wb = w.range.from()[0];
            let rb = r.range.from()[0];
            let (rdat, wdat) = (r.data, w.data);
            // Fixed boundary cells, then the interior as one tight loop over slices.
            if wf == 0 && wt > 0 {
                wdat[(-wb) as usize] = -5.0;
            }
            if wf < size && size - 1 < wt {
                wdat[(size - 1 - wb) as usize] = 10.0;
            }
            let (lo, hi) = (wf.max(1), wt.min(size - 1));
            if lo < hi {
                let n = (hi - lo) as usize;
                let r0 = (lo - rb) as usize;
                let w0 = (lo - wb) as usize;
                let rr = &rdat[r0 - 1..r0 + n + 1];
                let ww = &mut wdat[w0..w0 + n];
                if with_res {
                    for k in 0..n {
                        let nv = 0.5 * (rr[k] + rr[k + 2]);
                        ww[k] = nv;
                        let d = rr[k + 1] - nv;
                        res += d * d;
                    }
                } else {
                    for (k, out) in ww.iter_mut().enumerate() {
                        *out = 0.5 * (rr[k] + rr[k + 2]);
                    }
                }
            }
        }
        std::mem::swap(&mut rd, &mut wr);
        if with_res {
            let res = allreduce(&mut comm, res)?;
            if rank == 0 {
                println!("Residuum after {:2} iters: {res:.6}", iter + 1);
            }
            if res < 0.001 {
                break;
            }
        }
        if repart > 0 && iter > 0 && iter % repart == 0 {
            let v = iter / repart;
            let weights: Vec<f64> = (0..nprocs)
                .map(|r| 1.0 + (r as i64 * (v & 1)) as f64)
                .collect();
            let (w, r) = partitionings(&space, comm.group(), Some(weights))?;
            comm.switch(&mut rd, &w, DataFlow::Preserve)?;
            pwrite = w;
            pread = r;
        }
        if repart < 0 && iter > 0 && iter % (-repart) == 0 {
            let (t, wg) = comm.transport_and_group();
            let r = resizer.allow_world_resize(t, wg, epoch, iter + 1)?;
            epoch = r.epoch;
            if r.changed {
                // Preserve the just-written values over the new world; a removed process
                // sends its cells away here and stops.
                let (w, rp) = partitionings(&space, &r.group, None)?;
                comm.switch(&mut rd, &w, DataFlow::Preserve)?;
                pwrite = w;
                pread = rp;
                if r.my_index.is_none() {
                    removed = true;
                    break;
                }
                comm.set_group(r.group)?;
                comm.set_cartesian(&[comm.size()], &[false])?;
            }
        }
        iter += 1;
    }
    if removed {
        // Not a member any more: the transport's finish delivers what this process owes.
        return comm.into_world().finish();
    }

    let mut local = 0.0f64;
    if rd.num_mappings() > 0 {
        let own = rd.my_ranges()[0];
        let (_, v) = rd.range_mapping(0)?;
        let off = (own.from()[0] - v.range.from()[0]) as usize;
        for x in &v.data[off..off + own.size() as usize] {
            local += *x;
        }
    }
    let total = allreduce(&mut comm, local)?;
    if rank == 0 {
        println!("Global value sum after {iter} iterations: {total:.6}");
    }
    comm.finish()
}
