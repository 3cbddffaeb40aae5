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
