//! Liveness, not elapsed time (issue 05, shm part): a rank that is slow before a collective is
//! waited for as long as it lives; a rank that dies is reported by every survivor within a
//! second, each naming the dead rank, also survivors that wait only on ranks that ended
//! because of it (issue 06 item 9). Hand-started ranks (no launcher) and `ferry run
//! --keep-going` jobs alike.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{drain, ferry, sigkill, text, unique, wait_output, worker, worker_cmd};

const SIZE: usize = 4;
const VICTIM: usize = 1;

fn start(job: &str, sleep_ms: u64) -> Vec<Child> {
    let env = [
        ("FERRY_JOB_ID", job.to_string()),
        ("FERRY_TEST_SLEEP_RANK", VICTIM.to_string()),
        ("FERRY_TEST_SLEEP_MS", sleep_ms.to_string()),
    ];
    (0..SIZE)
        .map(|r| {
            worker_cmd(&env, Some(r), SIZE, &["allreduce", "3", "64"])
                .spawn()
                .expect("spawn worker")
        })
        .collect()
}

#[test]
fn hand_started_slow_rank_is_waited_for() {
    let job = unique("slow");
    let t0 = Instant::now();
    let kids = start(&job, 3000);
    for (r, k) in kids.into_iter().enumerate() {
        let o = wait_output(k, Duration::from_secs(60));
        assert!(o.status.success(), "rank {r}: {}", text(&o.stderr));
        assert!(text(&o.stdout).contains(&format!("rank {r} of {SIZE} ok")));
    }
    assert!(t0.elapsed() >= Duration::from_secs(3));
    assert!(common::leftovers(&job).is_empty());
}

#[test]
fn hand_started_killed_rank_is_named_by_every_survivor_within_a_second() {
    let job = unique("dead");
    let mut kids = start(&job, 60_000);
    let out = kids[VICTIM].stdout.take().expect("victim stdout");
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).expect("read");
    assert!(line.starts_with("sleeping"), "{line}");
    // Let the others reach their waits (and fall asleep on the doorbell).
    std::thread::sleep(Duration::from_millis(300));
    sigkill(kids[VICTIM].id());
    let killed = Instant::now();
    let mut pending: Vec<(usize, Child)> = kids.into_iter().enumerate().collect();
    let mut ended = Vec::new();
    while !pending.is_empty() && killed.elapsed() < Duration::from_secs(20) {
        let mut i = 0;
        while i < pending.len() {
            if let Ok(Some(_)) = pending[i].1.try_wait() {
                let (r, c) = pending.remove(i);
                ended.push((r, killed.elapsed(), c.wait_with_output().expect("output")));
            } else {
                i += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    for (_, c) in pending.iter_mut() {
        let _ = c.kill();
    }
    assert!(
        pending.is_empty(),
        "ranks still running 20 s after the kill"
    );
    for (r, took, o) in ended {
        if r == VICTIM {
            continue;
        }
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "rank {r}: {err}");
        assert!(
            err.contains(&format!("error peer: {VICTIM}")),
            "rank {r} must name rank {VICTIM}: {err}"
        );
        assert!(
            took < Duration::from_secs(1),
            "rank {r} reported after {took:?}: {err}"
        );
    }
    assert!(common::leftovers(&job).is_empty());
}

fn ferry_run(sleep_ms: u64) -> Command {
    let mut c = Command::new(ferry());
    c.args([
        "run",
        "-n",
        &SIZE.to_string(),
        "--backend",
        "shm",
        "--keep-going",
    ])
    .arg("--tag-output")
    .arg(worker())
    .args(["allreduce", "3", "64"]);
    for (k, _) in std::env::vars() {
        if k.starts_with("FERRY_") {
            c.env_remove(k);
        }
    }
    c.env("FERRY_TEST_SLEEP_RANK", VICTIM.to_string())
        .env("FERRY_TEST_SLEEP_MS", sleep_ms.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

#[test]
fn ferry_run_slow_rank_is_waited_for() {
    let t0 = Instant::now();
    let o = wait_output(
        ferry_run(3000).spawn().expect("ferry"),
        Duration::from_secs(60),
    );
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out} {}", text(&o.stderr));
    for r in 0..SIZE {
        assert!(out.contains(&format!("rank {r} of {SIZE} ok")), "{out}");
    }
    assert!(t0.elapsed() >= Duration::from_secs(3));
}

#[test]
fn ferry_run_keep_going_killed_rank_is_named_by_every_survivor_within_a_second() {
    let mut job = ferry_run(60_000).spawn().expect("ferry");
    let err = drain(job.stderr.take().expect("stderr"));
    let mut out = BufReader::new(job.stdout.take().expect("stdout"));
    let mut line = String::new();
    let pid: u32 = loop {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("read") > 0,
            "no sleeping line"
        );
        if let Some(p) = line
            .trim()
            .strip_prefix(&format!("[{VICTIM}] sleeping pid "))
        {
            break p.parse().expect("pid");
        }
    };
    std::thread::sleep(Duration::from_millis(300));
    sigkill(pid);
    let killed = Instant::now();
    let o = wait_output(job, Duration::from_secs(20));
    let took = killed.elapsed();
    let err = err.join().expect("stderr");
    assert!(!o.status.success());
    for r in (0..SIZE).filter(|&r| r != VICTIM) {
        assert!(
            err.contains(&format!("[{r}] error peer: {VICTIM}")),
            "rank {r} must name rank {VICTIM}: {err}"
        );
    }
    assert!(
        took < Duration::from_secs(1),
        "the job ended {took:?} after the kill: {err}"
    );
}
