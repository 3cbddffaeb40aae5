//! Command-line handling shared by the OSU-style benchmarks (`osu_latency`, `osu_bw`,
//! `osu_allreduce`): the size range, iteration counts and the exit-code convention.

use std::process::ExitCode;

/// Large buffers come from node-shared memory only with `--shared-heap` (like running an
/// MPI benchmark with buffers from `MPI_Alloc_mem`); by default this forwards to the system
/// allocator.
#[global_allocator]
static HEAP: ferry::SharedHeap = ferry::SharedHeap::inactive();

/// Options every OSU-style benchmark takes.
pub struct SizeArgs {
    /// Smallest message size (bytes).
    pub min: usize,
    /// Largest message size (bytes).
    pub max: usize,
    /// Timed iterations per size (`-i`); `None` = the OSU default for the size.
    pub iters: Option<usize>,
    /// Warm-up iterations per size (`-x`); `None` = the OSU default for the size.
    pub warmup: Option<usize>,
}

/// A size with an optional `k`/`K` (KiB) or `m`/`M` (MiB) suffix.
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1 << 10),
        'm' | 'M' => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mult)
}

/// Parses `-m [MIN:]MAX`, `-i ITERS`, `-x WARMUP`, `--shared-heap` and `-h`; every other flag is offered to
/// `extra(flag, next_value)`, which returns whether it took the flag. Sizes below `min_floor`
/// are raised to it (allreduce starts at one `f32`).
pub fn parse(
    name: &str,
    usage_extra: &str,
    min_floor: usize,
    mut extra: impl FnMut(&str, &mut dyn FnMut() -> Result<String, String>) -> Result<bool, String>,
) -> Result<SizeArgs, String> {
    let mut a = SizeArgs {
        min: min_floor,
        max: 1 << 22,
        iters: None,
        warmup: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "-m" => {
                let v = value()?;
                match v.split_once(':') {
                    Some((lo, hi)) => {
                        a.min = parse_size(lo).ok_or(format!("bad size `{lo}`"))?;
                        a.max = parse_size(hi).ok_or(format!("bad size `{hi}`"))?;
                    }
                    None => a.max = parse_size(&v).ok_or(format!("bad size `{v}`"))?,
                }
            }
            "-i" => a.iters = Some(value()?.parse().map_err(|e| format!("-i: {e}"))?),
            "-x" => a.warmup = Some(value()?.parse().map_err(|e| format!("-x: {e}"))?),
            "--shared-heap" => HEAP.set_active(true),
            "-h" | "--help" => {
                return Err(format!(
                "usage: {name} [-m [MIN:]MAX] [-i ITERS] [-x WARMUP] [--shared-heap]{usage_extra}"
            ))
            }
            other => {
                if !extra(other, &mut value)? {
                    return Err(format!("unknown argument `{other}`"));
                }
            }
        }
    }
    a.min = a.min.max(min_floor);
    Ok(a)
}

/// Runs a benchmark: argument errors exit 2, failures exit 1, both printed as `name: error`.
pub fn main<A>(
    name: &str,
    parse: impl FnOnce() -> Result<A, String>,
    run: impl FnOnce(&A) -> ferry::Result<()>,
) -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}
