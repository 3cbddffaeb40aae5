//! markov2: Markov chain with a fan-out graph, push iteration with Sum reductions
//! (examples.md §9).
//!
//! Usage: `markov2 [options] [states [fan-out [iterations [istate]]]]`; defaults 100000
//! states, fan-out 10, 10 iterations, istate -1 (all states equally likely); states or
//! fan-out 0 = default, istate >= states = -1. Fewer than 6 states become 5, a fan-out of at
//! least the state count becomes half the state count (both announced by the master).
//! Options, separate arguments before the positional ones:
//! - `-i` indirection: local storage positions of all edge targets computed once;
//! - `-c` compact mapping: one allocation per range of the write partitioning (implies `-i`);
//! - `-s` the write partitioner collects single indexes (sorted and merged into ranges);
//! - `-f` pseudo-random ("fine grained") connectivity;
//! - `-v` log the graph (info level on stderr; sets `FERRY_LOG=info` unless `FERRY_LOG` is
//!   set), stdout is unchanged;
//! - `-p` per-rank timing appended to `markov2_profiling.txt`;
//! - `-h` or any other option: usage, exit 1.
//!
//! Data: values are read in equal blocks; each task writes into its own copy of all targets
//! of its states (custom, overlapping partitioning), zeroed by an Init + Sum switch; the next
//! switch back to the blocks sums the overlapping copies (rank-ordered fold, D4). The final
//! result is collected at the master with a Sum switch.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use ferry::data::{
    Container, DataFlow, Layout, LayoutOrder, Partitioner, Partitioning, ReduceOp, Space,
};
mod common;
use common::{atoi, fmt_f, fmt_g, out};

const USAGE: &str =
    "Usage: markov2 [options] [<statecount> [<fan-out> [<iterations> [<istate>]]]]\n\
\n\
Options:\n \
-i: use indirection with pre-calculated local indexes\n \
-c: use compact mapping (implies -i)\n \
-s: partitioner uses single indexes\n \
-f: fine-grained (pseudo-random) connectivity\n \
-v: log the Markov graph (stderr)\n \
-p: write profiling data to markov2_profiling.txt\n \
-h: this help text\n";

#[derive(Debug, Default, Clone, Copy)]
struct Opts {
    indirection: bool,
    compact: bool,
    single: bool,
    fine: bool,
    verbose: bool,
    profile: bool,
    n: i64,
    m: i64,
    iters: usize,
    istate: i64,
}

/// Why the program stops before running: the usage text (stdout) or an error (stderr); exit 1
/// either way.
enum Exit {
    Usage,
    Error(String),
}

fn parse(mut args: common::CmdLine) -> Result<Opts, Exit> {
    let mut o = Opts::default();
    while let Some(letter) = args.option() {
        match letter {
            Some(b'i') => o.indirection = true,
            Some(b'c') => o.compact = true,
            Some(b's') => o.single = true,
            Some(b'f') => o.fine = true,
            Some(b'v') => o.verbose = true,
            Some(b'p') => o.profile = true,
            _ => return Err(Exit::Usage),
        }
    }
    o.n = args.positional(0).map_or(0, atoi);
    o.m = args.positional(1).map_or(0, atoi);
    o.iters = args.positional(2).map_or(10, atoi).max(0) as usize;
    o.istate = args.positional(3).map_or(-1, atoi);
    if o.n < 0 || o.m < 0 {
        return Err(Exit::Error(format!(
            "markov2: state count ({}) and fan-out ({}) must not be negative\n",
            o.n, o.m
        )));
    }
    if o.n == 0 {
        o.n = 100_000;
    }
    if o.m == 0 {
        o.m = 10;
    }
    o.indirection |= o.compact;
    Ok(o)
}

/// The fan-out graph: for state i, `to[i*(m+1) + j]` is the target of edge j (j = 0: the
/// stay edge, target i) and `prob[..]` its probability (weight / total weight of row i).
struct Graph {
    n: usize,
    m: usize,
    to: std::sync::Arc<Vec<u32>>,
    prob: Vec<f64>,
}

impl Graph {
    fn new(n: usize, m: usize, fine: bool) -> ferry::Result<Graph> {
        let k = m + 1;
        let mut to: Vec<u32> = Vec::new();
        let mut prob: Vec<f64> = Vec::new();
        let too_large = || {
            ferry::Error::new(ferry::ErrorKind::ResourceExhausted, "graph").with_detail(format!(
                "{n} states with {m} edges each do not fit in memory"
            ))
        };
        to.try_reserve_exact(n * k).map_err(|_| too_large())?;
        prob.try_reserve_exact(n * k).map_err(|_| too_large())?;
        let f = i64::from(fine);
        let (nn, mm) = (n as i64, m as i64);
        let mut w = vec![0.0f64; k];
        for i in 0..nn {
            to.push(i as u32);
            w[0] = 5.0;
            let mut step: i64 = 1;
            for j in 1..=mm {
                to.push(((i + step) % nn) as u32);
                w[j as usize] = (((j + i) % (5 * mm)) + 1) as f64;
                step = 2 * step + j + f * (i % 37);
                while step > nn {
                    step -= nn;
                }
            }
            let total: f64 = w.iter().sum();
            prob.extend(w.iter().map(|x| x / total));
        }
        Ok(Graph {
            n,
            m,
            to: std::sync::Arc::new(to),
            prob,
        })
    }

    fn log(&self) {
        let k = self.m + 1;
        for i in 0..self.n {
            let mut s = format!("State {:2}: stay {:.3} ", i, self.prob[i * k]);
            for j in 1..k {
                s.push_str(&format!(
                    "=>({:.3})={:<2}  ",
                    self.prob[i * k + j],
                    self.to[i * k + j]
                ));
            }
            tracing::info!("{s}");
        }
    }
}

struct Profile {
    switch_s: f64,
    compute_s: f64,
}

fn run(mut o: Opts) -> ferry::Result<()> {
    let mut world = ferry::init()?;
    let rank = world.rank();
    let mut inst = world.data_instance()?;
    let group = inst.world().clone();
    let t = world.transport();
    let mut text = String::new();
    if o.n < 6 {
        text.push_str("State count too small, set to 5\n");
        o.n = 5;
    }
    if o.m >= o.n {
        text.push_str(&format!(
            "Fan-out of {} too high (state count: {}), set to {}\n",
            o.m,
            o.n,
            o.n / 2
        ));
        o.m = o.n / 2;
    }
    if o.istate >= o.n {
        o.istate = -1;
    }
    let (n, m) = (o.n as usize, o.m as usize);
    if !matches!(n.checked_mul(m + 1), Some(e) if e <= 1 << 31) {
        return Err(ferry::Error::invalid(
            "markov2",
            format!("{n} states with fan-out {m} exceed the supported graph size of 2^31 edges"),
        ));
    }
    let k = m + 1;
    text.push_str(&format!(
        "Init Markov chain with {n} states, max fan-out {m}.\nRunning {} iterations.{}{}{}\n",
        o.iters,
        if o.single {
            " Partitioner using single indexes."
        } else {
            ""
        },
        if o.compact {
            " Using compact mapping."
        } else {
            ""
        },
        if o.indirection {
            " Using indirection."
        } else {
            ""
        },
    ));
    if o.istate >= 0 {
        text.push_str(&format!(
            "Initial values: all 0, just state {} set to 1.\n",
            o.istate
        ));
    } else {
        text.push_str(&format!(
            "All initial values set to {:.6}.\n",
            1.0 / n as f64
        ));
    }
    if rank == 0 {
        out(&text)?;
    }

    let graph = std::sync::Arc::new(Graph::new(n, m, o.fine)?);
    if o.verbose {
        graph.log();
    }
    let space = Space::new1(n as u64)?;
    let pr = Partitioning::new(&space, &group, &Partitioner::block())?;
    let pw = Partitioning::new(
        &space,
        &group,
        &common::neighbour_partitioner(
            "markov2-write",
            graph.n,
            graph.m + 1,
            graph.to.clone(),
            pr.clone(),
            o.single,
            o.compact,
        ),
    )?;
    let master = Partitioning::new(&space, &group, &Partitioner::Master)?;
    let sum = ReduceOp::Sum;
    let mut a: Container<f64> = Container::new(&mut inst, "prob-a", &space);
    let mut b: Container<f64> = Container::new(&mut inst, "prob-b", &space);
    a.reserve(&[&pw, &pr, &master])?;
    b.reserve(&[&pw, &pr, &master])?;

    let own: Vec<(usize, usize)> = pr
        .rank_ranges(rank)
        .iter()
        .map(|tr| (tr.range.from()[0] as usize, tr.range.to()[0] as usize))
        .collect();

    // Storage positions of the targets in the write layout: all of them (indirection) or the
    // base of the single box mapping.
    let mut indir: Vec<u32> = Vec::new();
    let mut write_base = 0i64;
    {
        let layout = Layout::new(&pw, rank, &LayoutOrder::Lexicographic)?;
        if o.indirection {
            for &(s, e) in &own {
                for i in s..e {
                    for &dst in &graph.to[i * k..(i + 1) * k] {
                        let (_, off) = layout.locate(&[i64::from(dst), 0, 0]).ok_or_else(|| {
                            ferry::Error::invalid(
                                "markov2",
                                format!("target {dst} of state {i} not in the write part"),
                            )
                        })?;
                        indir.push(off as u32);
                    }
                }
            }
        } else if let Some(mp) = layout.mappings.first() {
            write_base = mp.range.from()[0];
        }
    }

    let mut prof = Profile {
        switch_s: 0.0,
        compute_s: 0.0,
    };
    a.switch_to(t, &pr, DataFlow::None, None)?;
    for no in 0..a.my_ranges().len() {
        let r = a.my_ranges()[no];
        let mi = a.layout().range_mapping[no];
        let v = a.mapping_mut(mi)?;
        let base = v.range.from()[0];
        for i in r.from()[0]..r.to()[0] {
            v.data[(i - base) as usize] = if o.istate >= 0 {
                f64::from(u8::from(i == o.istate))
            } else {
                1.0 / n as f64
            };
        }
    }
    for _ in 0..o.iters {
        let t0 = Instant::now();
        b.switch_to(t, &pw, DataFlow::Init, Some(&sum))?;
        let t1 = Instant::now();
        {
            let dst = b.local_data_mut();
            let mut e = 0usize;
            for (no, &(s, end)) in own.iter().enumerate() {
                let (_, src) = a.range_mapping(no)?;
                let sbase = src.range.from()[0] as usize;
                for i in s..end {
                    let x = src.data[i - sbase];
                    let p = &graph.prob[i * k..(i + 1) * k];
                    if o.indirection {
                        for (off, pj) in indir[e..e + k].iter().zip(p) {
                            dst[*off as usize] += x * pj;
                        }
                        e += k;
                    } else {
                        for (to, pj) in graph.to[i * k..(i + 1) * k].iter().zip(p) {
                            dst[(i64::from(*to) - write_base) as usize] += x * pj;
                        }
                    }
                }
            }
        }
        let t2 = Instant::now();
        b.switch_to(t, &pr, DataFlow::Preserve, Some(&sum))?;
        prof.switch_s += (t1 - t0).as_secs_f64() + t2.elapsed().as_secs_f64();
        prof.compute_s += (t2 - t1).as_secs_f64();
        std::mem::swap(&mut a, &mut b);
    }
    let t0 = Instant::now();
    a.switch_to(t, &master, DataFlow::Preserve, Some(&sum))?;
    prof.switch_s += t0.elapsed().as_secs_f64();
    if rank == 0 {
        let d = a.local_data();
        let total: f64 = d.iter().sum();
        let p = |i: usize| d.get(i).copied().unwrap_or(0.0);
        out(&format!(
            "Result probs: p0 = {}, p1 = {}, p2 = {}, Sum: {}\n",
            fmt_g(p(0)),
            fmt_g(p(1)),
            fmt_g(p(2)),
            fmt_f(total, 6)
        ))?;
    }
    if o.profile {
        let line = format!(
            "markov2 rank {rank}/{}: {n} states, fan-out {m}, {} iterations: switches {:.6} s, compute {:.6} s\n",
            group.size(),
            o.iters,
            prof.switch_s,
            prof.compute_s
        );
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open("markov2_profiling.txt")
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .map_err(|e| ferry::Error::io("write markov2_profiling.txt", e))?;
    }
    // Nobody may still be pulling this rank's last large messages when it shuts down.
    inst.finalize(t)?;
    world.finish()
}

fn main() -> ExitCode {
    match parse(common::CmdLine::from_env()) {
        Err(exit) => {
            // Every rank parses the same arguments; one copy of the text is enough.
            if std::env::var("FERRY_RANK").map_or(true, |r| r == "0") {
                match exit {
                    Exit::Usage => print!("{USAGE}"),
                    Exit::Error(text) => eprint!("{text}"),
                }
            }
            ExitCode::FAILURE
        }
        Ok(o) => {
            if o.verbose && std::env::var_os("FERRY_LOG").is_none() {
                // Before any thread exists: nothing else reads the environment concurrently.
                std::env::set_var("FERRY_LOG", "info");
            }
            match run(o) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("markov2: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
