//! Where the conformance cases are and how one run of a case is judged, shared by the suites
//! that start the cases through different launchers (`conformance.rs`: `ferry run` and
//! `mpirun`; `slurm.rs`: `srun`). The expected outputs are read at run time, never copied.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::cases::{compare, first_difference, parse_cases, split_lines, Case, RunResult};

/// Outcome of one case on one backend.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
}

/// The workspace root (the conformance data lives beside it, in `../shared`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// `../shared/conformance`, then the directories of `FERRY_CONFORMANCE_DIRS` (comma-separated,
/// relative to the workspace root unless absolute).
pub fn case_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![root.join("../shared/conformance")];
    if let Ok(extra) = std::env::var("FERRY_CONFORMANCE_DIRS") {
        for d in extra.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            let p = PathBuf::from(d);
            dirs.push(if p.is_absolute() { p } else { root.join(p) });
        }
    }
    dirs
}

/// Reads every case table of [`case_dirs`]; the tables that are missing come back in the second
/// list, a malformed one is an error.
pub fn load_cases(root: &Path) -> Result<(Vec<Case>, Vec<PathBuf>), String> {
    let mut cases = Vec::new();
    let mut missing = Vec::new();
    for dir in case_dirs(root) {
        let tsv = dir.join("cases.tsv");
        match std::fs::read_to_string(&tsv) {
            Ok(text) => cases.extend(parse_cases(&dir, &text)?),
            Err(_) => missing.push(tsv),
        }
    }
    Ok((cases, missing))
}

/// Judges a finished run of `case`: exit status (`ping_pong-1` must exit 1, every other case
/// 0) and stdout in the case's compare mode against its expected file.
pub fn judge(case: &Case, r: &RunResult, timeout: Duration) -> Outcome {
    let expected = match std::fs::read(&case.expected) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => return Outcome::Fail(format!("cannot read {}: {e}", case.expected.display())),
    };
    // The ranks' own first complaint says more than the launcher's summary line.
    let lines: Vec<&str> = r.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let last_err = lines
        .iter()
        .find(|l| {
            !l.starts_with("ferry: ")
                && !l.starts_with("srun: ")
                && !l.contains(" DEBUG ")
                && !l.contains(" INFO ")
        })
        .or(lines.last())
        .copied()
        .unwrap_or("")
        .to_string();
    if r.timed_out {
        return Outcome::Fail(format!("timeout after {timeout:?}; stderr: {last_err}"));
    }
    let want = if case.id == "ping_pong-1" { 1 } else { 0 };
    if r.status != Some(want) {
        return Outcome::Fail(format!(
            "exit status {:?}, expected {want}; stderr: {last_err}",
            r.status
        ));
    }
    if !compare(&case.mode, &r.stdout, &expected) {
        let shown = if case.mode == "sorted" {
            let mut l = split_lines(&r.stdout);
            l.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            let mut s = l.join("\n");
            s.push('\n');
            s
        } else {
            r.stdout.clone()
        };
        return Outcome::Fail(format!(
            "stdout differs ({}): {}; stderr: {last_err}",
            case.mode,
            first_difference(&shown, &expected)
        ));
    }
    Outcome::Pass
}

/// Runs every (case, backend) of `work` through `run` on `parallel` threads, printing one
/// line per run (`{label}: id backend seconds outcome`). A backend whose run was skipped as
/// "not built" is not tried again: its later cases are skipped with `not_built(backend)`.
pub fn run_parallel(
    label: &str,
    work: &[(Case, String)],
    parallel: usize,
    not_built: impl Fn(&str) -> String + Sync,
    run: impl Fn(&Case, &str) -> Outcome + Sync,
) -> Vec<(Case, String, Outcome)> {
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    let unavailable = Mutex::new(BTreeSet::<String>::new());
    std::thread::scope(|s| {
        for _ in 0..parallel {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some((case, backend)) = work.get(i) else {
                    break;
                };
                let outcome = if unavailable.lock().unwrap().contains(backend) {
                    Outcome::Skip(not_built(backend))
                } else {
                    let t = Instant::now();
                    let o = run(case, backend);
                    eprintln!(
                        "{label}: {:<28} {:<8} {:>6.2}s {}",
                        case.id,
                        backend,
                        t.elapsed().as_secs_f64(),
                        match &o {
                            Outcome::Pass => "ok".to_string(),
                            Outcome::Fail(w) => format!("FAIL {w}"),
                            Outcome::Skip(w) => format!("skip {w}"),
                        }
                    );
                    if matches!(&o, Outcome::Skip(w) if w.contains("not built")) {
                        unavailable.lock().unwrap().insert(backend.clone());
                    }
                    o
                };
                done.lock()
                    .unwrap()
                    .push((case.clone(), backend.clone(), outcome));
            });
        }
    });
    done.into_inner().unwrap()
}
