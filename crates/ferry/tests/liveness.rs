//! Failures by liveness, not elapsed time (issue 05, issue 06 items 3, 7, 9), with real
//! processes started by `ferry run --keep-going`:
//! - a rank that computes longer than `general.failure_timeout_ms` before a barrier is slow,
//!   not dead: the job finishes;
//! - a rank SIGKILLed before the barrier is reported by every survivor, naming that rank (also
//!   survivors that only waited for a rank that ended because of it), within a second;
//! - a low open-file limit (`ulimit -Sn 16`, 16 ranks all-to-all) finishes or fails fast naming
//!   the limit, instead of stalling.
//!
//! Needs `target/<profile>/ferry` and the examples of the same profile (`cargo build --bins
//! --examples`); without them the tests fail under `CI=true` and print why they skip otherwise.
//! [`BACKENDS`] lists the backends the liveness cases run on.

mod support;

use std::process::Command;
use std::time::Duration;
use support::procs::{built_tool, two_nodes_if_hybrid};
use support::run_limited;

/// Backends the liveness cases run on; `hybrid` puts ranks 0-1 and 2-3 on two "nodes", so a
/// death is seen through shared memory by a node mate and through TCP by the other node.
const BACKENDS: &[&str] = &["tcp", "shm", "hybrid"];

fn liveness_run(backend: &str, mode: &str, ms: u64) -> Option<(std::process::Output, Duration)> {
    let (ferry, ex) = built_tool("liveness", "t_liveness")?;
    let mut cmd = Command::new(ferry);
    cmd.env("FERRY_GENERAL_FAILURE_TIMEOUT_MS", "2000").args([
        "run",
        "--keep-going",
        "-n",
        "4",
        "--backend",
        backend,
    ]);
    two_nodes_if_hybrid(&mut cmd, backend, 4);
    cmd.arg(ex).args(["1", mode, &ms.to_string()]);
    Some(run_limited(&mut cmd, Duration::from_secs(60)))
}

#[test]
fn a_rank_slower_than_the_failure_timeout_is_not_dead() {
    for backend in BACKENDS {
        // Rank 1 computes for three failure timeouts before the barrier.
        let Some((out, took)) = liveness_run(backend, "sleep", 6000) else {
            return;
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{backend}: {stdout}\n{stderr}");
        for r in 0..4 {
            assert!(
                stdout.contains(&format!("rank {r} barrier ok")),
                "{backend}: {stdout}\n{stderr}"
            );
        }
        assert!(took >= Duration::from_secs(6), "{backend}: {took:?}");
    }
}

#[test]
fn every_survivor_names_a_killed_rank_within_a_second() {
    for backend in BACKENDS {
        let kill_at = Duration::from_millis(1500);
        let Some((out, took)) = liveness_run(backend, "kill", kill_at.as_millis() as u64) else {
            return;
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{backend}: {stderr}");
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("t_liveness: error"))
            .collect();
        assert_eq!(
            errors.len(),
            3,
            "{backend}: every survivor reports:\n{stderr}"
        );
        for e in &errors {
            // tcp: "... rank 1 failed" (directly or through the goodbye of a rank that ended
            // after it); shm: "rank 1 (pid P) died" (its pidfd) or "after rank 1 failed".
            assert!(
                e.contains("rank 1 failed") || e.contains("rank 1 (pid"),
                "{backend}: the error must name rank 1 as the rank that failed: {e}"
            );
        }
        // Start-up of 4 processes is well under a second even on a loaded host; the rest
        // of the run after the kill is the detection.
        let after_kill = took.saturating_sub(kill_at);
        eprintln!("{backend}: job ended {after_kill:?} after the kill");
        assert!(
            after_kill < Duration::from_millis(2000),
            "{backend}: survivors took {after_kill:?} after the kill (start-up included)\n{stderr}"
        );
    }
}

#[test]
fn sixteen_ranks_under_an_open_file_limit_of_16_finish_or_name_the_limit() {
    let Some((ferry, ex)) = built_tool("liveness", "t_alltoall") else {
        return;
    };
    let script = format!(
        "ulimit -Sn 16 && exec '{}' run -n 16 --backend tcp '{}'",
        ferry.display(),
        ex.display()
    );
    let (out, took) = run_limited(
        Command::new("sh").args(["-c", &script]),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("ulimit -Sn 16, 16 ranks: {took:?}");
    if out.status.success() {
        assert!(
            stdout.contains("alltoall ok: 16 ranks"),
            "{stdout}\n{stderr}"
        );
    } else {
        assert!(
            stderr.contains("too many open files") && stderr.contains("RLIMIT_NOFILE"),
            "a failure must name the cause:\n{stderr}"
        );
    }
    assert!(took < Duration::from_secs(20), "took {took:?}:\n{stderr}");
}
