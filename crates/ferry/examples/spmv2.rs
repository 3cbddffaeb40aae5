//! spmv2: iterated, normalised sparse matrix-vector multiply with optional shrinking of the
//! process group (examples.md §12).
//!
//! Usage: `spmv2 [options] [itercount [size]]` (defaults 10 and 10000; 0 = default).
//! Options (before the positional arguments):
//! - `-r`: distribute the new input vector through a Sum reduction of zero-initialised full
//!   copies (default: every process writes its rows in the row partitioning and the vector is
//!   re-replicated by a switch to All);
//! - `-s <iter>`: shrink the group every `<iter>` iterations; `-t <task>`: the group index
//!   removed at each shrink (default 0);
//! - `-i`: on shrinking, keep the survivors' rows and spread the removed rows over them
//!   (incremental reassignment) instead of re-running the block partitioner;
//! - `-v`: debug logging (sets `FERRY_LOG=debug` unless `FERRY_LOG` is set);
//! - `-h`: usage.
//!
//! The matrix (lower triangular, row r: columns 0..r-1 with value `size - r`, ~6*size^2 bytes)
//! is replicated in every process, so rows can move freely when the group shrinks. Rows are
//! block-partitioned by their number of non-zeros. Each iteration computes the local rows,
//! sums them range by range, all-reduces the sum in rank order over the current group, prints
//! it (rank 0 of the group) and normalises the result into the next input vector.

use std::process::ExitCode;
use std::sync::Arc;

use ferry::coll::{CollOptions, Group};
use ferry::data::{
    Block, Container, DataFlow, Partitioner, Partitioning, Range, ReduceOp, Space, TaskRange,
};

mod common;
use common::{atoi, fmt_f, out};

const USAGE: &str = "Usage: spmv2 [options] [<itercount> [<size>]]\n\
\n\
Options:\n \
-r         use a Sum reduction to distribute the new input vector\n \
-s <iter>  shrink the process group every <iter> iterations\n \
-t <task>  task to remove at each shrink (default: 0)\n \
-i         incremental partitioner when shrinking (keep rows of remaining tasks)\n \
-v         verbose (debug log on stderr)\n \
-h         this help text\n";

#[derive(Debug, Default)]
struct Opts {
    use_reduction: bool,
    shrink_every: i64,
    remove_task: i64,
    incremental: bool,
    verbose: bool,
    iters: i64,
    size: i64,
}

enum Parsed {
    Run(Opts),
    /// Print this text (error line + usage, or just usage) on stdout and exit 1.
    Exit(String),
}

fn parse(args: &[String]) -> Parsed {
    let mut o = Opts::default();
    let mut i = 1;
    let fail = |why: &str| Parsed::Exit(format!("Error parsing command line: {why}\n{USAGE}"));
    while i < args.len() && args[i].starts_with('-') && args[i].len() > 1 {
        match args[i].as_bytes()[1] {
            b'r' => o.use_reduction = true,
            b'i' => o.incremental = true,
            b'v' => o.verbose = true,
            b'h' => return Parsed::Exit(USAGE.to_string()),
            b's' => {
                i += 1;
                match args.get(i) {
                    Some(a) => o.shrink_every = atoi(a),
                    None => return fail("-s: no parameter"),
                }
            }
            b't' => {
                i += 1;
                match args.get(i) {
                    Some(a) if atoi(a) >= 0 => o.remove_task = atoi(a),
                    Some(_) => return fail("-t: task must not be negative"),
                    None => return fail("-t: no parameter"),
                }
            }
            _ => return fail("unknown option"),
        }
        i += 1;
    }
    let pos = &args[i.min(args.len())..];
    if pos.len() > 2 {
        return fail("too many arguments");
    }
    o.iters = pos.first().map(|a| atoi(a)).unwrap_or(0);
    o.size = pos.get(1).map(|a| atoi(a)).unwrap_or(0);
    if o.iters <= 0 {
        o.iters = 10;
    }
    if o.size <= 0 {
        o.size = 10000;
    }
    Parsed::Run(o)
}

/// The whole matrix in CSR form: row starts, column indexes, values.
struct Csr {
    row: Vec<usize>,
    col: Vec<u32>,
    val: Vec<f64>,
}

impl Csr {
    fn new(size: usize) -> ferry::Result<Csr> {
        let too_large = || {
            ferry::Error::new(ferry::ErrorKind::ResourceExhausted, "build matrix").with_detail(
                format!(
                    "a matrix of side {size} ({} MB per process) does not fit in memory",
                    6e-6 * size as f64 * size as f64
                ),
            )
        };
        let nnz = size
            .checked_mul(size.saturating_sub(1))
            .map(|n| n / 2)
            .ok_or_else(too_large)?;
        let mut row: Vec<usize> = Vec::new();
        let mut col: Vec<u32> = Vec::new();
        let mut val: Vec<f64> = Vec::new();
        row.try_reserve_exact(size + 1).map_err(|_| too_large())?;
        col.try_reserve_exact(nnz).map_err(|_| too_large())?;
        val.try_reserve_exact(nnz).map_err(|_| too_large())?;
        row.push(0);
        for r in 0..size {
            let v = (size - r) as f64;
            col.extend(0..r as u32);
            val.resize(val.len() + r, v);
            row.push(col.len());
        }
        Ok(Csr { row, col, val })
    }

    #[inline]
    fn row_times(&self, r: usize, v: &[f64]) -> f64 {
        let (a, b) = (self.row[r], self.row[r + 1]);
        let mut sum = 0.0;
        for (val, &c) in self.val[a..b].iter().zip(&self.col[a..b]) {
            sum += val * v[c as usize];
        }
        sum
    }
}

/// Block partitioning of the rows over `group`, weighted by non-zeros per row.
fn row_partitioning(space: &Space, group: &Group) -> ferry::Result<Partitioning> {
    Partitioning::new(
        space,
        group,
        &Partitioner::Block(Block {
            index_weight: Some(Arc::new(|r| r as f64)),
            ..Block::default()
        }),
    )
}

/// Incremental reassignment after removing group index `removed` (examples.md §0.1,
/// "Reassign"): survivors keep their rows; the removed task's rows, in increasing index
/// order, are cut into pieces of about `removed weight / survivors` and handed to the
/// survivors in group order (the remainder goes to the last one).
fn reassign(
    old: &Partitioning,
    new_group: &Group,
    removed: usize,
    space: &Space,
) -> ferry::Result<Partitioning> {
    let old_group = old.group();
    let mut ranges: Vec<TaskRange> = Vec::new();
    let mut orphaned: Vec<(i64, i64)> = Vec::new();
    for tr in old.ranges() {
        if tr.task == removed {
            orphaned.push((tr.range.from()[0], tr.range.to()[0]));
            continue;
        }
        let world = old_group.member(tr.task);
        let task = new_group.index_of(world).ok_or_else(|| {
            ferry::Error::invalid("reassign", format!("rank {world} missing in the new group"))
        })?;
        ranges.push(TaskRange {
            task,
            range: tr.range,
            group: 0,
        });
    }
    orphaned.sort_unstable();
    let n = new_group.size();
    let total: f64 = orphaned
        .iter()
        .flat_map(|&(a, b)| a..b)
        .map(|r| r as f64)
        .sum();
    let share = total / n as f64;
    let mut task = 0usize;
    let mut acc = 0.0;
    for &(a, b) in &orphaned {
        let mut from = a;
        for r in a..b {
            acc += r as f64;
            if acc >= share && task + 1 < n {
                ranges.push(TaskRange {
                    task,
                    range: Range::new1(from, r + 1),
                    group: 0,
                });
                from = r + 1;
                acc -= share;
                task += 1;
            }
        }
        if from < b {
            ranges.push(TaskRange {
                task,
                range: Range::new1(from, b),
                group: 0,
            });
        }
    }
    // Each task's ranges in increasing index order (local sums go range by range).
    ranges.sort_by_key(|tr| (tr.task, tr.range.from()[0]));
    Partitioning::from_ranges(space, new_group, "reassign", ranges)
}

fn run(o: Opts) -> ferry::Result<()> {
    let mut world = ferry::init()?;
    let rank = world.rank();
    let mut inst = world.data_instance()?;
    let mut group = inst.world().clone();
    let t = world.transport();
    let size = o.size as usize;
    let iters = o.iters;
    let sum_op = ReduceOp::Sum;
    let fold = CollOptions::rank_ordered();

    if rank == 0 {
        out(&format!(
            "Running {} iterations, SpM side {} (~{:.1} MB), {} tasks\n",
            iters,
            size,
            1e-6 * size as f64 * size as f64 * 6.0,
            group.size()
        ))?;
    }
    let csr = Csr::new(size)?;
    let space = Space::new1(size as u64)?;
    let mut rows = row_partitioning(&space, &group)?;
    let mut all = Partitioning::new(&space, &group, &Partitioner::All)?;
    let master = Partitioning::new(&space, &group, &Partitioner::Master)?;

    // Input vector: 1.0 at the master, replicated to everybody.
    let mut inp: Container<f64> = Container::new(&mut inst, "input", &space);
    let mut res: Container<f64> = Container::new(&mut inst, "result", &space);
    inp.switch_to(t, &master, DataFlow::None, None)?;
    if rank == 0 {
        inp.fill(1.0);
    }
    inp.switch_to(t, &all, DataFlow::Preserve, None)?;
    res.switch_to(t, &rows, DataFlow::None, None)?;

    let mut next_shrink = if o.shrink_every > 0 {
        o.shrink_every
    } else {
        i64::MAX
    };
    let mut member = true;
    for iter in 0..iters {
        if iter == next_shrink {
            next_shrink = next_shrink.saturating_add(o.shrink_every);
            let gsize = group.size() as i64;
            if iter + 1 < iters && gsize > 1 && gsize >= o.remove_task {
                let removed = o.remove_task.max(0) as usize;
                // Once every member of the old group got here, nobody needs anything from the
                // leaving process any more: it may exit without waiting for the others' end.
                ferry::coll::barrier(t, &group)?;
                let new_group = inst.shrink(&group, &[removed])?;
                if new_group.index_of(rank).is_none() {
                    member = false;
                    break;
                }
                let new_rows = if o.incremental {
                    reassign(&rows, &new_group, removed, &space)?
                } else {
                    row_partitioning(&space, &new_group)?
                };
                let new_all = Partitioning::new(&space, &new_group, &Partitioner::All)?;
                inp.switch_to(t, &new_all, DataFlow::Preserve, None)?;
                res.switch_to(t, &new_rows, DataFlow::None, None)?;
                group = new_group;
                rows = new_rows;
                all = new_all;
            }
        }

        // res = A * inp over my rows; local sum range by range.
        let mut local = 0.0;
        {
            let v = inp.mapping(0)?.data;
            for no in 0..res.my_ranges().len() {
                let r = res.my_ranges()[no];
                let m = res.layout().range_mapping[no];
                let view = res.mapping_mut(m)?;
                let base = view.range.from()[0];
                for i in r.from()[0]..r.to()[0] {
                    let x = csr.row_times(i as usize, v);
                    view.data[(i - base) as usize] = x;
                    local += x;
                }
            }
        }
        let mut s = [local];
        ferry::coll::allreduce_with(t, &group, &mut s, &sum_op, &fold)?;
        let sum = s[0];
        if group.index_of(rank) == Some(0) {
            out(&format!("Sum at iter {iter:2}: {}\n", fmt_f(sum, 6)))?;
        }

        // New input vector = result / sum, replicated again.
        if o.use_reduction {
            inp.switch_to(t, &all, DataFlow::Init, Some(&sum_op))?;
        } else {
            inp.switch_to(t, &rows, DataFlow::None, None)?;
        }
        for (no, r) in res.my_ranges().iter().enumerate() {
            let src = res.range_mapping(no)?.1;
            let (from, to) = (r.from()[0], r.to()[0]);
            let s0 = (from - src.range.from()[0]) as usize;
            let (m, d0) = inp.local_index(&[from, 0, 0])?;
            let dst = inp.mapping_mut(m)?;
            let n = (to - from) as usize;
            if d0 + n > dst.data.len() {
                return Err(ferry::Error::invalid(
                    "spmv2",
                    format!("rows {from}..{to} are not mapped contiguously in the input vector"),
                ));
            }
            for (d, s) in dst.data[d0..d0 + n].iter_mut().zip(&src.data[s0..s0 + n]) {
                *d = s / sum;
            }
        }
        if o.use_reduction {
            inp.switch_to(t, &all, DataFlow::Preserve, Some(&sum_op))?;
        } else {
            inp.switch_to(t, &all, DataFlow::Preserve, None)?;
        }
    }

    if member {
        // Final check at rank 0 of the final group: whole result and input vectors.
        let master = if group.size() == inst.world().size() {
            master
        } else {
            Partitioning::new(&space, &group, &Partitioner::Master)?
        };
        res.switch_to(t, &master, DataFlow::Preserve, None)?;
        if group.index_of(rank) == Some(0) {
            let rsum: f64 = res.local_data().iter().sum();
            let isum: f64 = inp.mapping(0)?.data.iter().sum();
            out(&format!(
                "Result sum: {} (should be same as last iter sum)\nInput sum: {} (should be 1.0)\n",
                fmt_f(rsum, 6),
                fmt_f(isum, 6)
            ))?;
        }
        // Nobody of the final group may still be pulling this rank's last large messages
        // when it shuts down (processes removed earlier left after the shrink's barrier).
        ferry::coll::barrier(t, &group)?;
    }
    world.finish()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match parse(&args) {
        Parsed::Exit(text) => {
            // Every rank parses the same arguments; one copy of the text is enough.
            if std::env::var("FERRY_RANK").map_or(true, |r| r == "0") {
                print!("{text}");
            }
            ExitCode::FAILURE
        }
        Parsed::Run(o) => {
            if o.verbose && std::env::var_os("FERRY_LOG").is_none() {
                // Before any thread exists: nothing else reads the environment concurrently.
                std::env::set_var("FERRY_LOG", "debug");
            }
            match run(o) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("spmv2: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
