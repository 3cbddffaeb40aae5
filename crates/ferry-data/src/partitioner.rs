//! Partitioners: rules that hand out the indexes of a space to the tasks of a group (D2).
//!
//! A partitioner only computes *which task owns which ranges*; [`crate::Partitioning`] stores
//! the result together with the group it refers to. The built-in rules reproduce LAIK's
//! ownership exactly (examples.md §0.1), because several examples print per-rank partial sums
//! whose digits depend on it.
//!
//! Every range carries a *mapping group*: ranges of one task with the same non-zero group are
//! stored in one allocation (their bounding box), group 0 gives a range an allocation of its
//! own. Halo partitioners use this so that a task's own box and its halo live in one array the
//! stencil can index directly.

use std::fmt;
use std::sync::Arc;

use ferry_core::{Error, Result};

use crate::space::{Range, Space, MAX_DIMS};

/// One range handed to one task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskRange {
    /// Task index within the partitioning's group.
    pub task: usize,
    /// The indexes.
    pub range: Range,
    /// Mapping group: 0 = own allocation; equal non-zero values share one allocation.
    pub group: u32,
}

/// Per-index weight (block partitioner, D2).
pub type IndexWeight = Arc<dyn Fn(i64) -> f64 + Send + Sync>;
/// Per-task weight (block partitioner, D2).
pub type TaskWeight = Arc<dyn Fn(usize) -> f64 + Send + Sync>;
/// A user-defined partitioner (D2): appends ranges through the context.
pub type CustomFn = Arc<dyn Fn(&mut PartitionerCtx<'_>) -> Result<()> + Send + Sync>;

/// Parameters of the block partitioner (examples.md §0.1).
#[derive(Clone)]
pub struct Block {
    /// Number of cycles (each task gets this many ranges, round-robin); at least 1.
    pub cycles: usize,
    /// Weight of each index (1.0 each if `None`).
    pub index_weight: Option<IndexWeight>,
    /// Relative weight of each task (equal if `None`).
    pub task_weight: Option<TaskWeight>,
    /// The dimension cut into ranges, on a space of any dimension (LAIK's `pdim`): every range
    /// spans the whole space in the other dimensions, and the index weight is called with the
    /// coordinate along this one. `None` (the default): a 1d space only.
    pub dim: Option<usize>,
}

impl Default for Block {
    fn default() -> Self {
        Block {
            cycles: 1,
            index_weight: None,
            task_weight: None,
            dim: None,
        }
    }
}

/// A partitioning rule (D2).
#[derive(Clone)]
pub enum Partitioner {
    /// Task 0 owns everything.
    Master,
    /// Every task owns everything (replicated).
    All,
    /// 1d blocks with optional index and task weights and cycles (§0.1).
    Block(Block),
    /// Recursive bisection of 1d/2d/3d boxes (§0.1).
    Bisection,
    /// Regular grid of `blocks[d]` blocks per dimension (x, y, z), one block per task (§0.1).
    Grid {
        /// Blocks in x, y and z.
        blocks: [usize; MAX_DIMS],
    },
    /// Derived: every range of the base grown by `depth` in each dimension, corners included.
    CornerHalo {
        /// Halo width.
        depth: i64,
    },
    /// Derived: every range of the base plus its face neighbourhoods of width `depth`, no
    /// corners; pieces share the base range's allocation.
    Halo {
        /// Halo width.
        depth: i64,
    },
    /// Derived: the ranges of the base, with the base's dimension `from_dim` placed into
    /// dimension `to_dim` of this space and every other dimension spanning the whole space.
    Copy {
        /// Dimension of the base space that is copied.
        from_dim: usize,
        /// Dimension of this space it becomes.
        to_dim: usize,
    },
    /// User-defined: a closure that appends ranges (may look at a base partitioning).
    Custom {
        /// Name for logs and errors.
        name: &'static str,
        /// The rule.
        run: CustomFn,
    },
}

impl fmt::Debug for Partitioner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Partitioner {
    /// Plain equal blocks.
    pub fn block() -> Partitioner {
        Partitioner::Block(Block::default())
    }

    /// A user-defined partitioner.
    pub fn custom<F>(name: &'static str, f: F) -> Partitioner
    where
        F: Fn(&mut PartitionerCtx<'_>) -> Result<()> + Send + Sync + 'static,
    {
        Partitioner::Custom {
            name,
            run: Arc::new(f),
        }
    }

    /// Short name for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Partitioner::Master => "master",
            Partitioner::All => "all",
            Partitioner::Block(_) => "block",
            Partitioner::Bisection => "bisection",
            Partitioner::Grid { .. } => "grid",
            Partitioner::CornerHalo { .. } => "corner-halo",
            Partitioner::Halo { .. } => "halo",
            Partitioner::Copy { .. } => "copy",
            Partitioner::Custom { name, .. } => name,
        }
    }

    /// Whether the rule derives its ranges from a base partitioning.
    pub fn needs_base(&self) -> bool {
        matches!(
            self,
            Partitioner::CornerHalo { .. } | Partitioner::Halo { .. } | Partitioner::Copy { .. }
        )
    }

    /// Computes the ranges for `ntasks` tasks over `space`. `base` holds the ranges of the
    /// base partitioning (indexed by the same task numbers) for derived rules.
    pub fn run(
        &self,
        space: &Space,
        ntasks: usize,
        base: Option<(&Space, &[TaskRange])>,
    ) -> Result<Vec<TaskRange>> {
        if ntasks == 0 {
            return Err(Error::invalid("partition", "group without tasks"));
        }
        let mut ctx = PartitionerCtx {
            space,
            ntasks,
            base,
            out: Vec::new(),
        };
        let whole = space.range();
        match self {
            Partitioner::Master => ctx.append(0, whole, 0)?,
            Partitioner::All => {
                for t in 0..ntasks {
                    ctx.append(t, whole, 0)?;
                }
            }
            Partitioner::Block(b) => block(&mut ctx, b)?,
            Partitioner::Bisection => bisect(&mut ctx, whole, 0, ntasks)?,
            Partitioner::Grid { blocks } => grid(&mut ctx, *blocks)?,
            Partitioner::CornerHalo { depth } => {
                let (_, base) = need_base(self, base)?;
                for (i, tr) in base.iter().enumerate() {
                    let g = tr.range.grow_clipped(*depth, &whole);
                    ctx.append(tr.task, g, i as u32 + 1)?;
                }
            }
            Partitioner::Halo { depth } => {
                let (_, base) = need_base(self, base)?;
                for (i, tr) in base.iter().enumerate() {
                    let group = i as u32 + 1;
                    ctx.append(tr.task, tr.range, group)?;
                    for d in 0..tr.range.dims() {
                        let (f, t) = (tr.range.from()[d], tr.range.to()[d]);
                        let lo = (f - depth).max(whole.from()[d]);
                        if lo < f {
                            ctx.append(tr.task, tr.range.with_dim(d, lo, f), group)?;
                        }
                        let hi = (t + depth).min(whole.to()[d]);
                        if t < hi {
                            ctx.append(tr.task, tr.range.with_dim(d, t, hi), group)?;
                        }
                    }
                }
            }
            Partitioner::Copy { from_dim, to_dim } => {
                let (bspace, base) = need_base(self, base)?;
                if *from_dim >= bspace.dims() || *to_dim >= space.dims() {
                    return Err(Error::invalid(
                        "partition",
                        format!(
                            "copy partitioner: dimension {from_dim} -> {to_dim} out of range \
                             ({}d base, {}d space)",
                            bspace.dims(),
                            space.dims()
                        ),
                    ));
                }
                for tr in base {
                    let r = whole.with_dim(
                        *to_dim,
                        tr.range.from()[*from_dim],
                        tr.range.to()[*from_dim],
                    );
                    ctx.append(tr.task, r, tr.group)?;
                }
            }
            Partitioner::Custom { run, name } => {
                run(&mut ctx).map_err(|e| e.context(format!("partitioner `{name}`")))?
            }
        }
        let mut out = ctx.out;
        // Ranges of a task in emission order, tasks ascending (stable).
        out.sort_by_key(|tr| tr.task);
        Ok(out)
    }
}

fn need_base<'a>(
    p: &Partitioner,
    base: Option<(&'a Space, &'a [TaskRange])>,
) -> Result<(&'a Space, &'a [TaskRange])> {
    base.ok_or_else(|| {
        Error::invalid(
            "partition",
            format!("the {} partitioner needs a base partitioning", p.name()),
        )
    })
}

/// What a partitioner sees and where it puts its ranges.
pub struct PartitionerCtx<'a> {
    space: &'a Space,
    ntasks: usize,
    base: Option<(&'a Space, &'a [TaskRange])>,
    out: Vec<TaskRange>,
}

impl PartitionerCtx<'_> {
    /// The space being partitioned.
    pub fn space(&self) -> &Space {
        self.space
    }

    /// Number of tasks in the group.
    pub fn ntasks(&self) -> usize {
        self.ntasks
    }

    /// The base partitioning's ranges (derived partitionings), tasks ascending.
    pub fn base(&self) -> Option<&[TaskRange]> {
        self.base.map(|(_, b)| b)
    }

    /// Hands `range` (clipped to the space; empty results are dropped) to `task`, in mapping
    /// group `group` (0 = own allocation).
    pub fn append(&mut self, task: usize, range: Range, group: u32) -> Result<()> {
        if task >= self.ntasks {
            return Err(Error::invalid(
                "partition",
                format!("task {task} out of range 0..{}", self.ntasks),
            ));
        }
        if range.dims() != self.space.dims() {
            return Err(Error::invalid(
                "partition",
                format!(
                    "{}d range {range:?} in a {}d space",
                    range.dims(),
                    self.space.dims()
                ),
            ));
        }
        if let Some(r) = range.intersect(&self.space.range()) {
            self.out.push(TaskRange {
                task,
                range: r,
                group,
            });
        }
        Ok(())
    }
}

/// The block partitioner, exactly as examples.md §0.1 describes it (accumulator starting at
/// -0.5, the crossing index opening the next range), along dimension `b.dim` of a space of any
/// dimension (LAIK's `pdim`): a 2d space cut along dimension 0 gets the cuts of a 1d space of
/// its first extent.
fn block(ctx: &mut PartitionerCtx<'_>, b: &Block) -> Result<()> {
    let whole = ctx.space.range();
    let dim = match b.dim {
        None if whole.dims() != 1 => {
            return Err(Error::invalid(
                "partition",
                "the block partitioner needs a 1d space (or a dimension to cut)",
            ))
        }
        None => 0,
        Some(d) if d >= whole.dims() => {
            return Err(Error::invalid(
                "partition",
                format!(
                    "block partitioner: dimension {d} of a {}d space",
                    whole.dims()
                ),
            ))
        }
        Some(d) => d,
    };
    if b.cycles == 0 {
        return Err(Error::invalid(
            "partition",
            "block partitioner with 0 cycles",
        ));
    }
    let (start, end) = (whole.from()[dim], whole.to()[dim]);
    let cut = |from: i64, to: i64| whole.with_dim(dim, from, to);
    let p = ctx.ntasks;
    let weight = |i: i64| b.index_weight.as_ref().map_or(1.0, |w| w(i));
    let total: f64 = match &b.index_weight {
        None => (end - start) as f64,
        Some(w) => (start..end).map(|i| w(i)).sum(),
    };
    let per_part = total / p as f64 / b.cycles as f64;
    let factors: Vec<f64> = match &b.task_weight {
        None => vec![1.0; p],
        Some(tw) => {
            let sum: f64 = (0..p).map(|t| tw(t)).sum();
            if sum.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
                return Err(Error::invalid(
                    "partition",
                    "block partitioner: task weights sum to zero",
                ));
            }
            (0..p).map(|t| tw(t) * p as f64 / sum).collect()
        }
    };
    let last_cycle = b.cycles - 1;
    let (mut task, mut cycle) = (0usize, 0usize);
    let mut acc = -0.5f64;
    let mut from = start;
    'walk: for i in start..end {
        acc += weight(i);
        loop {
            let threshold = per_part * factors[task];
            // NaN weights compare as "below": they never cut.
            if matches!(
                acc.partial_cmp(&threshold),
                None | Some(std::cmp::Ordering::Less)
            ) {
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

/// Recursive bisection (§0.1): split the longest dimension (lowest on ties) in proportion to
/// the task counts of the two halves.
fn bisect(ctx: &mut PartitionerCtx<'_>, r: Range, t0: usize, t1: usize) -> Result<()> {
    if t1 - t0 <= 1 {
        return ctx.append(t0, r, 0);
    }
    let mut dim = 0;
    for d in 1..r.dims() {
        if r.extent(d) > r.extent(dim) {
            dim = d;
        }
    }
    let ext = r.extent(dim);
    if ext <= 1 {
        return ctx.append(t0, r, 0);
    }
    let mid = (t0 + t1) / 2;
    let w = (ext as u128 * (mid - t0) as u128 / (t1 - t0) as u128) as i64;
    let split = r.from()[dim] + w;
    bisect(ctx, r.with_dim(dim, r.from()[dim], split), t0, mid)?;
    bisect(ctx, r.with_dim(dim, split, r.to()[dim]), mid, t1)
}

/// Regular grid (§0.1): blocks z outer, y, x inner; block n goes to task n; empty blocks are
/// skipped but keep their number.
fn grid(ctx: &mut PartitionerCtx<'_>, blocks: [usize; MAX_DIMS]) -> Result<()> {
    let whole = ctx.space.range();
    let mut nb = [1usize; MAX_DIMS];
    for d in 0..whole.dims() {
        if blocks[d] == 0 {
            return Err(Error::invalid(
                "partition",
                "grid with 0 blocks in a dimension",
            ));
        }
        nb[d] = blocks[d];
    }
    let step: Vec<f64> = (0..MAX_DIMS)
        .map(|d| whole.extent(d) as f64 / nb[d] as f64)
        .collect();
    let bound = |d: usize, k: usize| (whole.from()[d] as f64 + k as f64 * step[d]).floor() as i64;
    let mut n = 0usize;
    for z in 0..nb[2] {
        for y in 0..nb[1] {
            for x in 0..nb[0] {
                let k = [x, y, z];
                let mut from = whole.from();
                let mut to = whole.to();
                for d in 0..whole.dims() {
                    from[d] = bound(d, k[d]);
                    to[d] = if k[d] + 1 == nb[d] {
                        whole.to()[d]
                    } else {
                        bound(d, k[d] + 1)
                    };
                }
                let r = Range::from_corners(whole.dims(), from, to)?;
                if !r.is_empty() && n < ctx.ntasks {
                    ctx.append(n, r, 0)?;
                }
                n += 1;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ranges_of(v: &[TaskRange], task: usize) -> Vec<(i64, i64)> {
        v.iter()
            .filter(|t| t.task == task)
            .map(|t| (t.range.from()[0], t.range.to()[0]))
            .collect()
    }

    #[test]
    fn block_along_another_dimension_cuts_it_like_a_1d_space() {
        let s = Space::new2(6, 100).unwrap();
        let along = |dim| {
            Partitioner::Block(Block {
                index_weight: Some(Arc::new(|i| i as f64)),
                dim: Some(dim),
                ..Block::default()
            })
        };
        let v = along(1).run(&s, 4, None).unwrap();
        let line = Partitioner::Block(Block {
            index_weight: Some(Arc::new(|i| i as f64)),
            ..Block::default()
        })
        .run(&Space::new1(100).unwrap(), 4, None)
        .unwrap();
        assert_eq!(v.len(), line.len());
        for (r, l) in v.iter().zip(&line) {
            assert_eq!(r.task, l.task);
            assert_eq!((r.range.from()[0], r.range.to()[0]), (0, 6));
            assert_eq!(
                (r.range.from()[1], r.range.to()[1]),
                (l.range.from()[0], l.range.to()[0])
            );
        }
        assert!(along(2).run(&s, 4, None).is_err());
        assert!(Partitioner::block().run(&s, 4, None).is_err());
    }

    #[test]
    fn block_matches_laik_cut_points() {
        let s = Space::new1(100).unwrap();
        let v = Partitioner::block().run(&s, 4, None).unwrap();
        for t in 0..4 {
            assert_eq!(ranges_of(&v, t), vec![(25 * t as i64, 25 * t as i64 + 25)]);
        }
        let weighted = Partitioner::Block(Block {
            index_weight: Some(Arc::new(|i| i as f64)),
            ..Block::default()
        });
        let v = weighted.run(&s, 4, None).unwrap();
        let cuts: Vec<_> = (0..4).map(|t| ranges_of(&v, t)[0]).collect();
        assert_eq!(cuts, vec![(0, 50), (50, 70), (70, 86), (86, 100)]);
        let tw = Partitioner::Block(Block {
            task_weight: Some(Arc::new(|t| if t == 0 { 0.0 } else { 1.0 })),
            ..Block::default()
        });
        let v = tw.run(&s, 4, None).unwrap();
        assert!(ranges_of(&v, 0).is_empty());
        assert_eq!(ranges_of(&v, 1), vec![(0, 33)]);
        assert_eq!(ranges_of(&v, 2), vec![(33, 67)]);
        assert_eq!(ranges_of(&v, 3), vec![(67, 100)]);
        let cyc = Partitioner::Block(Block {
            cycles: 2,
            ..Block::default()
        });
        let v = cyc.run(&s, 4, None).unwrap();
        assert_eq!(ranges_of(&v, 0), vec![(0, 12), (50, 62)]);
    }

    #[test]
    fn bisection_and_grid() {
        let s = Space::new2(100, 100).unwrap();
        let v = Partitioner::Bisection.run(&s, 4, None).unwrap();
        let want = [
            Range::new2(0, 50, 0, 50),
            Range::new2(0, 50, 50, 100),
            Range::new2(50, 100, 0, 50),
            Range::new2(50, 100, 50, 100),
        ];
        for (t, w) in want.iter().enumerate() {
            assert_eq!(v[t].task, t);
            assert_eq!(v[t].range, *w);
        }
        let s3 = Space::new3(100, 100, 100).unwrap();
        let g = Partitioner::Grid { blocks: [1, 1, 3] }
            .run(&s3, 4, None)
            .unwrap();
        assert_eq!(g.len(), 3);
        assert_eq!(g[0].range, Range::new3(0, 100, 0, 100, 0, 33));
        assert_eq!(g[1].range, Range::new3(0, 100, 0, 100, 33, 66));
        assert_eq!(g[2].range, Range::new3(0, 100, 0, 100, 66, 100));
    }

    #[test]
    fn halos() {
        let s = Space::new2(10, 10).unwrap();
        let base = Partitioner::Bisection.run(&s, 4, None).unwrap();
        let ch = Partitioner::CornerHalo { depth: 1 }
            .run(&s, 4, Some((&s, &base)))
            .unwrap();
        assert_eq!(ch[0].range, Range::new2(0, 6, 0, 6));
        assert_eq!(ch[3].range, Range::new2(4, 10, 4, 10));
        let h = Partitioner::Halo { depth: 1 }
            .run(&s, 4, Some((&s, &base)))
            .unwrap();
        let t0: Vec<_> = h.iter().filter(|t| t.task == 0).map(|t| t.range).collect();
        assert_eq!(
            t0,
            vec![
                Range::new2(0, 5, 0, 5),
                Range::new2(5, 6, 0, 5),
                Range::new2(0, 5, 5, 6)
            ]
        );
        assert!(Partitioner::Halo { depth: 1 }.run(&s, 4, None).is_err());
    }

    fn count_cover(space: &Space, v: &[TaskRange]) -> Vec<u32> {
        let r = space.range();
        let n = r.size() as usize;
        let (ex, ey) = (r.extent(0) as i64, r.extent(1) as i64);
        let mut c = vec![0u32; n];
        for tr in v {
            let (f, t) = (tr.range.from(), tr.range.to());
            for z in f[2]..t[2] {
                for y in f[1]..t[1] {
                    for x in f[0]..t[0] {
                        c[((z * ey + y) * ex + x) as usize] += 1;
                    }
                }
            }
        }
        c
    }

    proptest! {
        #[test]
        fn block_covers_each_index_once(
            n in 1u64..400,
            p in 1usize..9,
            cycles in 1usize..4,
            weighted in any::<bool>(),
            tw_seed in proptest::collection::vec(0u8..4, 8),
        ) {
            let s = Space::new1(n).unwrap();
            let tw = tw_seed.clone();
            let b = Block {
                cycles,
                index_weight: if weighted { Some(Arc::new(|i| (i % 7) as f64 + 0.5)) } else { None },
                task_weight: if tw.iter().take(p).any(|&w| w > 0) {
                    Some(Arc::new(move |t| tw[t] as f64))
                } else { None },
                dim: None,
            };
            let v = Partitioner::Block(b).run(&s, p, None).unwrap();
            prop_assert!(count_cover(&s, &v).iter().all(|&c| c == 1));
            // ranges of each task come in increasing index order
            for t in 0..p {
                let r = ranges_of(&v, t);
                prop_assert!(r.windows(2).all(|w| w[0].1 <= w[1].0));
            }
        }

        #[test]
        fn bisection_and_grid_cover_once(
            nx in 1u64..20, ny in 1u64..20, nz in 1u64..6, p in 1usize..12,
            bx in 1usize..4, by in 1usize..4, bz in 1usize..4,
        ) {
            let s = Space::new3(nx, ny, nz).unwrap();
            let v = Partitioner::Bisection.run(&s, p, None).unwrap();
            prop_assert!(count_cover(&s, &v).iter().all(|&c| c == 1));
            let blocks = [bx, by, bz];
            let g = Partitioner::Grid { blocks }.run(&s, p, None).unwrap();
            let c = count_cover(&s, &g);
            if bx * by * bz <= p {
                prop_assert!(c.iter().all(|&c| c == 1));
            } else {
                prop_assert!(c.iter().all(|&c| c <= 1));
            }
            let all = Partitioner::All.run(&s, p, None).unwrap();
            prop_assert!(count_cover(&s, &all).iter().all(|&c| c as usize == p));
            let m = Partitioner::Master.run(&s, p, None).unwrap();
            prop_assert!(m.iter().all(|t| t.task == 0));
            prop_assert!(count_cover(&s, &m).iter().all(|&c| c == 1));
        }

        /// The copy partitioner hands every task of a 1d base its range as a full-width slab
        /// of a 2d space: each index of the 2d space is covered as often as its row is in
        /// the base.
        #[test]
        fn copy_spreads_base_over_other_dimensions(n in 1u64..60, m in 1u64..9, p in 1usize..6) {
            let s1 = Space::new1(n).unwrap();
            let base = Partitioner::block().run(&s1, p, None).unwrap();
            let s2 = Space::new2(m, n).unwrap();
            let c = Partitioner::Copy { from_dim: 0, to_dim: 1 }
                .run(&s2, p, Some((&s1, &base)))
                .unwrap();
            prop_assert_eq!(c.len(), base.len());
            for (b, r) in base.iter().zip(&c) {
                prop_assert_eq!(b.task, r.task);
                prop_assert_eq!(r.range, Range::new2(0, m as i64, b.range.from()[0], b.range.to()[0]));
            }
            prop_assert!(count_cover(&s2, &c).iter().all(|&k| k == 1));
            let bad = Partitioner::Copy { from_dim: 1, to_dim: 0 };
            prop_assert!(bad.run(&s2, p, Some((&s1, &base))).is_err());
        }

        #[test]
        fn halo_covers_own_plus_neighbourhood(
            nx in 2u64..16, ny in 2u64..16, p in 1usize..7,
        ) {
            let s = Space::new2(nx, ny).unwrap();
            let base = Partitioner::Bisection.run(&s, p, None).unwrap();
            let ch = Partitioner::CornerHalo { depth: 1 }.run(&s, p, Some((&s, &base))).unwrap();
            let h = Partitioner::Halo { depth: 1 }.run(&s, p, Some((&s, &base))).unwrap();
            for b in &base {
                let grown = b.range.grow_clipped(1, &s.range());
                let c: Vec<_> = ch.iter().filter(|t| t.task == b.task).collect();
                prop_assert_eq!(c.len(), 1);
                prop_assert_eq!(c[0].range, grown);
                // no-corner halo: own box plus faces, disjoint, inside the grown box,
                // missing exactly the corners
                let pieces: Vec<_> = h.iter().filter(|t| t.task == b.task).collect();
                let cover = count_cover(&s, &pieces.iter().map(|t| **t).collect::<Vec<_>>());
                prop_assert!(cover.iter().all(|&c| c <= 1));
                let total: u64 = pieces.iter().map(|t| t.range.size()).sum();
                let (w, hgt) = (b.range.extent(0), b.range.extent(1));
                let (gw, gh) = (grown.extent(0), grown.extent(1));
                prop_assert_eq!(total, w * gh + gw * hgt - w * hgt);
            }
        }
    }
}
