//! Real processes (the `shm_worker` example) over the shm backend: SIGKILL of a rank mid-run,
//! two concurrent jobs, hand-started ranks numbered by the shared counter, 8 ranks on 2 cores,
//! and no /dev/shm leftovers after any of it (S4).

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{leftovers, unique, wait_output, worker, worker_cmd};

/// Starts rank `rank` (or a counter-numbered rank when None) of a job, with a 30 s operation
/// timeout as a safety net for the test itself.
fn spawn(job_env: &[(&str, String)], rank: Option<usize>, size: usize, args: &[&str]) -> Child {
    worker_cmd(job_env, rank, size, args)
        .env("FERRY_GENERAL_OPERATION_TIMEOUT_MS", "30000")
        .spawn()
        .expect("spawn shm_worker")
}

fn launcher_job(job: &str, size: usize, args: &[&str], limit: Duration) -> Vec<Output> {
    let env = [("FERRY_JOB_ID", job.to_string())];
    let kids: Vec<Child> = (0..size)
        .map(|r| spawn(&env, Some(r), size, args))
        .collect();
    kids.into_iter().map(|k| wait_output(k, limit)).collect()
}

fn assert_ok(outs: &[Output]) {
    for (r, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "rank {r} failed: {:?}\nstdout: {}\nstderr: {}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn launcher_mode_allreduce_and_no_leftovers() {
    let job = unique("basic");
    let outs = launcher_job(
        &job,
        3,
        &["allreduce", "50", "100000"],
        Duration::from_secs(60),
    );
    assert_ok(&outs);
    for (r, o) in outs.iter().enumerate() {
        let s = String::from_utf8_lossy(&o.stdout);
        assert!(s.starts_with(&format!("rank {r} of 3 ok")), "{s}");
    }
    assert!(leftovers(&job).is_empty(), "{:?}", leftovers(&job));
}

/// 8 ranks on a 2-core machine: spinning is bounded and waiting blocks on the futex, so an
/// allreduce-style ring loop finishes in reasonable time.
#[test]
fn eight_ranks_on_two_cores_finish() {
    for (iters, bytes) in [("300", "256"), ("50", "200000")] {
        let job = unique("eight");
        let start = Instant::now();
        let outs = launcher_job(
            &job,
            8,
            &["allreduce", iters, bytes],
            Duration::from_secs(90),
        );
        assert_ok(&outs);
        let took = start.elapsed();
        eprintln!("8 ranks x {iters} ring allreduces of {bytes} B (7 steps each): {took:?}");
        assert!(took < Duration::from_secs(60), "took {took:?}");
        assert!(leftovers(&job).is_empty());
    }
}

/// R2b: ranks started by hand with only FERRY_SIZE and a job name number themselves through
/// the shared counter; a second job with another name runs at the same time without mixing.
#[test]
fn hand_started_concurrent_jobs_use_the_counter() {
    let a = unique("handA");
    let b = unique("handB");
    let mut kids = Vec::new();
    for job in [&a, &b] {
        let env = [("FERRY_SHM_JOB", job.clone())];
        for _ in 0..3 {
            kids.push((
                job.clone(),
                spawn(&env, None, 3, &["allreduce", "30", "4096"]),
            ));
        }
    }
    let mut ranks: std::collections::HashMap<String, Vec<usize>> = Default::default();
    for (job, k) in kids {
        let o = wait_output(k, Duration::from_secs(60));
        assert_ok(std::slice::from_ref(&o));
        let s = String::from_utf8_lossy(&o.stdout).into_owned();
        let mut w = s.split_whitespace();
        assert_eq!(w.next(), Some("rank"), "{s}");
        let r: usize = w.next().and_then(|x| x.parse().ok()).expect("rank number");
        assert!(s.trim_end().ends_with(&job), "{s} should name job {job}");
        ranks.entry(job).or_default().push(r);
    }
    for (job, mut r) in ranks {
        r.sort_unstable();
        assert_eq!(r, vec![0, 1, 2], "job {job}");
        assert!(leftovers(&job).is_empty(), "{:?}", leftovers(&job));
    }
}

/// S4 + failure detection: SIGKILL one rank of a running job; the others fail with an error
/// naming it, well within the general timeout, and nothing remains in /dev/shm.
#[test]
fn sigkill_of_a_rank_is_reported_and_leaves_nothing() {
    let job = unique("kill");
    let env = [("FERRY_JOB_ID", job.clone())];
    let size = 4;
    let mut kids: Vec<Child> = (0..size)
        .map(|r| spawn(&env, Some(r), size, &["alltoall", "60", "20000"]))
        .collect();
    // Wait until rank 2 reports that the job runs.
    {
        use std::io::BufRead;
        let out = kids[2].stdout.take().expect("stdout of rank 2");
        let mut line = String::new();
        std::io::BufReader::new(out)
            .read_line(&mut line)
            .expect("read from rank 2");
        assert_eq!(line.trim(), "running");
    }
    assert!(
        leftovers(&job).is_empty(),
        "name must be gone once all attached"
    );
    let victim = kids.remove(2);
    let pid = victim.id();
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).expect("child pid"),
        rustix::process::Signal::Kill,
    );
    let killed_at = Instant::now();
    let _ = wait_output(victim, Duration::from_secs(10));
    for (i, k) in kids.into_iter().enumerate() {
        let o = wait_output(k, Duration::from_secs(20));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "survivor {i}: {err}");
        assert!(
            err.contains("rank 2") && err.contains("died"),
            "survivor {i} should name rank 2: {err}"
        );
    }
    let took = killed_at.elapsed();
    assert!(took < Duration::from_secs(10), "detection took {took:?}");
    assert!(leftovers(&job).is_empty(), "{:?}", leftovers(&job));
}

/// A job whose ranks never all arrive fails with a timeout naming the missing ranks and
/// removes its segment name.
#[test]
fn incomplete_job_times_out_and_cleans_up() {
    let job = unique("partial");
    let mut c = Command::new(worker());
    c.args(["allreduce", "1", "8"])
        .env("FERRY_JOB_ID", &job)
        .env("FERRY_RANK", "0")
        .env("FERRY_SIZE", "2")
        .env("FERRY_GENERAL_STARTUP_TIMEOUT_MS", "1500")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let o = wait_output(c.spawn().expect("spawn"), Duration::from_secs(20));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("missing ranks [1]"), "{err}");
    assert!(leftovers(&job).is_empty(), "{:?}", leftovers(&job));
}
