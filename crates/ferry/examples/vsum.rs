//! vsum: vector sum under changing partitionings (examples.md §1; D2, D4, D7).
//!
//! Usage: `vsum [size]` (default 1000000; atoi semantics, 0 or text -> default).
//! The master fills `a[i] = i`; the array is switched (data preserved) through equal blocks,
//! index-weighted blocks and task-weighted blocks (task 0 weight 0), the last one migrated to
//! the group without rank 0. Every rank prints its four partial sums; an All-partitioned
//! 4-element container switched to Master with a Sum reduction gives the totals.

mod common;

use std::process::ExitCode;
use std::sync::Arc;

use ferry::data::Block;
use ferry::prelude::*;

fn main() -> ExitCode {
    common::main_with("vsum", run)
}

/// Sum of this rank's elements: range by range (range number order), increasing index.
fn local_sum(c: &Container<f64>) -> ferry::Result<f64> {
    let mut s = 0.0;
    for no in 0..c.my_ranges().len() {
        let (r, view) = c.range_mapping(no)?;
        let off = (r.from()[0] - view.range.from()[0]) as usize;
        for v in &view.data[off..off + r.size() as usize] {
            s += *v;
        }
    }
    Ok(s)
}

fn run() -> ferry::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mut size = args.get(1).map_or(0, |a| common::atoi(a));
    if size <= 0 {
        size = 1_000_000;
    }
    let mut comm = Comm::init()?;
    let (rank, nprocs) = (comm.rank(), comm.size());
    let space = Space::new1(size as u64)?;

    let mut a = comm.container::<f64>("array", &space);
    let master = comm.partitioning(&space, &Partitioner::Master)?;
    comm.switch(&mut a, &master, DataFlow::None)?;
    if rank == 0 {
        for (i, v) in a.local_data_mut().iter_mut().enumerate() {
            *v = i as f64;
        }
    }
    let s0 = local_sum(&a)?;

    let block = comm.partitioning(&space, &Partitioner::block())?;
    comm.switch(&mut a, &block, DataFlow::Preserve)?;
    let s1 = local_sum(&a)?;

    let weighted = comm.partitioning(
        &space,
        &Partitioner::Block(Block {
            index_weight: Some(Arc::new(|i| i as f64)),
            ..Block::default()
        }),
    )?;
    comm.switch(&mut a, &weighted, DataFlow::Preserve)?;
    let s2 = local_sum(&a)?;

    let s3 = if nprocs > 1 {
        let tw = comm.partitioning(
            &space,
            &Partitioner::Block(Block {
                task_weight: Some(Arc::new(|t| if t == 0 { 0.0 } else { 1.0 })),
                ..Block::default()
            }),
        )?;
        comm.switch(&mut a, &tw, DataFlow::Preserve)?;
        let _ = local_sum(&a)?;
        let wg = comm.group().clone();
        let shrinked = comm.data().shrink(&wg, &[0])?;
        comm.switch(&mut a, &tw.migrate(&shrinked)?, DataFlow::Preserve)?;
        let id = shrinked.index_of(rank).map_or(-1, |i| i as i64);
        println!("My world ID {rank}, in shrinked group: {id}");
        if id >= 0 {
            local_sum(&a)?
        } else {
            0.0
        }
    } else {
        s0
    };
    println!("Id {rank}: partitial sums {s0:.0}, {s1:.0}, {s2:.0}, {s3:.0}");

    let sspace = Space::new1(4)?;
    let all = comm.partitioning(&sspace, &Partitioner::All)?;
    let mut sums = comm.container::<f64>("sums", &sspace);
    comm.switch(&mut sums, &all, DataFlow::None)?;
    sums.local_data_mut().copy_from_slice(&[s0, s1, s2, s3]);
    let master = comm.partitioning(&sspace, &Partitioner::Master)?;
    comm.switch_reduce(&mut sums, &master, DataFlow::Preserve, Op::Sum)?;
    if rank == 0 {
        let v = sums.local_data();
        println!(
            "Total sums: {:.0}, {:.0}, {:.0}, {:.0}",
            v[0], v[1], v[2], v[3]
        );
    }
    comm.finish()
}
