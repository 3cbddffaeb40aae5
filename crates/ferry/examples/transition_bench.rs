//! transition_bench: times data-layer switches of one large 2d container of f64 on the message
//! path and with shared containers (S3), in the same run.
//!
//! Usage: `ferry run -n N transition_bench [-c] [MiB [iterations]]` (defaults 64 and 20).
//! Two switches are timed, each back and forth per iteration:
//! - `halo`: the jac2d pattern, bisection <-> its corner halo of depth 1 (only halos move);
//! - `redistribute`: row blocks <-> column blocks (every rank keeps 1/N of its part and
//!   sends the rest: a full redistribution, as in a transpose).
//!
//! For each direction, the median and best over iterations of the slowest rank's time per
//! switch, on the message path (`copy`) and with shared containers (`shared`, node-shared
//! memory of the backend; on backends without it both run the message path), and the ratio
//! of the medians (above 1: shared is faster). `halo -> bisection` moves nothing (the halo is
//! dropped in place). Every value
//! is checked after every switch (value = a function of the global index, halo cells
//! included): a wrong cell is an error. `-c` (check) prints only a digest of the checked
//! values per mode instead of times, for tests that compare the two paths.

mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use ferry::prelude::*;

fn main() -> ExitCode {
    let mut args = common::CmdLine::from_env();
    let mut check = false;
    while args.option().is_some() {
        if args.option_text() == "-c" {
            check = true;
        }
    }
    let mib = if args.pos(0) > 0 { args.pos(0) } else { 64 };
    let iters = if args.pos(1) > 0 { args.pos(1) } else { 20 };
    common::main_with("transition_bench", || run(mib, iters, check))
}

/// The value every cell of global index (x, y) holds.
fn value(x: i64, y: i64) -> f64 {
    (x * 7919 + y * 104_729) as f64 * 0.5
}

fn fill(c: &mut Container<f64>) -> ferry::Result<()> {
    for no in 0..c.my_ranges().len() {
        let own = c.my_ranges()[no];
        for y in own.from()[1]..own.to()[1] {
            for x in own.from()[0]..own.to()[0] {
                c.set(&[x, y, 0], value(x, y))?;
            }
        }
    }
    Ok(())
}

/// Checks every cell this rank holds (owned ranges, halos included); returns a digest of them.
fn verify(c: &Container<f64>, rank: usize) -> ferry::Result<u64> {
    let mut digest = 0u64;
    for no in 0..c.my_ranges().len() {
        let (r, m) = c.range_mapping(no)?;
        let b = m.range.from();
        for y in r.from()[1]..r.to()[1] {
            for x in r.from()[0]..r.to()[0] {
                let off = (x - b[0]) as usize * m.strides[0] + (y - b[1]) as usize * m.strides[1];
                let v = m.data[off];
                if v.to_bits() != value(x, y).to_bits() {
                    return Err(ferry::Error::invalid(
                        "transition_bench",
                        format!(
                            "rank {rank}: cell ({x}, {y}) holds {v}, not {}",
                            value(x, y)
                        ),
                    ));
                }
                // Order-independent digest of (index, bits).
                let h = (v.to_bits() ^ ((x as u64) << 32 | y as u64))
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15);
                digest = digest.wrapping_add(h ^ (h >> 29));
            }
        }
    }
    Ok(digest)
}

#[derive(Clone, Copy)]
struct Timing {
    median: Duration,
    best: Duration,
}

fn timing(mut times: Vec<Duration>) -> Timing {
    times.sort();
    Timing {
        median: times[times.len() / 2],
        best: times[0],
    }
}

/// Switches `c` between `a` and `b` `iters` times each way; the slowest rank's time per switch,
/// to `b` and back to `a`.
fn time_switches(
    comm: &mut Comm,
    c: &mut Container<f64>,
    a: &Partitioning,
    b: &Partitioning,
    iters: i64,
    check: bool,
    digest: &mut u64,
) -> ferry::Result<[Timing; 2]> {
    let rank = comm.rank();
    let mut times = [Vec::new(), Vec::new()];
    for it in 0..iters {
        for (k, p) in [b, a].into_iter().enumerate() {
            comm.barrier()?;
            let t0 = Instant::now();
            comm.switch(c, p, DataFlow::Preserve)?;
            let t = t0.elapsed().as_secs_f64();
            let slowest = comm.allreduce_value(t, Op::Max)?;
            times[k].push(Duration::from_secs_f64(slowest));
            if check || it == 0 {
                *digest = digest.wrapping_add(verify(c, rank)?);
            }
        }
    }
    let [to_b, to_a] = times;
    Ok([timing(to_b), timing(to_a)])
}

fn run(mib: i64, iters: i64, check: bool) -> ferry::Result<()> {
    let mut comm = Comm::init()?;
    let (rank, n) = (comm.rank(), comm.size());
    let side = (((mib as f64) * 1024.0 * 1024.0 / 8.0).sqrt() as u64).max(2);
    let space = Space::new2(side, side)?;
    let bisect = comm.partitioning(&space, &Partitioner::Bisection)?;
    let halo = Partitioning::derived(&space, &Partitioner::CornerHalo { depth: 1 }, &bisect)?;
    let rows = comm.partitioning(&space, &Partitioner::Grid { blocks: [1, n, 1] })?;
    let cols = comm.partitioning(&space, &Partitioner::Grid { blocks: [n, 1, 1] })?;
    let shared_mem = comm.transport().shared_memory();
    let backend = comm.backend();
    if rank == 0 && !check {
        println!(
            "{side} x {side} f64 ({:.1} MiB), {n} ranks, {backend}, {iters} iterations; \
             time per switch, slowest rank, median (best)",
            (side * side * 8) as f64 / (1 << 20) as f64
        );
        if shared_mem.is_none() {
            println!("(this backend has no shared memory: both modes use messages)");
        }
    }
    let pairs = [
        (
            "halo",
            ["bisection -> halo", "halo -> bisection"],
            &bisect,
            &halo,
        ),
        (
            "redistribute",
            ["rows -> columns", "columns -> rows"],
            &rows,
            &cols,
        ),
    ];
    for (name, dirs, a, b) in pairs {
        let mut row = Vec::new();
        for shared in [false, true] {
            comm.data()
                .set_shared_memory(if shared { shared_mem.clone() } else { None });
            let mut c: Container<f64> = comm.container(name, &space);
            if a.is_halo_pair(b) {
                c.share_layout(a, b)?;
            }
            c.reserve(&[a, b])?;
            comm.switch(&mut c, a, DataFlow::None)?;
            fill(&mut c)?;
            let mut digest = 0u64;
            let t = time_switches(&mut comm, &mut c, a, b, iters, check, &mut digest)?;
            let digest = comm.allreduce_value(digest, Op::Sum)?;
            row.push((t, digest));
        }
        let mode = |s: bool| if s { "shared" } else { "copy" };
        if rank == 0 {
            if check {
                for (k, (_, d)) in row.iter().enumerate() {
                    println!("{name} {}: digest {d:016x}", mode(k == 1));
                }
            } else {
                let ms = |d: Duration| d.as_secs_f64() * 1e3;
                for (k, dir) in dirs.iter().enumerate() {
                    let (c, s) = (row[0].0[k], row[1].0[k]);
                    println!(
                        "{dir:<18} copy {:8.3} ms ({:8.3})  shared {:8.3} ms ({:8.3})  \
                         copy/shared {:.2}x",
                        ms(c.median),
                        ms(c.best),
                        ms(s.median),
                        ms(s.best),
                        c.median.as_secs_f64() / s.median.as_secs_f64().max(1e-9)
                    );
                }
            }
        }
    }
    comm.finish()
}
