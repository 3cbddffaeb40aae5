//! Job control of `ferry run` through signals and `ferry ctl` (R1): Ctrl-C, Ctrl-Z and `fg`,
//! a SIGKILLed launcher, the grace period before SIGKILL, and a named job's status. Real
//! processes started through the launcher; see `launcher.rs` for what they need built.

mod support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::pids::{spawn_with_pids, wait_dead, wait_state};
use support::procs::{built_tools, text};
use support::run_limited;

#[test]
fn sigint_ends_every_rank() {
    let Some((ferry, ex)) = built_tools("launcher_jobctl", &["t_fail"]) else {
        return;
    };
    let ranks = 4;
    let mut cmd = Command::new(&ferry);
    cmd.args(["run", "-n", &ranks.to_string()])
        .arg(&ex[0])
        .args(["0", "none"])
        .stderr(Stdio::piped());
    let (mut child, pids) = spawn_with_pids(cmd, ranks);
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let start = Instant::now();
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("ferry run did not end after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(exit.code(), Some(130), "stderr: {stderr}");
    assert!(stderr.contains("received SIGINT"), "stderr: {stderr}");
    assert_eq!(
        wait_dead(&pids, Duration::from_secs(2)),
        Vec::<u32>::new(),
        "orphaned ranks"
    );
}

#[test]
fn named_job_status_through_ctl() {
    let Some((ferry, ex)) = built_tools("launcher_jobctl", &["t_fail"]) else {
        return;
    };
    let name = format!("launcher-test-{}", std::process::id());
    let mut cmd = Command::new(&ferry);
    cmd.args(["run", "-n", "2", "--job-name", &name])
        .arg(&ex[0])
        .args(["0", "none"])
        .stderr(Stdio::null());
    let (mut child, pids) = spawn_with_pids(cmd, 2);
    let (out, _) = run_limited(
        Command::new(&ferry).args(["ctl", &name, "status"]),
        Duration::from_secs(20),
    );
    let status = text(&out.stdout);
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let exit = child.wait().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    for (r, pid) in pids_sorted_by_rank(&status).iter().enumerate() {
        assert!(pids.contains(pid), "rank {r}: pid {pid} unknown: {status}");
    }
    assert_eq!(status.lines().count(), 2, "{status}");
    assert!(status.lines().all(|l| l.ends_with("running")), "{status}");
    assert_eq!(exit.code(), Some(143));
    let (out, _) = run_limited(
        Command::new(&ferry).args(["ctl", &name, "status"]),
        Duration::from_secs(20),
    );
    assert!(!out.status.success(), "status of a finished job");
}

/// Pids from `ferry ctl status` lines `L<id>:<host>:<pid> rank <r> <state>`, in line order.
fn pids_sorted_by_rank(status: &str) -> Vec<u32> {
    status
        .lines()
        .filter_map(|l| {
            let loc = l.split(' ').next()?;
            loc.rsplit(':').next()?.parse().ok()
        })
        .collect()
}

#[test]
fn ranks_die_with_a_sigkilled_launcher() {
    let Some((ferry, ex)) = built_tools("launcher_jobctl", &["t_fail"]) else {
        return;
    };
    let ranks = 3;
    let mut cmd = Command::new(&ferry);
    cmd.args(["run", "-n", &ranks.to_string()])
        .arg(&ex[0])
        .args(["0", "none"])
        .stderr(Stdio::null());
    let (mut child, pids) = spawn_with_pids(cmd, ranks);
    // No chance to clean up: the ranks' parent-death signal must end them.
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        wait_dead(&pids, Duration::from_secs(5)),
        Vec::<u32>::new(),
        "ranks outlived a SIGKILLed launcher"
    );
}

#[test]
fn ctrl_z_stops_and_fg_continues_the_ranks() {
    let Some((ferry, ex)) = built_tools("launcher_jobctl", &["t_fail"]) else {
        return;
    };
    let mut cmd = Command::new(&ferry);
    cmd.args(["run", "-n", "2"])
        .arg(&ex[0])
        .args(["0", "none"])
        .stderr(Stdio::null());
    let (mut child, pids) = spawn_with_pids(cmd, 2);
    let launcher = child.id().to_string();
    let signal = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &launcher])
            .status()
            .unwrap()
            .success())
    };
    signal("-TSTP");
    let stopped = wait_state(&pids, |c| c == 'T', Duration::from_secs(10));
    let launcher_stopped = wait_state(&[child.id()], |c| c == 'T', Duration::from_secs(10));
    signal("-CONT");
    let continued = wait_state(&pids, |c| c != 'T', Duration::from_secs(10));
    signal("-TERM");
    let exit = child.wait().unwrap();
    assert!(stopped, "ranks not stopped by Ctrl-Z");
    assert!(launcher_stopped, "launcher did not stop itself");
    assert!(continued, "ranks not continued");
    assert_eq!(exit.code(), Some(143));
}

#[test]
fn remaining_ranks_get_sigterm_before_sigkill() {
    let Some((ferry, _)) = built_tools("launcher_jobctl", &[]) else {
        return;
    };
    // Rank 0 fails once rank 1 is ready; rank 1 reports the SIGTERM it is sent (a rank that
    // cannot see SIGTERM, e.g. with an inherited signal mask, is only SIGKILLed).
    let script = r#"
        flag="${TMPDIR:-/tmp}/ferry-test-$FERRY_JOB_ID.ready"
        if [ "$FERRY_RANK" = 1 ]; then
            trap 'echo "rank 1 got SIGTERM"; rm -f "$flag"; exit 0' TERM
            echo ready; : > "$flag"
            while :; do sleep 0.05; done
        fi
        i=0; while [ ! -e "$flag" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
        exit 7"#;
    let (out, _) = run_limited(
        Command::new(&ferry).args(["run", "-n", "2", "sh", "-c", script]),
        Duration::from_secs(30),
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert!(stdout.contains("ready"), "{stdout}");
    assert!(stdout.contains("rank 1 got SIGTERM"), "{stdout}");
}
