//! LAIK's block partitioner on spaces of more than one dimension (`laik_new_block_partitioner`
//! with any `pdim`): the space is cut along dimension `pdim` only, every range spanning the
//! whole space in the other dimensions. 1d spaces use the data layer's own block partitioner
//! (`ferry_data::Block`); the cut points here follow the same rule, so a 2d space cut along
//! dimension 0 gets the same cuts as a 1d space of its first extent.

use std::cmp::Ordering;

use ferry_core::{Error, Result};
use ferry_data::{Partitioner, PartitionerCtx};

/// Index weight over the partitioned dimension: called with the full index LAIK passes (the
/// `pdim` coordinate set, the others 0).
pub(crate) type DimWeight = Box<dyn Fn([i64; 3]) -> f64 + Send + Sync>;
/// Task weight.
pub(crate) type TaskWeight = Box<dyn Fn(usize) -> f64 + Send + Sync>;

/// A block partitioner cutting dimension `pdim` into `cycles` rounds of one range per task.
pub(crate) fn along(
    pdim: usize,
    cycles: usize,
    index_weight: Option<DimWeight>,
    task_weight: Option<TaskWeight>,
) -> Partitioner {
    Partitioner::custom("block", move |ctx: &mut PartitionerCtx<'_>| {
        run(
            ctx,
            pdim,
            cycles,
            index_weight.as_deref(),
            task_weight.as_deref(),
        )
    })
}

fn run(
    ctx: &mut PartitionerCtx<'_>,
    pdim: usize,
    cycles: usize,
    index_weight: Option<&(dyn Fn([i64; 3]) -> f64 + Send + Sync)>,
    task_weight: Option<&(dyn Fn(usize) -> f64 + Send + Sync)>,
) -> Result<()> {
    let whole = ctx.space().range();
    if pdim >= whole.dims() {
        return Err(Error::invalid(
            "block partitioner",
            format!("partitioning dimension {pdim} of a {}d space", whole.dims()),
        ));
    }
    let cycles = cycles.max(1);
    let (start, end) = (whole.from()[pdim], whole.to()[pdim]);
    let p = ctx.ntasks();
    let weight = |i: i64| {
        index_weight.map_or(1.0, |w| {
            let mut idx = [0i64; 3];
            idx[pdim] = i;
            w(idx)
        })
    };
    let total: f64 = match index_weight {
        None => (end - start) as f64,
        Some(_) => (start..end).map(weight).sum(),
    };
    let per_part = total / p as f64 / cycles as f64;
    let factors: Vec<f64> = match task_weight {
        None => vec![1.0; p],
        Some(tw) => {
            let sum: f64 = (0..p).map(tw).sum();
            if sum.partial_cmp(&0.0) != Some(Ordering::Greater) {
                return Err(Error::invalid(
                    "block partitioner",
                    "task weights sum to zero",
                ));
            }
            (0..p).map(|t| tw(t) * p as f64 / sum).collect()
        }
    };
    let cut = |from: i64, to: i64| whole.with_dim(pdim, from, to);
    let last_cycle = cycles - 1;
    let (mut task, mut cycle) = (0usize, 0usize);
    // LAIK's rule: the accumulator starts at -0.5 and the index that crosses a task's share
    // opens the next range.
    let mut acc = -0.5f64;
    let mut from = start;
    'walk: for i in start..end {
        acc += weight(i);
        loop {
            let threshold = per_part * factors[task];
            // NaN weights compare as "below": they never cut.
            if matches!(acc.partial_cmp(&threshold), None | Some(Ordering::Less)) {
                break;
            }
            acc -= threshold;
            if task == p - 1 && cycle == last_cycle {
                break 'walk;
            }
            if from < i {
                ctx.append(task, cut(from, i), 0)?;
            }
            task += 1;
            if task == p {
                task = 0;
                cycle += 1;
            }
            from = i;
        }
    }
    if from < end {
        ctx.append(p - 1, cut(from, end), 0)?;
    }
    Ok(())
}
