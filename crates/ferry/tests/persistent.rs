//! Persistent collectives through the launcher on every multi-process backend: seed 004's
//! experiment program (`bcast_gather`, which checks every round's result) for each collective
//! and algorithm, a program that overlaps point-to-point traffic with started collectives
//! (`t_persist`), and a rank that dies between rounds.

mod support;

use std::time::Duration;

use support::procs::{built_tools, job, text};
use support::run_limited;

const BACKENDS: [&str; 3] = ["tcp", "shm", "hybrid"];

/// The `key value` pairs of bcast_gather's result line.
fn field(line: &str, key: &str) -> Option<f64> {
    let w: Vec<&str> = line.split_whitespace().collect();
    w.windows(2)
        .find(|p| p[0] == key)
        .and_then(|p| p[1].parse().ok())
}

#[test]
fn every_persistent_collective_and_algorithm_on_every_backend() {
    let Some((ferry, ex)) = built_tools(
        "every_persistent_collective_and_algorithm_on_every_backend",
        &["bcast_gather"],
    ) else {
        return;
    };
    let n = 8;
    for b in BACKENDS {
        for (op, alg, peers) in [
            ("bcast", "linear", 7.0),
            ("bcast", "binomial", 3.0),
            ("bcast", "chain", 2.0),
            ("gather", "linear", 7.0),
            ("gather", "binomial", 3.0),
            ("gather", "chain", 2.0),
            ("allreduce", "binomial", 3.0),
            ("allreduce", "chain", 2.0),
        ] {
            let (out, _) = run_limited(
                &mut job(
                    &ferry,
                    n,
                    b,
                    false,
                    &ex[0],
                    &[op, alg, "100", "lazy", "20", "2", "persistent"],
                ),
                Duration::from_secs(60),
            );
            let stdout = text(&out.stdout);
            assert!(
                out.status.success(),
                "{b} {op} {alg}: {stdout}{}",
                text(&out.stderr)
            );
            assert!(
                stdout.contains("mode persistent"),
                "{b} {op} {alg}: {stdout}"
            );
            // The most peers any rank talked to: the algorithm's pairs (the summary after
            // the timing is not counted).
            assert_eq!(
                field(&stdout, "peers"),
                Some(peers),
                "{b} {op} {alg}: {stdout}"
            );
        }
    }
}

#[test]
fn started_collectives_leave_the_transport_to_point_to_point() {
    let Some((ferry, ex)) = built_tools(
        "started_collectives_leave_the_transport_to_point_to_point",
        &["t_persist"],
    ) else {
        return;
    };
    for b in BACKENDS {
        for n in [1usize, 2, 5] {
            let (out, _) = run_limited(
                &mut job(&ferry, n, b, false, &ex[0], &["30"]),
                Duration::from_secs(60),
            );
            let stdout = text(&out.stdout);
            assert!(
                out.status.success(),
                "{b} n{n}: {stdout}{}",
                text(&out.stderr)
            );
            assert!(
                stdout.contains("round 29 ok\npersistent ok"),
                "{b} n{n}: {stdout}"
            );
        }
    }
}

#[test]
fn a_dead_peer_fails_every_survivor_and_is_named() {
    let Some((ferry, ex)) = built_tools(
        "a_dead_peer_fails_every_survivor_and_is_named",
        &["t_persist"],
    ) else {
        return;
    };
    for b in BACKENDS {
        let (out, _) = run_limited(
            &mut job(&ferry, 4, b, true, &ex[0], &["5", "2"]),
            Duration::from_secs(90),
        );
        let stdout = text(&out.stdout);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{b}: {stdout}{stderr}");
        assert!(stdout.contains("round 1 ok"), "{b}: {stdout}{stderr}");
        assert!(!stdout.contains("round 2 ok"), "{b}: {stdout}{stderr}");
        // Every survivor fails (none hangs or succeeds); those that waited for rank 2 name it.
        // (On tcp and shm the others name it as the failure behind the peer they lost; on
        // hybrid a survivor that lost a tcp peer which ended on its own error may only hear
        // of that peer's shutdown.)
        let mut named = 0;
        for r in [0, 1, 3] {
            let line = stderr
                .lines()
                .find(|l| l.starts_with(&format!("rank {r}: error:")))
                .unwrap_or_else(|| panic!("{b}: no error from rank {r}: {stderr}"));
            assert!(line.contains("peer failed"), "{b}: {line}");
            let names_2 = line.contains("peer rank 2)") || line.contains("after rank 2 failed");
            if b != "hybrid" {
                assert!(names_2, "{b}: {line}");
            }
            named += usize::from(line.contains("peer rank 2)"));
        }
        assert!(
            named >= 1,
            "{b}: no survivor names rank 2 as its peer: {stderr}"
        );
    }
}

/// The same programs under `mpirun` on the mpi backend (ferry's collectives over MPI
/// point-to-point), when `mpirun` is installed and the examples were built with
/// `--features ferry/mpi` (as `.ci/run` builds them where MPI is installed).
#[test]
fn persistent_collectives_under_mpirun_on_the_mpi_backend() {
    const TEST: &str = "persistent_collectives_under_mpirun_on_the_mpi_backend";
    let Some((_, ex)) = built_tools(TEST, &["t_persist", "bcast_gather"]) else {
        return;
    };
    let Some(mpirun) = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("mpirun"))
            .find(|m| m.exists())
    }) else {
        return support::skip_or_fail(TEST, "mpirun is not installed");
    };
    let runs: [(&std::path::PathBuf, Vec<&str>); 3] = [
        (&ex[0], vec!["20"]),
        (
            &ex[1],
            vec!["gather", "binomial", "100", "lazy", "10", "2", "persistent"],
        ),
        (
            &ex[1],
            vec!["allreduce", "chain", "100", "lazy", "10", "2", "persistent"],
        ),
    ];
    for (prog, args) in runs {
        let mut cmd = std::process::Command::new(&mpirun);
        cmd.args(["--allow-run-as-root", "--oversubscribe", "-n", "4"])
            .arg(prog)
            .args(&args)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("FERRY_BACKEND", "mpi")
            .env_remove("FERRY_LOG");
        let (out, _) = run_limited(&mut cmd, Duration::from_secs(120));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        if stderr.contains("is not available in this build") {
            return support::skip_or_fail(
                TEST,
                "the examples were built without the mpi backend (--features ferry/mpi)",
            );
        }
        assert!(out.status.success(), "{args:?}: {stdout}{stderr}");
        assert!(
            stdout.contains("persistent ok") || stdout.contains("mode persistent"),
            "{args:?}: {stdout}{stderr}"
        );
    }
}
