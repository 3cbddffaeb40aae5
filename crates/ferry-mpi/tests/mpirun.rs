//! Runs the `mpi_selftest` example under `mpirun` (Open MPI or MPICH). Skips with a message when
//! no `mpirun` is on the PATH, and fails instead when `CI=true`.

mod support;

use std::path::PathBuf;
use std::process::Command;

/// The example binary next to this test binary (cargo builds examples for `cargo test`).
fn selftest() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(|p| p.parent()).expect("target dir");
    dir.join("examples").join("mpi_selftest")
}

fn mpirun() -> Option<Command> {
    let found = Command::new("mpirun").arg("--version").output().is_ok();
    if !found {
        support::skip_or_fail("mpirun", "no `mpirun` on PATH (install openmpi-bin)");
        return None;
    }
    let mut cmd = Command::new("mpirun");
    // Open MPI refuses root and more ranks than cores unless told; CI runs as root on 2 cores.
    let version = Command::new("mpirun").arg("--version").output().ok()?;
    if String::from_utf8_lossy(&version.stdout).contains("Open MPI") {
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .arg("--oversubscribe");
    }
    Some(cmd)
}

fn run(n: usize, mode: &str, env: &[(&str, &str)]) -> Option<(bool, String, String)> {
    let mut cmd = mpirun()?;
    cmd.arg("-n").arg(n.to_string()).arg(selftest()).arg(mode);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run mpirun");
    Some((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[test]
fn exchanges_under_mpirun() {
    for n in [1, 2, 4] {
        let Some((ok, out, err)) = run(n, "check", &[]) else {
            return;
        };
        assert!(ok, "{n} ranks failed:\n{out}\n{err}");
        for check in [
            "ok ring",
            "ok flow-order",
            "ok hashed-reorder",
            "ok hashed-reprobe",
            "ok self",
            "ok length-mismatch",
            "ok split",
            "ok no-probe",
            "ok short-sends",
            "ok batched-tests",
            "ok quiet-passes",
            "ok batched-sends",
            "ok posted-ahead",
            "ok bad-peer",
            "ok new-tags",
        ] {
            assert_eq!(
                out.lines().filter(|l| l.starts_with(check)).count(),
                n,
                "`{check}` not printed by every one of {n} ranks:\n{out}\n{err}"
            );
        }
        // One host: every rank is on node 0.
        assert!(out.contains(&format!("ok nodes {:?}", vec![0; n])), "{out}");
        // ferry initialised MPI, so it works on MPI_COMM_WORLD itself.
        assert_eq!(
            out.lines().filter(|l| *l == "ok comm world").count(),
            n,
            "{out}\n{err}"
        );
    }
    // With private duplicates (forced, or because the program initialised MPI itself) every
    // check passes too.
    for env in [("FERRY_MPI_DUP_COMM", "1"), ("MPI_SELFTEST_PREINIT", "1")] {
        let Some((ok, out, err)) = run(2, "check", &[env]) else {
            return;
        };
        assert!(ok, "2 ranks with {env:?} failed:\n{out}\n{err}");
        assert!(out.contains("ok nodes [0, 0]"), "{out}");
        assert_eq!(
            out.lines().filter(|l| *l == "ok comm duplicate").count(),
            2,
            "{env:?}:\n{out}\n{err}"
        );
    }
    // Under an operation timeout short sends stay timed (MPI_Isend and the exchange).
    let env = [("FERRY_GENERAL_OPERATION_TIMEOUT_MS", "120000")];
    let Some((ok, out, err)) = run(2, "check", &env) else {
        return;
    };
    assert!(ok, "2 ranks with a timeout failed:\n{out}\n{err}");
    assert_eq!(
        out.lines().filter(|l| *l == "ok short-sends: 0").count(),
        2,
        "{out}\n{err}"
    );
}

/// MPI runs at `MPI_THREAD_SINGLE` by default (Open MPI locks its matching at any higher
/// level), so a call from another thread is refused with an error naming the setting and the
/// transport stays usable; `FERRY_MPI_THREAD_LEVEL=serialized` allows it, and a value that is
/// no level fails start-up naming the variable.
#[test]
fn thread_level_is_single_unless_asked_and_other_threads_are_refused() {
    let Some((ok, out, err)) = run(2, "threads", &[]) else {
        return;
    };
    assert!(ok, "default level failed:\n{out}\n{err}");
    for line in [
        "thread-level single",
        "ok wrong-thread refused",
        "ok threads",
    ] {
        assert_eq!(
            out.lines().filter(|l| l.starts_with(line)).count(),
            2,
            "`{line}` not printed by both ranks:\n{out}\n{err}"
        );
    }
    let Some((ok, out, err)) = run(2, "threads", &[("FERRY_MPI_THREAD_LEVEL", "serialized")])
    else {
        return;
    };
    assert!(ok, "serialized failed:\n{out}\n{err}");
    for line in [
        "thread-level serialized",
        "ok other-thread send",
        "ok threads",
    ] {
        assert_eq!(
            out.lines().filter(|l| l.starts_with(line)).count(),
            2,
            "`{line}` not printed by both ranks:\n{out}\n{err}"
        );
    }
    let Some((ok, out, err)) = run(1, "threads", &[("FERRY_MPI_THREAD_LEVEL", "many")]) else {
        return;
    };
    assert!(!ok, "an unknown level was accepted:\n{out}\n{err}");
    assert!(err.contains("FERRY_MPI_THREAD_LEVEL"), "{err}");
}

/// Sends leave from the caller's memory (the default): ranks that send 4 MiB to each other
/// (and to themselves) before receiving, and a send whose receiver first waits for an
/// unrelated message, must complete. Without the draining of unasked-for messages this hangs;
/// the deadline turns a hang into a failure.
#[test]
fn large_sends_from_caller_memory_never_wait_for_unrelated_receives() {
    for n in [2, 3] {
        let Some(mut cmd) = mpirun() else {
            return;
        };
        cmd.arg("-n")
            .arg(n.to_string())
            .arg(selftest())
            .arg("crossing")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("run mpirun");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for mpirun") {
                break Some(status);
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let out = child.wait_with_output().expect("mpirun output");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let Some(status) = status else {
            panic!("{n} ranks: still running after 60 s (deadlock):\n{stdout}\n{stderr}");
        };
        assert!(status.success(), "{n} ranks:\n{stdout}\n{stderr}");
        let oks: Vec<&str> = stdout
            .lines()
            .filter(|l| l.starts_with("ok crossing"))
            .collect();
        assert_eq!(oks.len(), n, "{stdout}\n{stderr}");
        // The self message at least was drained on every rank, and the 4 MiB messages moved
        // without a copy on the sending side.
        for line in oks {
            assert!(!line.contains(" 0 messages drained"), "{line}");
            assert!(!line.contains(" 0 moved without a copy"), "{line}");
        }
    }
}

#[test]
fn missing_message_times_out_instead_of_hanging() {
    let Some((ok, out, err)) = run(2, "timeout", &[("FERRY_GENERAL_TIMEOUT_MS", "300")]) else {
        return;
    };
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("ok timeout"), "{out}\n{err}");
    assert!(out.contains("rank 0") && out.contains("rank 1"), "{out}");
}

#[test]
fn random_all_to_all_rounds_keep_every_byte_and_flow_order() {
    random_all_to_all_rounds("100");
}

#[test]
#[ignore = "stress: 5000 rounds per configuration; run with --include-ignored"]
fn random_all_to_all_stress() {
    random_all_to_all_rounds("5000");
}

fn random_all_to_all_rounds(rounds: &str) {
    for (n, zero_copy_sends) in [(3, "0"), (4, "0"), (4, "1")] {
        let Some(mut cmd) = mpirun() else {
            return;
        };
        let out = cmd
            .env("FERRY_MPI_ZERO_COPY_SENDS", zero_copy_sends)
            .arg("-n")
            .arg(n.to_string())
            .arg(selftest())
            .args(["stress", rounds])
            .output()
            .expect("run mpirun");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{n} ranks:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            stdout
                .lines()
                .filter(|l| l.starts_with("ok stress"))
                .count(),
            n,
            "{stdout}"
        );
    }
}

/// With zero-copy sends, an exchange that times out while MPI still reads the caller's buffer
/// returns only after MPI is done with it (here: when the receiver, 1.5 s late, takes it).
#[test]
fn failed_exchange_returns_only_when_mpi_is_done_with_its_memory() {
    let Some(mut cmd) = mpirun() else {
        return;
    };
    let out = cmd
        .env("FERRY_MPI_ZERO_COPY_SENDS", "1")
        .env("FERRY_GENERAL_TIMEOUT_MS", "300")
        .args(["-n", "2"])
        .arg(selftest())
        .arg("settle")
        .output()
        .expect("run mpirun");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ok settle: received intact"), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("ok settle: timed out"))
        .unwrap_or_else(|| panic!("rank 0 did not time out:\n{stdout}"));
    // Returned after the receiver took the data, not at the 300 ms timeout.
    let secs: f64 = line
        .rsplit(' ')
        .next()
        .and_then(|d| d.strip_suffix('s'))
        .and_then(|d| d.parse().ok())
        .unwrap_or(0.0);
    assert!(secs >= 1.0, "{line}");
}
