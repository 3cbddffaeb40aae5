//! A death during a REBUILD's start-up (acceptance 6 of fault-tolerance.md for REBUILD; issue
//! 08 must-show 2): `jac2d_ft` in `FERRY_FT_MODE=rebuild` on 4 ranks, rank 2 SIGKILLed once
//! the run is under way, and a second rank killing itself inside the start-up of the rebuild
//! epoch that replaces it (the test hook `FERRY_TEST_REBUILD_KILL`, at a fixed step), on tcp,
//! shm and hybrid:
//! - a survivor (rank 0) dies once its transport of the epoch is built: the launcher calls
//!   the epoch off, restarts rank 0 and every rank starts the next epoch; the job ends with 4
//!   ranks, exit 0 and the undisturbed run's final line;
//! - the replacement of rank 2 dies before it built anything: the same;
//! - with `--respawn 1` the second death is one too many: every survivor's rebuild fails
//!   naming rank 0 within a second of its death, and the job ends without a hang.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use support::jac2d;
use support::procs::{self, built_tools, Watched};

const BACKENDS: &[&str] = &["tcp", "shm", "hybrid"];
const ARGS: &[&str] = &["-s", "400", "400"];
/// The first victim, killed from outside; the second dies by the hook.
const FIRST: usize = 2;

fn job(ferry: &PathBuf, ex: &PathBuf, backend: &str, respawn: u32, hook: &str) -> Command {
    let mut cmd = procs::rebuild_job(ferry, 4, backend, respawn, ex, ARGS);
    cmd.env("FERRY_TEST_REBUILD_KILL", hook);
    cmd
}

/// The undisturbed run's stdout lines.
fn undisturbed(ferry: &PathBuf, ex: &PathBuf, backend: &str) -> Vec<String> {
    let mut cmd = procs::rebuild_job(ferry, 4, backend, 2, ex, ARGS);
    jac2d::undisturbed(&mut cmd, backend).0
}

struct Run {
    ok: bool,
    stdout: Vec<String>,
    stderr: String,
    /// From the hook's line (just before its SIGKILL) to the last survivor's error line (or
    /// the end of the job, if that came first).
    to_errors: Option<Duration>,
}

/// Runs `cmd`, SIGKILLs rank [`FIRST`] once rank 0 printed its 101st iteration, and waits
/// for the end; with `errors` > 0, also times the hook's death to the `errors`-th error line.
fn run(cmd: Command, what: &str, errors: usize) -> Run {
    let limit = Duration::from_secs(90);
    let mut job = Watched::spawn(cmd);
    assert!(
        job.wait_for(limit, |out, _| out
            .iter()
            .any(|l| l.starts_with("Residuum after 101 iters"))),
        "{what}: the run did not get under way"
    );
    // A scan of /proc may miss a process while many others start and end (the machine's
    // other work): look again before giving up.
    let mut tries = 0;
    while !job.kill(&[FIRST]) {
        tries += 1;
        assert!(
            tries < 200 && job.running(),
            "{what}: rank {FIRST} not found"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut to_errors = None;
    if errors > 0 {
        let hooked = |_: &[String], err: &[String]| err.iter().any(|l| l.contains("test hook"));
        if job.wait_for(limit, hooked) {
            let died = Instant::now();
            let failed = |_: &[String], err: &[String]| {
                err.iter()
                    .filter(|l| l.starts_with("jac2d_ft: error: "))
                    .count()
                    >= errors
            };
            // Returns early when the job ended before its last lines were read: the time
            // is then an upper bound (the errors, counted after the end, came before it).
            job.wait_for(limit, failed);
            to_errors = Some(died.elapsed());
        }
    }
    let end = job.finish(limit, what);
    Run {
        ok: end.ok,
        stdout: end.stdout,
        stderr: end.stderr,
        to_errors,
    }
}

/// Must-show 2 for one run with two deaths, the second in the start-up of epoch 1.
fn judge(reference: &[String], run: &Run, second: usize, ctx: &str) {
    let ctx = format!("{ctx}:\n{}\n{}", run.stdout.join("\n"), run.stderr);
    assert!(run.ok, "the job exits 0; {ctx}");
    jac2d::judge_lines(reference, &run.stdout, &ctx);
    // Epoch 1 was called off for the second death, and epoch 2 (generation 2) started with
    // every rank: one replacement per death, no rank taken for dead that was not.
    assert!(
        run.stderr.contains(&format!(
            "ferry: rank {second} died during the start-up of rebuild epoch 1; the ranks \
             start epoch 2 instead"
        )),
        "{ctx}"
    );
    let recovered = jac2d::count_lines(&run.stderr, "recovered on generation 2 with 4 ranks");
    assert_eq!(recovered, 4, "{ctx}");
    assert!(!run.stderr.contains("generation 3"), "{ctx}");
    let replaced = jac2d::count_lines(&run.stderr, "started a replacement");
    assert_eq!(replaced, 2, "{ctx}");
}

#[test]
fn a_survivor_that_dies_in_a_rebuilds_start_up_is_replaced_in_the_next_epoch() {
    let test = "a_survivor_that_dies_in_a_rebuilds_start_up_is_replaced_in_the_next_epoch";
    let Some((ferry, ex)) = built_tools(test, &["jac2d_ft"]) else {
        return;
    };
    for backend in BACKENDS {
        let reference = undisturbed(&ferry, &ex[0], backend);
        let what = format!("{backend}: rank 0 dies with its epoch-1 transport built");
        let r = run(job(&ferry, &ex[0], backend, 2, "0:1:built"), &what, 0);
        judge(&reference, &r, 0, &what);
    }
}

#[test]
fn a_replacement_that_dies_in_a_rebuilds_start_up_is_replaced_again() {
    let test = "a_replacement_that_dies_in_a_rebuilds_start_up_is_replaced_again";
    let Some((ferry, ex)) = built_tools(test, &["jac2d_ft"]) else {
        return;
    };
    for backend in BACKENDS {
        let reference = undisturbed(&ferry, &ex[0], backend);
        let what = format!("{backend}: rank 2's replacement dies before building epoch 1");
        let hook = format!("{FIRST}:1:answered");
        let r = run(job(&ferry, &ex[0], backend, 2, &hook), &what, 0);
        judge(&reference, &r, FIRST, &what);
    }
}

#[test]
fn a_death_in_a_rebuilds_start_up_beyond_the_budget_fails_every_survivor_at_once() {
    let test = "a_death_in_a_rebuilds_start_up_beyond_the_budget_fails_every_survivor_at_once";
    let Some((ferry, ex)) = built_tools(test, &["jac2d_ft"]) else {
        return;
    };
    for backend in BACKENDS {
        let what = format!("{backend}: --respawn 1, rank 0 dies in epoch 1's start-up");
        // Ranks 1 and 3 and rank 2's replacement report.
        let r = run(job(&ferry, &ex[0], backend, 1, "0:1:answered"), &what, 3);
        let ctx = format!("{what}:\n{}\n{}", r.stdout.join("\n"), r.stderr);
        assert!(!r.ok, "{ctx}");
        let why = "rank 0 cannot be replaced: the launcher says `refused: the job's 1 respawns \
                   (--respawn 1) are used up`";
        let errors: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| l.starts_with("jac2d_ft: error: "))
            .collect();
        assert_eq!(errors.len(), 3, "{ctx}");
        assert!(errors.iter().all(|l| l.contains(why)), "{ctx}");
        for rank in [1, 2, 3] {
            assert!(
                errors
                    .iter()
                    .any(|l| l.starts_with(&format!("jac2d_ft: error: rank {rank}: "))),
                "rank {rank} reports; {ctx}"
            );
        }
        let took = r.to_errors.expect("the hook's line and the errors came");
        eprintln!("{what}: death to the last survivor's error {took:?}");
        assert!(took < Duration::from_secs(1), "{took:?}; {ctx}");
        assert!(
            !r.stdout.iter().any(|l| l.starts_with("Global value sum")),
            "{ctx}"
        );
    }
}
