//! Sessions, process sets and MPMD launches (X1-X4, issue 10 must-show 4), through the
//! launcher: t_sessions (sets, errors for unknown names and indices, communicators from groups
//! and tags, isolation between sessions and tags, finalize and re-create) and, for MPMD,
//! t_sessions beside a different program, t_mpmd_peer.
//!
//! They need `target/<profile>/ferry` and the examples (`cargo build --release --bins
//! --examples`); without them each test skips, or fails when `CI=true`.

mod support;

use std::process::Command;
use std::time::Duration;

use support::procs::{built_tools, text};
use support::{run_limited, skip_or_fail};

fn has(out: &str, line: &str) -> bool {
    out.lines().any(|l| l == line)
}

#[test]
fn sessions_sets_and_isolation() {
    let Some((ferry, ex)) = built_tools("sessions_sets_and_isolation", &["t_sessions"]) else {
        return;
    };
    for b in ["tcp", "shm"] {
        let (out, _) = run_limited(
            Command::new(&ferry)
                .args(["run", "-n", "4", "--backend", b, "--pset", "odd=1,3"])
                .arg(&ex[0])
                .env("FERRY_STATS", "1"),
            Duration::from_secs(60),
        );
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{b}: {stdout}{}", text(&out.stderr));
        for w in 0..4 {
            assert!(
                has(
                    &stdout,
                    &format!("rank {w}: 3 sets: ferry://world(4) ferry://self(1) odd(2)")
                ),
                "{b}: rank {w}'s sets: {stdout}"
            );
        }
        // The transport is closed (and statistics printed) by the exit hook.
        let stderr = text(&out.stderr);
        for w in 0..4 {
            assert!(
                stderr.contains(&format!("ferry stats rank {w} ({b})")),
                "{b}: rank {w} printed no statistics at exit: {stderr}"
            );
        }
        for want in [
            "no process set is called `no-such-set` (known: ferry://world, ferry://self, odd)",
            "index 3 is out of range: this process sees 3 sets (0 to 2)",
            "world: 4 ranks, sum of ranks 6",
            "ferry://world through the Communicator trait: left neighbour 3, broadcast sum 10",
            "rank 1: isolation ok: sessions and tags kept apart",
            "its session was finalized",
            "rank 0: new session after finalizing all: 4 ranks",
        ] {
            assert!(stdout.contains(want), "{b}: missing `{want}`: {stdout}");
        }
    }
}

#[test]
fn mpmd_launch_of_two_programs_each_sees_its_set_and_the_world() {
    let Some((ferry, ex)) = built_tools(
        "mpmd_launch_of_two_programs_each_sees_its_set_and_the_world",
        &["t_sessions", "t_mpmd_peer"],
    ) else {
        return;
    };
    for b in ["tcp", "shm"] {
        let (out, _) = run_limited(
            Command::new(&ferry)
                .args(["run", "-n", "2", "--backend", b])
                .arg(&ex[0])
                .args([":", "-n", "3"])
                .arg(&ex[1]),
            Duration::from_secs(60),
        );
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{b}: {stdout}{}", text(&out.stderr));
        let sets = "4 sets: ferry://world(5) ferry://self(1) ferry://app/0(2) ferry://app/1(3)";
        for w in 0..2 {
            assert!(has(&stdout, &format!("rank {w}: {sets}")), "{b}: {stdout}");
            assert!(
                has(
                    &stdout,
                    &format!("rank {w}: ferry://app/0 rank {w} of 2, sum of world ranks 1")
                ),
                "{b}: {stdout}"
            );
        }
        for w in 2..5 {
            assert!(has(&stdout, &format!("peer {w}: {sets}")), "{b}: {stdout}");
            assert!(
                has(
                    &stdout,
                    &format!(
                        "peer {w}: ferry://app/1 rank {} of 3, sum of world ranks 9",
                        w - 2
                    )
                ),
                "{b}: {stdout}"
            );
        }
        assert!(
            has(&stdout, "world: 5 ranks, sum of ranks 10"),
            "{b}: {stdout}"
        );
        assert!(
            stdout.contains(
                "rank 0: send outside ferry://app/0: rank 0: send: invalid argument: rank 2 is \
                 not in communicator `app` over ferry://app/0 of 2 ranks"
            ),
            "{b}: the other application must be out of reach: {stdout}"
        );
    }
}

#[test]
fn bad_pset_syntax_and_bad_mpmd_counts_are_usage_errors() {
    let Some((ferry, _)) = built_tools("bad_pset_syntax_and_bad_mpmd_counts_are_usage_errors", &[])
    else {
        return;
    };
    for (args, want) in [
        (&["--pset", "left", "true"][..], "expected NAME=RANKS"),
        (
            &["--pset", "x=0-9", "true"][..],
            "rank 9 is out of range for 4 ranks",
        ),
        (&["--pset", "x=2-1", "true"][..], "runs backwards"),
        (&["--pset", "x=a", "true"][..], "is not a rank or a range"),
        (
            &["--pset", "x=0", "--pset", "x=1", "true"][..],
            "defined twice",
        ),
        (&["--pset", "ferry://world=0", "true"][..], "built in"),
        (
            &["true", ":", "-n", "x", "true"][..],
            "is not a number of ranks",
        ),
        (
            &["true", ":", "-n", "2"][..],
            "application 1 has no program",
        ),
    ] {
        let (out, _) = run_limited(
            Command::new(&ferry).args(["run", "-n", "4"]).args(args),
            Duration::from_secs(30),
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: want `{want}`: {stderr}");
    }
}

/// Under `mpirun` with two application contexts the sets `ferry://app/K` come from Open
/// MPI's variables (tcp backend through discovery, so the MPI feature is not needed).
#[test]
fn mpirun_mpmd_launch_derives_the_application_sets() {
    let test = "mpirun_mpmd_launch_derives_the_application_sets";
    let Some((_, ex)) = built_tools(test, &["t_sessions", "t_mpmd_peer"]) else {
        return;
    };
    let mpirun = ["mpirun.openmpi", "mpirun"].into_iter().find(|m| {
        Command::new(m)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let Some(mpirun) = mpirun else {
        return skip_or_fail(test, "mpirun (Open MPI) not found");
    };
    let (out, _) = run_limited(
        Command::new(mpirun)
            .args(["--allow-run-as-root", "--oversubscribe", "-n", "2"])
            .arg(&ex[0])
            .args([":", "-n", "3"])
            .arg(&ex[1])
            .env("FERRY_BACKEND", "tcp")
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
        Duration::from_secs(120),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for w in 2..5 {
        assert!(
            has(
                &stdout,
                &format!(
                    "peer {w}: ferry://app/1 rank {} of 3, sum of world ranks 9",
                    w - 2
                )
            ),
            "{stdout}"
        );
    }
    assert!(
        has(
            &stdout,
            "rank 1: ferry://app/0 rank 1 of 2, sum of world ranks 1"
        ),
        "{stdout}"
    );
    assert!(has(&stdout, "world: 5 ranks, sum of ranks 10"), "{stdout}");
}
