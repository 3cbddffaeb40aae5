//! spmv: sparse matrix times vector, result collected two ways (examples.md §11).
//!
//! Usage: `spmv [size]`; size <= 0, > 10000 or missing -> 10000. The matrix is lower
//! triangular: row r has the columns 0..r-1, all with value `size - r`; the vector is
//! `v[i] = i + 1` (replicated, not distributed). Rows are distributed with the block
//! partitioner weighted by each row's number of non-zeros (r), so every process does about the
//! same work; each process builds only its own rows.
//!
//! 1. Each process computes its rows into the result container (block partitioning), which is
//!    then switched to the Master partitioning (preserving data) and summed by the master.
//! 2. The result container is switched to All with an Init + Sum flow (zero everywhere), each
//!    process adds its rows at their global positions, and a switch to Master with Sum
//!    combines the copies (D4 reduction).

use std::process::ExitCode;
use std::sync::Arc;

use ferry::data::{Block, Container, DataFlow, Partitioner, Partitioning, ReduceOp, Space};

mod common;
use common::{atoi, fmt_f, out};

/// The rows `[from, to)` of the matrix in CSR form (row starts, column indexes, values).
struct Csr {
    first_row: usize,
    row: Vec<usize>,
    col: Vec<u32>,
    val: Vec<f64>,
}

impl Csr {
    fn rows(size: usize, from: usize, to: usize) -> Csr {
        let nnz: usize = (from..to).sum();
        let mut row = Vec::with_capacity(to - from + 1);
        let mut col = Vec::with_capacity(nnz);
        let mut val = Vec::with_capacity(nnz);
        row.push(0);
        for r in from..to {
            for c in 0..r {
                col.push(c as u32);
                val.push((size - r) as f64);
            }
            row.push(col.len());
        }
        Csr {
            first_row: from,
            row,
            col,
            val,
        }
    }

    /// Row `r` times `v`, summed in column order.
    #[inline]
    fn row_times(&self, r: usize, v: &[f64]) -> f64 {
        let i = r - self.first_row;
        let mut sum = 0.0;
        for j in self.row[i]..self.row[i + 1] {
            sum += self.val[j] * v[self.col[j] as usize];
        }
        sum
    }
}

fn run(args: &[String]) -> ferry::Result<()> {
    let mut size = args.get(1).map(|a| atoi(a)).unwrap_or(0);
    if size <= 0 || size > 10000 {
        size = 10000;
    }
    let size = size as usize;

    let mut world = ferry::init()?;
    let rank = world.rank();
    let mut inst = world.data_instance()?;
    let group = inst.world().clone();
    let t = world.transport();

    let space = Space::new1(size as u64)?;
    let rows = Partitioning::new(
        &space,
        &group,
        &Partitioner::Block(Block {
            index_weight: Some(Arc::new(|r| r as f64)),
            ..Block::default()
        }),
    )?;
    let master = Partitioning::new(&space, &group, &Partitioner::Master)?;
    let all = Partitioning::new(&space, &group, &Partitioner::All)?;

    let v: Vec<f64> = (0..size).map(|i| (i + 1) as f64).collect();
    let mine: Vec<(usize, usize)> = rows
        .rank_ranges(rank)
        .iter()
        .map(|tr| (tr.range.from()[0] as usize, tr.range.to()[0] as usize))
        .collect();
    let csr: Vec<Csr> = mine
        .iter()
        .map(|&(from, to)| Csr::rows(size, from, to))
        .collect();

    let mut res: Container<f64> = Container::new(&mut inst, "result", &space);
    let sum = ReduceOp::Sum;

    // 1. Rows into the block partitioning, collected at the master.
    res.switch_to(t, &rows, DataFlow::None, None)?;
    for (no, m) in csr.iter().enumerate() {
        let mapping = res.layout().range_mapping[no];
        let view = res.mapping_mut(mapping)?;
        let base = view.range.from()[0] as usize;
        let (from, to) = mine[no];
        for r in from..to {
            view.data[r - base] = m.row_times(r, &v);
        }
    }
    res.switch_to(t, &master, DataFlow::Preserve, None)?;
    if rank == 0 {
        let total: f64 = res.local_data().iter().sum();
        out(&format!("Res sum (regular): {}\n", fmt_f(total, 6)))?;
    }

    // 2. Every process adds its rows into a zeroed full copy; the copies are summed at the
    //    master.
    res.switch_to(t, &all, DataFlow::Init, Some(&sum))?;
    {
        let view = res.mapping_mut(0)?;
        for (no, m) in csr.iter().enumerate() {
            let (from, to) = mine[no];
            for r in from..to {
                view.data[r] += m.row_times(r, &v);
            }
        }
    }
    res.switch_to(t, &master, DataFlow::Preserve, Some(&sum))?;
    if rank == 0 {
        let total: f64 = res.local_data().iter().sum();
        out(&format!("Res sum (reduce): {}\n", fmt_f(total, 6)))?;
    }
    // Nobody may still be pulling this rank's last large messages when it shuts down.
    inst.finalize(t)?;
    world.finish()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("spmv: {e}");
            ExitCode::FAILURE
        }
    }
}
