//! Helpers shared by the multi-process test files: where the built binaries are, and running
//! a command with a deadline so that a broken launcher cannot hang the suite.
#![allow(dead_code)]

pub mod cases;
pub mod jac2d;
pub mod pids;
pub mod procs;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `target/<profile>`, found from this test binary (`target/<profile>/deps/launcher-*`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("profile dir").to_path_buf()
}

/// Runs `cmd` to completion with its output captured; kills it and fails the test if it takes
/// longer than `limit` (so a broken launcher cannot hang the suite).
pub fn run_limited(cmd: &mut Command, limit: Duration) -> (Output, Duration) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().expect("spawn ferry");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        out.read_to_end(&mut v).unwrap();
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        err.read_to_end(&mut v).unwrap();
        v
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let elapsed = start.elapsed();
    let output = Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    };
    (output, elapsed)
}

/// True when the suite runs in CI (`CI=true`, as CI services and `.ci/run`'s callers set it).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A test whose inputs or tools are missing: in CI it fails, since a green run must mean the
/// suite was checked; elsewhere it says on stderr (not captured by the harness) that it skipped
/// and why. Returns so that the caller can `return skip_or_fail(..)`.
pub fn skip_or_fail(test: &str, reason: &str) {
    if in_ci() {
        panic!("{test}: cannot run: {reason} (CI=true: a suite that cannot run fails)");
    }
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{test}: SKIPPED: {reason}");
}

/// Judging conformance runs of any launcher against the expected outputs.
pub mod verdict;
