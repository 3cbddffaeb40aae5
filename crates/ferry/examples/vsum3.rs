//! vsum3: vector sum over a world that may change at resize points (examples.md §3).
//!
//! Usage: `vsum3 [maxiter [size]]`; maxiter default 10, size default 10000 (0 = default).
//!
//! The master fills `a[i] = i` in the Master partitioning. Every phase switches the array to
//! equal blocks of the current world (preserving data), every process prints its local sum,
//! the partial sums are reduced (Sum) to the master through a one-element container, and the
//! master prints the total. Between phases the program sleeps one second and offers a resize
//! point.
//!
//! Resize points go through [`ferry::resize::Resizer::allow_world_resize`]: spares of
//! `ferry run --spares` join, processes named by `ferry ctl NAME remove` leave after handing
//! their block on; on a changed world the partitionings are re-created over the new group and
//! the next switch migrates the array (examples.md §0.3, §3).

use std::process::ExitCode;
use std::time::Duration;

use ferry::data::{Container, DataFlow, Group, Partitioner, Partitioning, ReduceOp, Space};

mod common;
use common::{atoi, fmt_f, out};

/// The partitionings of one world: equal blocks for the array, All and Master for the
/// one-element sum container.
struct Parts {
    block: Partitioning,
    all: Partitioning,
    master: Partitioning,
}

impl Parts {
    fn new(space: &Space, sum_space: &Space, group: &Group) -> ferry::Result<Parts> {
        Ok(Parts {
            block: Partitioning::new(space, group, &Partitioner::block())?,
            all: Partitioning::new(sum_space, group, &Partitioner::All)?,
            master: Partitioning::new(sum_space, group, &Partitioner::Master)?,
        })
    }
}

fn run(args: &[String]) -> ferry::Result<()> {
    let mut maxiter = args.get(1).map(|a| atoi(a)).unwrap_or(0);
    if maxiter == 0 {
        maxiter = 10;
    }
    let mut size = args.get(2).map(|a| atoi(a)).unwrap_or(0);
    if size == 0 {
        size = 10000;
    }
    if size < 0 {
        return Err(ferry::Error::invalid(
            "vsum3",
            format!("vector size {size} must be positive"),
        ));
    }
    let mut world = ferry::init()?;
    let rank = world.rank();
    let mut inst = world.data_instance()?;
    let mut resizer = world.resizer();
    let t = world.transport();
    // Spares of an elastic run wait here until a resize point admits them (they then start at
    // that point's phase) or the job ends.
    let (mut current, mut phase) = resizer.join_world(t)?;
    if current.my_index.is_none() {
        // A spare the job never needed.
        return world.finish();
    }

    let space = Space::new1(size as u64)?;
    let sum_space = Space::new1(1)?;
    let sum_op = ReduceOp::Sum;
    let mut a: Container<f64> = Container::new(&mut inst, "array", &space);
    let mut s: Container<f64> = Container::new(&mut inst, "sum", &sum_space);
    let mut parts = if current.changed {
        // A joiner: its array is an empty part of the previous world's block partitioning,
        // so the first switch below fetches its new block from the old holders.
        let old = Parts::new(&space, &sum_space, &current.previous)?;
        a.switch_to(t, &old.block, DataFlow::None, None)?;
        Parts::new(&space, &sum_space, &current.group)?
    } else {
        // Processes of the initial world: the master owns and fills everything.
        let master = Partitioning::new(&space, &current.group, &Partitioner::Master)?;
        a.switch_to(t, &master, DataFlow::None, None)?;
        if rank == 0 {
            for (i, v) in a.local_data_mut().iter_mut().enumerate() {
                *v = i as f64;
            }
        }
        Parts::new(&space, &sum_space, &current.group)?
    };

    loop {
        a.switch_to(t, &parts.block, DataFlow::Preserve, None)?;
        let Some(me) = current.my_index else {
            break;
        };
        let count = a.local_count();
        let (first, last, sum) = match a.my_ranges().first() {
            Some(r) => {
                let local: f64 = a.local_data().iter().sum();
                (r.from()[0], r.to()[0] - 1, local)
            }
            None => (0, -1, 0.0),
        };
        out(&format!(
            "Phase {phase}, Epoch {}, Proc {me}/{}: sum of {count} values at {first} - {last} : {}\n",
            current.epoch,
            current.group.size(),
            fmt_f(sum, 0)
        ))?;

        s.switch_to(t, &parts.all, DataFlow::None, None)?;
        s.fill(sum);
        s.switch_to(t, &parts.master, DataFlow::Preserve, Some(&sum_op))?;
        if me == 0 {
            out(&format!(
                "Phase {phase}: total sum: {}\n",
                fmt_f(s.local_data()[0], 0)
            ))?;
        }

        if phase >= maxiter {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
        phase += 1;
        current = resizer.allow_world_resize(t, &current.group, current.epoch, phase)?;
        if current.changed {
            parts = Parts::new(&space, &sum_space, &current.group)?;
        }
    }
    // Nobody may still be pulling this rank's last large messages when it shuts down; removed
    // processes (and spares never admitted) are not members any more and leave at once.
    if current.my_index.is_some() {
        inst.finalize_in(t, &current.group)?;
    }
    world.finish()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vsum3: {e}");
            ExitCode::FAILURE
        }
    }
}
