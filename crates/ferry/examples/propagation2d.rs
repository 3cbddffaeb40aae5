//! propagation2d: values propagated between the elements and nodes of a 2d mesh, with custom
//! partitioners and reductions over shared nodes (examples.md §10).
//!
//! Usage: `propagation2d [-o] [size [maxiter]]`: `size` elements per process and side
//! (default 10), `maxiter` iterations (default 5). `-o` derives the node partitioning from
//! the ranges of the element partitioning (a derived custom partitioner) instead of computing
//! it from the process grid; the result is the same. `-h`: usage, exit 1; other options are
//! errors (exit 1).
//!
//! Processes form an `Rx x Ry` grid (Ry = the largest divisor of P not above sqrt(P)); each
//! owns a `size x size` block of elements, stored as `size` 1d ranges (one per element row),
//! and the `(size+1) x (size+1)` nodes around it, so nodes on block borders are held by
//! several processes. Per iteration: every element adds a quarter of its 4 corner nodes; the
//! nodes are zeroed (Init + Sum switch) and collect a quarter of each adjacent element; the
//! copies of shared nodes are summed (Preserve + Sum switch to the same partitioning); the
//! border nodes are set to 2^it. The element sum, all-reduced and normalised by
//! `Lx * Ly * 2^(maxiter-1)`, is 1.

use std::process::ExitCode;

use ferry::coll::CollOptions;
use ferry::data::{
    Container, DataFlow, Partitioner, PartitionerCtx, Partitioning, Range, ReduceOp, Space,
};

mod common;
use common::{atoi, fmt_f, out};

/// The process grid and mesh dimensions.
#[derive(Clone, Copy, Debug)]
struct Mesh {
    rx: usize,
    ry: usize,
    size: usize,
    /// Elements per mesh row and column.
    lx: usize,
    ly: usize,
}

impl Mesh {
    fn new(procs: usize, size: usize) -> Mesh {
        let root = (procs as f64).sqrt().floor() as usize;
        let ry = (1..=root.max(1))
            .filter(|d| procs.checked_rem(*d) == Some(0))
            .max()
            .unwrap_or(1);
        let rx = procs / ry;
        Mesh {
            rx,
            ry,
            size,
            lx: size * rx,
            ly: size * ry,
        }
    }

    /// Grid position of task `t`.
    fn pos(&self, t: usize) -> (usize, usize) {
        (t % self.rx, t / self.rx)
    }

    /// Element ranges of task `t`: one per element row of its block.
    fn element_ranges(&self, t: usize) -> impl Iterator<Item = Range> + '_ {
        let (ix, iy) = self.pos(t);
        let s = self.size;
        (iy * s..(iy + 1) * s).map(move |jy| {
            let from = (jy * self.lx + ix * s) as i64;
            Range::new1(from, from + s as i64)
        })
    }

    /// The two node rows bounding element range `r` (row jy, columns x0..x1): node rows jy and
    /// jy+1, columns x0..=x1.
    fn nodes_of_element_range(&self, r: &Range) -> [Range; 2] {
        let (from, to) = (r.from()[0] as usize, r.to()[0] as usize);
        let jy = from / self.lx;
        let (x0, x1) = (from % self.lx, (to - 1) % self.lx + 1);
        let row = |y: usize| {
            let base = (y * (self.lx + 1)) as i64;
            Range::new1(base + x0 as i64, base + x1 as i64 + 1)
        };
        [row(jy), row(jy + 1)]
    }
}

/// Appends the node ranges of one task's element ranges, merging the node row shared by two
/// consecutive element rows.
fn append_nodes(
    ctx: &mut PartitionerCtx<'_>,
    mesh: &Mesh,
    task: usize,
    elems: impl Iterator<Item = Range>,
) -> ferry::Result<()> {
    let mut last: Option<Range> = None;
    for e in elems {
        for n in mesh.nodes_of_element_range(&e) {
            if last != Some(n) {
                ctx.append(task, n, 0)?;
                last = Some(n);
            }
        }
    }
    Ok(())
}

/// Storage offsets (in `local_data`) of the first index of each of my ranges.
fn range_starts(c: &Container<f64>) -> ferry::Result<Vec<usize>> {
    c.my_ranges()
        .iter()
        .map(|r| {
            c.layout()
                .locate(&r.from())
                .map(|(_, off)| off)
                .ok_or_else(|| ferry::Error::invalid("propagation2d", format!("{r:?} not mapped")))
        })
        .collect()
}

/// Sets the border nodes this process holds to `v`, by its position in the process grid.
fn boundary(nodes: &mut Container<f64>, starts: &[usize], mesh: &Mesh, me: usize, v: f64) {
    let (ix, iy) = mesh.pos(me);
    let len = mesh.size + 1;
    let last = starts.len().saturating_sub(1);
    let data = nodes.local_data_mut();
    for (k, &s) in starts.iter().enumerate() {
        if ix == 0 {
            data[s] = v;
        }
        if ix == mesh.rx - 1 {
            data[s + len - 1] = v;
        }
        if (iy == 0 && k == 0) || (iy == mesh.ry - 1 && k == last) {
            data[s..s + len].fill(v);
        }
    }
}

/// Parsed arguments, or the text to print (stdout for the usage, stderr for errors) before
/// exiting with status 1.
enum Parsed {
    Run {
        derived: bool,
        size: usize,
        maxiter: i64,
    },
    Usage(String),
    Error(String),
}

fn parse(args: &[String]) -> Parsed {
    let prog = args.first().map(String::as_str).unwrap_or("propagation2d");
    let usage = format!("Usage: {prog} [-o] [<size> [<maxiter>]]\n");
    let mut derived = false;
    let mut i = 1;
    while i < args.len() && args[i].starts_with('-') {
        match args[i].as_str() {
            "-o" => derived = true,
            "-h" => return Parsed::Usage(usage),
            other => return Parsed::Error(format!("unknown option `{other}`\n{usage}")),
        }
        i += 1;
    }
    let mut size = args.get(i).map(|a| atoi(a)).unwrap_or(0);
    let mut maxiter = args.get(i + 1).map(|a| atoi(a)).unwrap_or(0);
    if size <= 0 {
        size = 10;
    }
    if maxiter <= 0 {
        maxiter = 5;
    }
    if size > 1 << 14 {
        return Parsed::Error(format!(
            "{size} elements per side and process is more than supported (16384)\n"
        ));
    }
    Parsed::Run {
        derived,
        size: size as usize,
        maxiter,
    }
}

fn run(derived: bool, size: usize, maxiter: i64) -> ferry::Result<()> {
    let mut world = ferry::init()?;
    let rank = world.rank();
    let procs = world.size();
    let mut inst = world.data_instance()?;
    let group = inst.world().clone();
    let t = world.transport();
    let mesh = Mesh::new(procs, size);

    let espace = Space::new1((mesh.lx * mesh.ly) as u64)?;
    let nspace = Space::new1(((mesh.lx + 1) * (mesh.ly + 1)) as u64)?;
    let m = mesh;
    let elem_part = Partitioner::custom("elements", move |ctx: &mut PartitionerCtx<'_>| {
        for task in 0..ctx.ntasks() {
            for r in m.element_ranges(task) {
                ctx.append(task, r, 0)?;
            }
        }
        Ok(())
    });
    let pe = Partitioning::new(&espace, &group, &elem_part)?;
    let pn = if derived {
        let node_part =
            Partitioner::custom("nodes-of-elements", move |ctx: &mut PartitionerCtx<'_>| {
                let base: Vec<_> = ctx.base().unwrap_or(&[]).to_vec();
                for task in 0..ctx.ntasks() {
                    let elems = base.iter().filter(|tr| tr.task == task).map(|tr| tr.range);
                    append_nodes(ctx, &m, task, elems)?;
                }
                Ok(())
            });
        Partitioning::derived(&nspace, &node_part, &pe)?
    } else {
        let node_part = Partitioner::custom("nodes", move |ctx: &mut PartitionerCtx<'_>| {
            for task in 0..ctx.ntasks() {
                append_nodes(ctx, &m, task, m.element_ranges(task))?;
            }
            Ok(())
        });
        Partitioning::new(&nspace, &group, &node_part)?
    };

    let sum = ReduceOp::Sum;
    let mut elems: Container<f64> = Container::new(&mut inst, "elements", &espace);
    let mut nodes: Container<f64> = Container::new(&mut inst, "nodes", &nspace);
    elems.switch_to(t, &pe, DataFlow::None, None)?;
    nodes.switch_to(t, &pn, DataFlow::None, None)?;
    elems.fill(1.0);
    nodes.fill(0.0);
    let es = range_starts(&elems)?;
    let ns = range_starts(&nodes)?;
    if ns.len() != es.len() + 1 {
        return Err(ferry::Error::invalid(
            "propagation2d",
            format!("{} element rows but {} node rows", es.len(), ns.len()),
        )
        .on_rank(rank));
    }
    boundary(&mut nodes, &ns, &mesh, rank, 0.0);

    for it in 0..maxiter {
        // Elements take a quarter of their corner nodes.
        {
            let nd = nodes.local_data();
            let ed = elems.local_data_mut();
            for (k, &e0) in es.iter().enumerate() {
                let (lo, hi) = (ns[k], ns[k + 1]);
                for q in 0..size {
                    ed[e0 + q] +=
                        0.25 * (nd[lo + q] + nd[lo + q + 1] + nd[hi + q] + nd[hi + q + 1]);
                }
            }
        }
        // Nodes: zeroed, a quarter of each adjacent element, shared copies summed.
        nodes.switch_to(t, &pn, DataFlow::Init, Some(&sum))?;
        {
            let ed = elems.local_data();
            let nd = nodes.local_data_mut();
            for (k, &e0) in es.iter().enumerate() {
                let (lo, hi) = (ns[k], ns[k + 1]);
                for q in 0..size {
                    let v = 0.25 * ed[e0 + q];
                    nd[lo + q] += v;
                    nd[lo + q + 1] += v;
                    nd[hi + q] += v;
                    nd[hi + q + 1] += v;
                }
            }
        }
        nodes.switch_to(t, &pn, DataFlow::Preserve, Some(&sum))?;
        boundary(&mut nodes, &ns, &mesh, rank, 2f64.powi(it as i32));
    }

    let local: f64 = es
        .iter()
        .map(|&e0| elems.local_data()[e0..e0 + size].iter().sum::<f64>())
        .sum();
    let mut total = [local];
    ferry::coll::allreduce_with(t, &group, &mut total, &sum, &CollOptions::rank_ordered())?;
    let norm = (mesh.lx * mesh.ly) as f64 * 2f64.powi(maxiter as i32 - 1);
    if rank == 0 {
        out(&format!(
            "expected : {}\ncalculated: {}\n",
            fmt_f(1.0, 6),
            fmt_f(total[0] / norm, 6)
        ))?;
    }
    // Nobody may still be pulling this rank's last large messages when it shuts down.
    inst.finalize(t)?;
    world.finish()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let first = std::env::var("FERRY_RANK").map_or(true, |r| r == "0");
    match parse(&args) {
        Parsed::Usage(text) => {
            if first {
                print!("{text}");
            }
            ExitCode::FAILURE
        }
        Parsed::Error(text) => {
            if first {
                eprint!("propagation2d: {text}");
            }
            ExitCode::FAILURE
        }
        Parsed::Run {
            derived,
            size,
            maxiter,
        } => match run(derived, size, maxiter) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("propagation2d: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
