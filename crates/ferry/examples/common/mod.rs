//! Small helpers shared by the example programs: C-style argument parsing and the error exit
//! convention (message on stderr, exit status 1, never a panic).
#![allow(dead_code)]

use std::io::Write;
use std::process::ExitCode;

/// C `atoi`/`atol`: optional leading whitespace and sign, then digits; anything else ends the
/// number; no digits gives 0 (examples.md conventions). Saturates instead of overflowing.
pub fn atoi(s: &str) -> i64 {
    let s = s.trim_start();
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut v: i64 = 0;
    for b in digits.bytes().take_while(u8::is_ascii_digit) {
        v = v.saturating_mul(10).saturating_add(i64::from(b - b'0'));
    }
    if neg {
        -v
    } else {
        v
    }
}

/// A C-style command line: leading options (`-x...`, only the second character counts, as
/// the LAIK examples read them), then positional arguments.
pub struct CmdLine {
    args: Vec<String>,
    /// Index of the first argument not yet taken as an option or an option's value.
    next: usize,
}

impl CmdLine {
    /// The process's arguments, the program name skipped.
    pub fn from_env() -> CmdLine {
        CmdLine {
            args: std::env::args().collect(),
            next: 1,
        }
    }

    /// The next leading option: `Some(letter)` (its second character, `None` for `-` alone);
    /// the outer `None` at the first argument that does not start with `-`.
    pub fn option(&mut self) -> Option<Option<u8>> {
        let a = self.args.get(self.next).filter(|a| a.starts_with('-'))?;
        let letter = a.as_bytes().get(1).copied();
        self.next += 1;
        Some(letter)
    }

    /// The whole text of the option [`CmdLine::option`] returned last.
    pub fn option_text(&self) -> &str {
        self.args
            .get(self.next.wrapping_sub(1))
            .map_or("", String::as_str)
    }

    /// The argument after an option that takes one (`-x 4`), taken so that the option loop
    /// goes on behind it; `None` at the end of the line.
    pub fn value(&mut self) -> Option<&str> {
        let v = self.args.get(self.next)?;
        self.next += 1;
        Some(v.as_str())
    }

    /// Positional argument `k` (0-based, after the options), if given.
    pub fn positional(&self, k: usize) -> Option<&str> {
        self.args.get(self.next + k).map(String::as_str)
    }

    /// Positional argument `k` as C's `atoi` reads it; 0 when missing.
    pub fn pos(&self, k: usize) -> i64 {
        self.positional(k).map_or(0, atoi)
    }
}

/// `-h`: prints `text` to stdout and ends with status 1, as the LAIK examples do.
pub fn usage(text: &str) -> ExitCode {
    print!("{text}");
    let _ = std::io::stdout().flush();
    ExitCode::FAILURE
}

/// First line of the 2d Jacobi programs (jac2d, jac2d_ft, jac2d_ft_data): grid, iterations,
/// tasks, and the options that change the run.
pub fn jac2d_header(
    size: i64,
    maxiter: i64,
    nprocs: usize,
    no_corners: bool,
    repart: i64,
) -> String {
    let mut h = format!(
        "{size} x {size} cells (mem {:.1} MB), running {maxiter} iterations with {nprocs} tasks",
        0.000016 * size as f64 * size as f64
    );
    if no_corners {
        h.push_str(" (halo without corners)");
    }
    if repart > 0 {
        h.push_str(&format!(
            "\n  with repartitioning every {repart} iterations\n"
        ));
    }
    h
}

/// The residuum line of the Jacobi programs after `iters` iterations.
pub fn residuum_line(iters: i64, res: f64) -> String {
    format!("Residuum after {iters:2} iters: {res:.6}")
}

/// The final line of the Jacobi programs' `-s`.
pub fn value_sum_line(iters: i64, sum: f64) -> String {
    format!("Global value sum after {iters} iterations: {sum:.6}")
}

/// Appends `line` to the file `name` in one write (ranks append to the same file at once):
/// the programs' `-p` profiling output.
pub fn append_line(name: &str, line: &str) -> ferry::Result<()> {
    let what = format!("profiling file {name}");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(name)
        .map_err(|e| ferry::Error::io(what.clone(), e))?;
    f.write_all(line.as_bytes())
        .map_err(|e| ferry::Error::io(what, e))
}

/// Runs an example's body: flushes stdout, and turns an error into a message on stderr
/// (naming the program) and exit status 1.
pub fn main_with(name: &str, body: impl FnOnce() -> ferry::Result<()>) -> ExitCode {
    let r = body();
    let _ = std::io::stdout().flush();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// An error for a bad command line or problem size, reported like any other failure.
pub fn usage_error(detail: impl Into<String>) -> ferry::Error {
    ferry::Error::invalid("arguments", detail)
}

/// C's `%g`: 6 significant digits, trailing zeros removed, exponent form outside 1e-4..1e6.
pub fn fmt_g(v: f64) -> String {
    const P: i32 = 6;
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    if !v.is_finite() {
        return if v.is_nan() {
            if v.is_sign_negative() { "-nan" } else { "nan" }.to_string()
        } else if v > 0.0 {
            "inf".to_string()
        } else {
            "-inf".to_string()
        };
    }
    let e = format!("{:.*e}", (P - 1) as usize, v);
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let x: i32 = exp.parse().unwrap_or(0);
    let strip = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if (-4..P).contains(&x) {
        strip(&format!("{:.*}", (P - 1 - x) as usize, v))
    } else {
        format!(
            "{}e{}{:02}",
            strip(mant),
            if x < 0 { '-' } else { '+' },
            x.abs()
        )
    }
}

/// C's `%.<prec>f`, with glibc's spelling of non-finite values (`nan`, `-nan`, `inf`, `-inf`).
pub fn fmt_f(v: f64, prec: usize) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    format!("{v:.prec$}")
}

pub fn out(text: &str) -> ferry::Result<()> {
    let mut so = std::io::stdout().lock();
    so.write_all(text.as_bytes())
        .and_then(|_| so.flush())
        .map_err(|e| ferry::Error::io("write stdout", e))
}

/// A partitioner for graph iterations (markov, markov2): every task gets the states its own
/// states are linked to — `adjacency` holds `k` neighbours per state (in-edge sources for a
/// pull, out-edge targets for a push) — as merged 1d ranges of `[0, n)`. With `single` the
/// neighbour list is built index by index, sorted and merged (LAIK's single-index hint);
/// otherwise through a mark array. All ranges of a task share one allocation (mapping group 1)
/// unless `compact`, where each range gets its own.
pub fn neighbour_partitioner(
    name: &'static str,
    n: usize,
    k: usize,
    adjacency: std::sync::Arc<Vec<u32>>,
    own: ferry::data::Partitioning,
    single: bool,
    compact: bool,
) -> ferry::data::Partitioner {
    use ferry::data::{Partitioner, PartitionerCtx, Range};
    Partitioner::custom(name, move |ctx: &mut PartitionerCtx<'_>| {
        let group = if compact { 0 } else { 1 };
        let mut mark = vec![false; if single { 0 } else { n }];
        let mut list: Vec<u32> = Vec::new();
        for task in 0..ctx.ntasks() {
            let mut runs: Vec<(i64, i64)> = Vec::new();
            let mine: Vec<(i64, i64)> = own
                .task_ranges(task)
                .iter()
                .map(|tr| (tr.range.from()[0], tr.range.to()[0]))
                .collect();
            if single {
                list.clear();
                for &(a, b) in &mine {
                    for i in a..b {
                        list.extend_from_slice(&adjacency[i as usize * k..(i as usize + 1) * k]);
                    }
                }
                list.sort_unstable();
                list.dedup();
                for &x in &list {
                    let x = i64::from(x);
                    match runs.last_mut() {
                        Some(r) if r.1 == x => r.1 = x + 1,
                        _ => runs.push((x, x + 1)),
                    }
                }
            } else {
                mark.iter_mut().for_each(|b| *b = false);
                for &(a, b) in &mine {
                    for i in a..b {
                        for &s in &adjacency[i as usize * k..(i as usize + 1) * k] {
                            mark[s as usize] = true;
                        }
                    }
                }
                let mut i = 0;
                while i < n {
                    if mark[i] {
                        let start = i;
                        while i < n && mark[i] {
                            i += 1;
                        }
                        runs.push((start as i64, i as i64));
                    } else {
                        i += 1;
                    }
                }
            }
            for (a, b) in runs {
                ctx.append(task, Range::new1(a, b), group)?;
            }
        }
        Ok(())
    })
}

/// Ends this process by a real SIGKILL (through the `kill` utility), as a crashed rank ends:
/// no exit handlers, no goodbye to the peers. Flushes stdout first so that the lines printed
/// so far reach the launcher. Exits with 99 should the signal not come within a minute.
pub fn die_by_sigkill() -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &std::process::id().to_string()])
        .status();
    std::thread::sleep(std::time::Duration::from_secs(60));
    std::process::exit(99)
}

/// Prints `line` on stdout at once (not at exit): a rank that dies later keeps its lines.
pub fn say(line: String) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}
