//! vsum2: vector sum with 2-cyclic block partitionings (examples.md §2; D2, D4).
//!
//! Usage: `vsum2 [size]` (default 1000000). Like vsum, but every block partitioning uses two
//! cycles (each task gets two ranges, summed range by range), there is no shrinked group,
//! and the task-weighted step only runs with more than one process.

mod common;

use std::process::ExitCode;
use std::sync::Arc;

use ferry::data::{Block, Container, DataFlow, Partitioner, Partitioning, ReduceOp, Space};

fn main() -> ExitCode {
    common::main_with("vsum2", run)
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

fn cyclic(index_weight: bool, task_weight: bool) -> Partitioner {
    Partitioner::Block(Block {
        cycles: 2,
        index_weight: if index_weight {
            Some(Arc::new(|i| i as f64))
        } else {
            None
        },
        task_weight: if task_weight {
            Some(Arc::new(|t| if t == 0 { 0.0 } else { 1.0 }))
        } else {
            None
        },
        dim: None,
    })
}

fn run() -> ferry::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mut size = args.get(1).map_or(0, |a| common::atoi(a));
    if size <= 0 {
        size = 1_000_000;
    }
    let mut world = ferry::init()?;
    let (rank, nprocs) = (world.rank(), world.size());
    let mut inst = world.data_instance()?;
    let t = world.transport();
    let wg = inst.world().clone();
    let space = Space::new1(size as u64)?;

    let mut a = Container::<f64>::new(&mut inst, "array", &space);
    let master = Partitioning::new(&space, &wg, &Partitioner::Master)?;
    a.switch_to(t, &master, DataFlow::None, None)?;
    if rank == 0 {
        for (i, v) in a.local_data_mut().iter_mut().enumerate() {
            *v = i as f64;
        }
    }
    let s0 = local_sum(&a)?;

    let block = Partitioning::new(&space, &wg, &cyclic(false, false))?;
    a.switch_to(t, &block, DataFlow::Preserve, None)?;
    let s1 = local_sum(&a)?;

    let weighted = Partitioning::new(&space, &wg, &cyclic(true, false))?;
    a.switch_to(t, &weighted, DataFlow::Preserve, None)?;
    let s2 = local_sum(&a)?;

    let s3 = if nprocs > 1 {
        let tw = Partitioning::new(&space, &wg, &cyclic(false, true))?;
        a.switch_to(t, &tw, DataFlow::Preserve, None)?;
        local_sum(&a)?
    } else {
        s0
    };
    println!("Id {rank}: partitial sums {s0:.0}, {s1:.0}, {s2:.0}, {s3:.0}");

    let sspace = Space::new1(4)?;
    let all = Partitioning::new(&sspace, &wg, &Partitioner::All)?;
    let smaster = Partitioning::new(&sspace, &wg, &Partitioner::Master)?;
    let mut sums = Container::<f64>::new(&mut inst, "sums", &sspace);
    sums.switch_to(t, &all, DataFlow::None, None)?;
    sums.local_data_mut().copy_from_slice(&[s0, s1, s2, s3]);
    sums.switch_to(t, &smaster, DataFlow::Preserve, Some(&ReduceOp::Sum))?;
    if rank == 0 {
        let v = sums.local_data();
        println!(
            "Total sums: {:.0}, {:.0}, {:.0}, {:.0}",
            v[0], v[1], v[2], v[3]
        );
    }
    inst.finalize(world.transport())?;
    world.finish()
}
