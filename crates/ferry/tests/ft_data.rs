//! The data layer on a shrunk fault-tolerant communicator, with real processes under
//! `ferry run --keep-going` and a rank SIGKILLed through its pid, on tcp, shm and hybrid:
//! - `t_ft_data` (issue 07): a `ferry_data` container switched between two partitionings is
//!   carried over the shrink without a checkpoint (`ferry::ft::data::salvage`): every survivor
//!   reports the same failed rank and the same number of lost indexes, every value it kept is
//!   right, and the job goes on over the survivors to the end;
//! - `jac2d_ft_data` (issues 07 and 08): the 2d Jacobi on `ferry_data` containers with
//!   buddy checkpoints (`ferry::ft::data::Checkpoints`) survives a kill with the undisturbed
//!   run's final line and only undisturbed `Residuum` lines; in `FERRY_FT_MODE=rebuild` under
//!   `ferry run --respawn 1` the killed rank is replaced, gets its rows and its buddy copy back
//!   from its neighbours, and the job ends on 4 ranks with the undisturbed output.

mod support;

use std::process::Command;
use std::time::Duration;

use support::procs::{built_tools, job, rebuild_job, Watched};
use support::{jac2d, run_limited};

const BACKENDS: &[&str] = &["tcp", "shm", "hybrid"];

struct KillRun {
    ok: bool,
    stdout: Vec<String>,
    stderr: String,
    killed: bool,
}

/// Runs `cmd` (a job of 4 ranks) and SIGKILLs rank `victim` once `ready` holds for the
/// stdout lines so far and `delay` passed after that.
fn run_with_kill(
    cmd: Command,
    what: &str,
    victim: usize,
    ready: &dyn Fn(&[String]) -> bool,
    delay: Duration,
) -> KillRun {
    let limit = Duration::from_secs(60);
    let mut run = Watched::spawn(cmd);
    let pids = run.rank_pids(4, Duration::from_secs(20));
    assert_eq!(pids.len(), 4, "{what}: not every rank started");
    let seen = run.wait_for(limit, |out, _| ready(out));
    assert!(seen || !run.running(), "{what}: never ready to kill");
    std::thread::sleep(delay);
    let killed = run.kill(&[victim]);
    let end = run.finish(limit, &format!("{what} after rank {victim} was killed"));
    KillRun {
        ok: end.ok,
        stdout: end.stdout,
        stderr: end.stderr,
        killed,
    }
}

/// The final line of a disturbed run equals the undisturbed one's (and comes once, last),
/// and every `Residuum` line is one of the undisturbed run's (a rollback may repeat one).
fn judge_lines(reference: &[String], stdout: &[String], ctx: &str) {
    jac2d::judge_lines(reference, stdout, ctx);
    assert_eq!(stdout.last(), reference.last(), "{ctx}");
}

/// The text after `rank W: ` of the lines starting with it whose rest starts with `what`.
fn rest_of(lines: &[String], what: &str) -> Vec<(usize, String)> {
    lines
        .iter()
        .filter_map(|l| {
            let l = l.strip_prefix("rank ")?;
            let (w, rest) = l.split_once(": ")?;
            rest.starts_with(what)
                .then(|| (w.parse().ok(), rest.to_string()))
                .and_then(|(w, r)| Some((w?, r)))
        })
        .collect()
}

#[test]
fn containers_are_carried_over_a_shrink_and_the_lost_part_is_named() {
    let test = "containers_are_carried_over_a_shrink_and_the_lost_part_is_named";
    let Some((ferry, ex)) = built_tools(test, &["t_ft_data"]) else {
        return;
    };
    // Rank 0 included; the kill lands within the first few hundred of the 1500 rounds, once
    // every rank is past start-up (a death before is a start-up failure, not a shrink).
    let all_running = |out: &[String]| rest_of(out, "running").len() == 4;
    for (backend, victim) in BACKENDS.iter().zip([0, 2, 1]) {
        let run = run_with_kill(
            job(&ferry, 4, backend, true, &ex[0], &["1500"]),
            &format!("{backend}: t_ft_data"),
            victim,
            &all_running,
            Duration::from_millis(300),
        );
        let ctx = format!(
            "{backend}, rank {victim} killed:\n{}\n{}",
            run.stdout.join("\n"),
            run.stderr
        );
        assert!(run.killed, "the victim ran; {ctx}");
        let survivors: Vec<usize> = (0..4).filter(|&r| r != victim).collect();
        let salvaged = rest_of(&run.stdout, "salvage ");
        let mut who: Vec<usize> = salvaged.iter().map(|(w, _)| *w).collect();
        who.sort_unstable();
        assert_eq!(who, survivors, "every survivor salvaged once; {ctx}");
        let first = &salvaged[0].1;
        assert!(
            salvaged.iter().all(|(_, l)| l == first),
            "the same salvage line everywhere; {ctx}"
        );
        let prefix = format!("salvage 1: failed [{victim}] lost ");
        let lost: u64 = first
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(" of 2400, kept values ok"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected salvage line `{first}`; {ctx}"));
        // The victim held 600 indexes in either partitioning; survivors that had not yet
        // passed on values still hold them, those that had no longer do.
        assert!((1..=1800).contains(&lost), "lost {lost}; {ctx}");
        let done = rest_of(&run.stdout, "done ");
        assert_eq!(done.len(), 3, "{ctx}");
        assert!(
            done.iter()
                .all(|(_, l)| l == "done 1500 rounds, size 3, values ok"),
            "{ctx}"
        );
        assert!(
            !run.stderr.contains("exited with code") && !run.stderr.contains("error"),
            "every survivor exits 0; {ctx}"
        );
    }
}

#[test]
fn jac2d_on_recoverable_containers_survives_a_killed_rank_on_every_backend() {
    let test = "jac2d_on_recoverable_containers_survives_a_killed_rank_on_every_backend";
    let Some((ferry, ex)) = built_tools(test, &["jac2d_ft_data", "jac2d_ft"]) else {
        return;
    };
    let args = ["-s", "1000", "400"];
    for (backend, victim) in BACKENDS.iter().zip([0, 1, 3]) {
        let (reference, _) =
            jac2d::undisturbed(&mut job(&ferry, 4, backend, false, &ex[0], &args), backend);
        // The same lines as jac2d_ft (row blocks without ferry-data).
        let (plain, _) = run_limited(
            &mut job(&ferry, 4, backend, false, &ex[1], &args),
            Duration::from_secs(60),
        );
        assert_eq!(
            String::from_utf8_lossy(&plain.stdout)
                .lines()
                .collect::<Vec<_>>(),
            reference,
            "{backend}: jac2d_ft_data prints what jac2d_ft prints"
        );
        // Killed after iteration 101's residuum, well before the end (400).
        let run = run_with_kill(
            job(&ferry, 4, backend, true, &ex[0], &args),
            &format!("{backend}: jac2d_ft_data"),
            victim,
            &|l| l.iter().any(|l| l.starts_with("Residuum after 101 ")),
            Duration::ZERO,
        );
        let ctx = format!(
            "{backend}, rank {victim} killed:\n{}\n{}",
            run.stdout.join("\n"),
            run.stderr
        );
        assert!(run.killed, "the victim ran; {ctx}");
        judge_lines(&reference, &run.stdout, &ctx);
        let recovered = jac2d::count_lines(&run.stderr, "recovered on generation 1 with 3 ranks");
        assert_eq!(recovered, 3, "every survivor recovered; {ctx}");
        assert!(
            !run.stderr.contains("exited with code") && !run.stderr.contains("error"),
            "every survivor exits 0; {ctx}"
        );
    }
}

#[test]
fn jac2d_on_recoverable_containers_rebuilds_a_killed_rank_on_every_backend() {
    let test = "jac2d_on_recoverable_containers_rebuilds_a_killed_rank_on_every_backend";
    let Some((ferry, ex)) = built_tools(test, &["jac2d_ft_data"]) else {
        return;
    };
    let args = ["-s", "1000", "400"];
    // Each rank holds its 250 rows of 1000 values and its buddy's: 2 x 2 MB.
    let held = "4000000 bytes held for recovery)";
    for (backend, victim) in BACKENDS.iter().zip([0, 2, 3]) {
        let (reference, _) = jac2d::undisturbed(
            &mut rebuild_job(&ferry, 4, backend, 1, &ex[0], &args),
            backend,
        );
        // Killed after iteration 101's residuum, well before the end (400); one respawn is
        // all the run needs.
        let run = run_with_kill(
            rebuild_job(&ferry, 4, backend, 1, &ex[0], &args),
            &format!("{backend}: jac2d_ft_data in REBUILD mode"),
            victim,
            &|l| l.iter().any(|l| l.starts_with("Residuum after 101 ")),
            Duration::ZERO,
        );
        let ctx = format!(
            "{backend}, rank {victim} killed:\n{}\n{}",
            run.stdout.join("\n"),
            run.stderr
        );
        assert!(run.killed, "the victim ran; {ctx}");
        assert!(run.ok, "the job exits 0; {ctx}");
        assert!(
            run.stderr.contains(&format!(
                "rank {victim} was killed by signal 9 (SIGKILL); started a replacement"
            )),
            "{ctx}"
        );
        judge_lines(&reference, &run.stdout, &ctx);
        // Every rank, the replacement too, rolled back to the same checkpoint on 4 ranks and
        // holds two copies again (its own part and its buddy's).
        let recovered: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.contains("recovered on generation 1 with 4 ranks"))
            .collect();
        assert_eq!(recovered.len(), 4, "{ctx}");
        fn to(l: &str) -> Option<&str> {
            l.split("rolled back to iteration ")
                .nth(1)?
                .split(' ')
                .next()
        }
        assert!(
            recovered
                .iter()
                .all(|l| to(l).is_some() && to(l) == to(recovered[0]) && l.ends_with(held)),
            "{ctx}"
        );
        assert!(!run.stderr.contains("error"), "{ctx}");
    }
}
