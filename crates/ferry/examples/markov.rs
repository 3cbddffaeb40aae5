//! markov: Markov chain with a fan-in graph, pull iteration (examples.md §8).
//!
//! Usage: `markov [options] [states [fan-in [iterations]]]`; defaults 1000000 states, fan-in
//! 10, 10 iterations (states or fan-in 0 = default; 0 iterations is allowed). Options, as
//! separate arguments before the positional ones (second character decides, unknown letters
//! are ignored):
//! - `-i` indirection: the local storage position of every edge source is computed once;
//! - `-c` compact mapping: each range of the read partitioning gets its own allocation
//!   (implies `-i`, since sources can no longer be addressed relative to one box);
//! - `-s` the read partitioner collects single indexes (sorted and merged into ranges);
//! - `-f` pseudo-random ("fine grained") connectivity;
//! - `-v` every process prints the graph;
//! - `-p` per-rank timing appended to `markov_profiling.txt`;
//! - `-h` usage, exit 1.
//!
//! Graph (every process builds all of it): state i has a stay edge of weight 5 and m in-edges
//! from `(i + step) % n` with weights `((j + i) % (5m)) + 1`; probabilities are weights divided
//! by the total out-weight of the edge's source. Data: the probabilities are written in an
//! equal block partitioning; the read partitioning (custom partitioner) gives each task its
//! block plus the sources of all in-edges of its states, so one switch per iteration brings in
//! every value the next step pulls (D2 user-defined partitioner, D4 switch).

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use ferry::data::{Layout, LayoutOrder};
use ferry::prelude::*;
mod common;
use common::{atoi, fmt_f, fmt_g, out};

const USAGE: &str = "Usage: markov [options] [<statecount> [<fan-in> [<iterations>]]]\n\
\n\
Options:\n \
-i: use indirection with pre-calculated local indexes\n \
-c: use compact mapping (implies -i)\n \
-s: partitioner uses single indexes\n \
-f: fine-grained (pseudo-random) connectivity\n \
-v: print the Markov graph\n \
-p: write profiling data to markov_profiling.txt\n \
-h: this help text\n";

#[derive(Debug, Default, Clone, Copy)]
struct Opts {
    indirection: bool,
    compact: bool,
    single: bool,
    fine: bool,
    verbose: bool,
    profile: bool,
    n: usize,
    m: usize,
    iters: usize,
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
            Some(b'h') => return Err(Exit::Usage),
            _ => {}
        }
    }
    let n = args.positional(0).map_or(0, atoi);
    let m = args.positional(1).map_or(0, atoi);
    let iters = args.positional(2).map_or(10, atoi);
    if n < 0 || m < 0 {
        return Err(Exit::Error(format!(
            "markov: state count ({n}) and fan-in ({m}) must not be negative\n"
        )));
    }
    o.n = if n == 0 { 1_000_000 } else { n as usize };
    o.m = if m == 0 { 10 } else { m as usize };
    o.iters = iters.max(0) as usize;
    // Every process holds the whole graph: (m+1) edges per state, 12 bytes each.
    if !matches!(o.n.checked_mul(o.m + 1), Some(e) if e <= 1 << 31) {
        return Err(Exit::Error(format!(
            "markov: {} states with fan-in {} exceed the supported graph size of 2^31 edges\n",
            o.n, o.m
        )));
    }
    o.indirection |= o.compact;
    Ok(o)
}

/// The fan-in graph: for state i, `from[i*(m+1) + j]` is the source of edge j (j = 0: the stay
/// edge, source i) and `prob[..]` its probability.
struct Graph {
    n: usize,
    m: usize,
    from: std::sync::Arc<Vec<u32>>,
    prob: Vec<f64>,
}

impl Graph {
    fn new(n: usize, m: usize, fine: bool) -> ferry::Result<Graph> {
        let k = m + 1;
        let mut from: Vec<u32> = Vec::new();
        let mut weight: Vec<f64> = Vec::new();
        let too_large = || {
            ferry::Error::new(ferry::ErrorKind::ResourceExhausted, "graph").with_detail(format!(
                "{n} states with {m} edges each do not fit in memory"
            ))
        };
        from.try_reserve_exact(n * k).map_err(|_| too_large())?;
        weight.try_reserve_exact(n * k).map_err(|_| too_large())?;
        let f = i64::from(fine);
        let (nn, mm) = (n as i64, m as i64);
        for i in 0..nn {
            from.push(i as u32);
            weight.push(5.0f64);
            let mut step: i64 = 1;
            for j in 1..=mm {
                from.push(((i + step) % nn) as u32);
                weight.push((((j + i) % (5 * mm)) + 1) as f64);
                step = 2 * step + j + f * (i % 37);
                while step > nn {
                    step -= nn;
                }
            }
        }
        // Out-weight of every state: all edges it is the source of, its stay edge included.
        let mut total = vec![0.0f64; n];
        for (s, w) in from.iter().zip(&weight) {
            total[*s as usize] += w;
        }
        let prob = from
            .iter()
            .zip(&weight)
            .map(|(s, w)| w / total[*s as usize])
            .collect();
        Ok(Graph {
            n,
            m,
            from: std::sync::Arc::new(from),
            prob,
        })
    }

    fn print(&self) -> ferry::Result<()> {
        let k = self.m + 1;
        let mut s = String::new();
        for i in 0..self.n {
            s.push_str(&format!("State {:2}: stay {:.3} ", i, self.prob[i * k]));
            for j in 1..k {
                s.push_str(&format!(
                    "<=({:.3})={:<2}  ",
                    self.prob[i * k + j],
                    self.from[i * k + j]
                ));
            }
            s.push('\n');
            if s.len() > 1 << 16 {
                out(&s)?;
                s.clear();
            }
        }
        out(&s)
    }
}

struct Profile {
    switch_s: f64,
    compute_s: f64,
}

fn run(o: Opts) -> ferry::Result<()> {
    let mut comm = Comm::init()?;
    let rank = comm.rank();
    let (n, m) = (o.n, o.m);

    let graph = std::sync::Arc::new(Graph::new(n, m, o.fine)?);
    if rank == 0 {
        out(&format!(
            "Init Markov chain with {n} states, max fan-in {m}\nRun {} iterations each.{}{}{}\n",
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
        ))?;
    }
    if o.verbose {
        graph.print()?;
    }

    let space = Space::new1(n as u64)?;
    let pw = comm.partitioning(&space, &Partitioner::block())?;
    let pr = comm.partitioning(
        &space,
        &common::neighbour_partitioner(
            "markov-read",
            graph.n,
            graph.m + 1,
            graph.from.clone(),
            pw.clone(),
            o.single,
            o.compact,
        ),
    )?;
    let master = comm.partitioning(&space, &Partitioner::Master)?;
    let mut a = comm.container::<f64>("prob-a", &space);
    let mut b = comm.container::<f64>("prob-b", &space);
    a.reserve(&[&pw, &pr, &master])?;
    b.reserve(&[&pw, &pr, &master])?;

    // My states (write partitioning: one block).
    let own: Vec<(usize, usize)> = pw
        .rank_ranges(rank)
        .iter()
        .map(|tr| (tr.range.from()[0] as usize, tr.range.to()[0] as usize))
        .collect();
    let k = m + 1;

    // Indirection: storage position of every source in the read container (computed once).
    let mut indir: Vec<u32> = Vec::new();
    let mut read_base = 0i64;
    {
        let layout = Layout::new(&pr, rank, &LayoutOrder::Lexicographic)?;
        if o.indirection {
            for &(s, e) in &own {
                for i in s..e {
                    for &src in &graph.from[i * k..(i + 1) * k] {
                        let (_, off) = layout.locate(&[i64::from(src), 0, 0]).ok_or_else(|| {
                            ferry::Error::invalid(
                                "markov",
                                format!("source {src} of state {i} not in the read part"),
                            )
                        })?;
                        indir.push(off as u32);
                    }
                }
            }
        } else if let Some(mp) = layout.mappings.first() {
            read_base = mp.range.from()[0];
        }
    }

    let starts: [(&str, Option<usize>); 3] = [
        ("Start with state 0 prob 1 ...\n", Some(0)),
        ("Start with state 1 prob 1 ...\n", Some(1)),
        ("Start with all probs equal ...\n", None),
    ];
    let mut prof = Profile {
        switch_s: 0.0,
        compute_s: 0.0,
    };
    for (title, state) in starts {
        if rank == 0 {
            out(title)?;
        }
        // Initial values in the write partitioning.
        comm.switch(&mut a, &pw, DataFlow::None)?;
        for no in 0..a.my_ranges().len() {
            let r = a.my_ranges()[no];
            let mi = a.layout().range_mapping[no];
            let v = a.mapping_mut(mi)?;
            let base = v.range.from()[0];
            for i in r.from()[0]..r.to()[0] {
                v.data[(i - base) as usize] = match state {
                    Some(s) => f64::from(u8::from(i as usize == s)),
                    None => 1.0 / n as f64,
                };
            }
        }
        for _ in 0..o.iters {
            let t0 = Instant::now();
            comm.switch(&mut a, &pr, DataFlow::Preserve)?;
            comm.switch(&mut b, &pw, DataFlow::None)?;
            let t1 = Instant::now();
            let src = a.local_data();
            let mut e = 0usize;
            for (no, &(s, end)) in own.iter().enumerate() {
                let mi = b.layout().range_mapping[no];
                let dst = b.mapping_mut(mi)?;
                let dbase = dst.range.from()[0] as usize;
                for i in s..end {
                    let p = &graph.prob[i * k..(i + 1) * k];
                    let v = if o.indirection {
                        let ix = &indir[e..e + k];
                        e += k;
                        let mut v = src[ix[0] as usize] * p[0];
                        for j in 1..k {
                            v += src[ix[j] as usize] * p[j];
                        }
                        v
                    } else {
                        let f = &graph.from[i * k..(i + 1) * k];
                        let at = |x: u32| (i64::from(x) - read_base) as usize;
                        let mut v = src[at(f[0])] * p[0];
                        for j in 1..k {
                            v += src[at(f[j])] * p[j];
                        }
                        v
                    };
                    dst.data[i - dbase] = v;
                }
            }
            prof.switch_s += (t1 - t0).as_secs_f64();
            prof.compute_s += t1.elapsed().as_secs_f64();
            std::mem::swap(&mut a, &mut b);
        }
        let t0 = Instant::now();
        comm.switch(&mut a, &master, DataFlow::Preserve)?;
        prof.switch_s += t0.elapsed().as_secs_f64();
        if rank == 0 {
            let d = a.local_data();
            let sum: f64 = d.iter().sum();
            let p = |i: usize| d.get(i).copied().unwrap_or(0.0);
            out(&format!(
                "  result probs: p0 = {}, p1 = {}, p2 = {}, Sum: {}\n",
                fmt_g(p(0)),
                fmt_g(p(1)),
                fmt_g(p(2)),
                fmt_f(sum, 6)
            ))?;
        }
    }
    if o.profile {
        let line = format!(
            "markov rank {rank}/{}: {n} states, fan-in {m}, 3 x {} iterations: switches {:.6} s, compute {:.6} s\n",
            comm.size(),
            o.iters,
            prof.switch_s,
            prof.compute_s
        );
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open("markov_profiling.txt")
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .map_err(|e| ferry::Error::io("write markov_profiling.txt", e))?;
    }
    // Nobody may still be pulling this rank's last large messages when it shuts down.
    comm.finish()
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
        Ok(o) => match run(o) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("markov: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
