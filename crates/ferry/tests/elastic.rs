//! Elastic runs through the launcher (F7, interface.md "Elastic runs"): spares that no resize
//! point admits end cleanly, removed processes exit 0 and the job with them, `ferry ctl NAME
//! status` shows the states, bad removal requests are refused.
//!
//! They need `target/<profile>/ferry` and the examples (`cargo build --bins --examples`);
//! without them each test says so and skips, or fails when `CI=true`.

mod support;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::procs::built_tool;

fn ctl(ferry: &PathBuf, args: &[&str]) -> Output {
    Command::new(ferry)
        .arg("ctl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run ferry ctl")
}

/// Waits for `child` at most `limit` (kills it and fails the test after that).
fn wait_limited(mut child: std::process::Child, limit: Duration) -> Output {
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("job did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn spares_never_admitted_end_with_the_job() {
    let Some((ferry, jac1d)) = built_tool("elastic", "jac1d") else {
        return;
    };
    for backend in ["tcp", "shm"] {
        // No resize point (repart 0): the spares wait until the master releases them.
        let child = Command::new(&ferry)
            .args([
                "run",
                "-n",
                "2",
                "--spares",
                "2",
                "--backend",
                backend,
                "--",
            ])
            .arg(&jac1d)
            .args(["100", "20"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ferry");
        let out = wait_limited(child, Duration::from_secs(60));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{backend}: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("running 20 iterations with 2 tasks"),
            "{stdout}"
        );
        assert!(
            stdout.contains("Global value sum after 20 iterations"),
            "{stdout}"
        );
    }
}

#[test]
fn removed_process_exits_zero_and_status_shows_it() {
    let Some((ferry, resize)) = built_tool("elastic", "resize") else {
        return;
    };
    let job = format!("elastic-test-{}", std::process::id());
    let child = Command::new(&ferry)
        .args([
            "run",
            "-n",
            "3",
            "--backend",
            "tcp",
            "--job-name",
            &job,
            "--",
        ])
        .arg(&resize)
        .arg("2")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ferry");
    // The job registers itself before starting the ranks; wait for all three to show.
    let start = Instant::now();
    let table = loop {
        let o = ctl(&ferry, &[&job, "status"]);
        let t = String::from_utf8_lossy(&o.stdout).into_owned();
        if o.status.success() && t.lines().filter(|l| l.contains(" running")).count() == 3 {
            break t;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no status: {t}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(table.lines().any(|l| l.starts_with("L1:")), "{table}");
    let bad = ctl(&ferry, &[&job, "remove", "L[1"]);
    assert!(!bad.status.success(), "a malformed pattern is refused");
    let none = ctl(&ferry, &[&job, "remove", "^L9:"]);
    assert!(
        !none.status.success(),
        "a pattern matching nobody is refused"
    );
    let ok = ctl(&ferry, &[&job, "remove", "^L1:"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    // Process 1 leaves at the resize point of phase 1 and exits 0 while the others go on.
    let mut seen_done = false;
    while start.elapsed() < Duration::from_secs(30) {
        let t = String::from_utf8_lossy(&ctl(&ferry, &[&job, "status"]).stdout).into_owned();
        let l1 = t.lines().find(|l| l.starts_with("L1:")).unwrap_or("");
        let l0 = t.lines().find(|l| l.starts_with("L0:")).unwrap_or("");
        if l1.ends_with(" done") && l0.ends_with(" running") {
            seen_done = true;
            break;
        }
        if t.is_empty() {
            break; // the job ended
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = wait_limited(child, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(seen_done, "status never showed L1 done while L0 ran");
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "Epoch 0 / Phase 0: Hello from process 0 of 3",
            "Epoch 0 / Phase 0: Hello from process 1 of 3",
            "Epoch 0 / Phase 0: Hello from process 2 of 3",
            "Epoch 1 / Phase 1: Hello from process 0 of 2",
            "Epoch 1 / Phase 1: Hello from process 1 of 2",
            "Epoch 1 / Phase 2: Hello from process 0 of 2",
            "Epoch 1 / Phase 2: Hello from process 1 of 2",
        ]
    );
}
