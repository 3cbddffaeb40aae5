//! `ferry run` under adversity: a job that fails while it is being launched, rank counts the
//! host cannot hold, an interrupted launch, two launchers racing for one job name, processes
//! that ranks start (they must not outlive the job), and the same error from many ranks.
//!
//! Each test finds its own processes by a marker no other test or user uses (a sleep of a
//! duration made from the test's pid and a counter). They need `target/<profile>/ferry` (and
//! `t_alltoall` for the configuration test); without them they say so and skip.

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use support::{run_limited, target_dir};

fn ferry() -> Option<PathBuf> {
    let p = target_dir().join("ferry");
    if p.exists() {
        Some(p)
    } else {
        support::skip_or_fail(
            "launcher_lifecycle",
            &format!(
                "{} not built (cargo build --release --workspace --bins --examples)",
                p.display()
            ),
        );
        None
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A sleep duration no other process uses: `sleep <marker>` finds this test's sleeps only.
fn marker() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{}.{:03}",
        1000 + std::process::id() % 8000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Live (not zombie) processes whose command line is `sleep <marker>`.
fn sleeps(marker: &str) -> Vec<u32> {
    let want = format!("sleep\0{marker}\0");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let live = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_string()))
                .is_some_and(|r| !r.starts_with('Z') && !r.starts_with('X'));
            live && cmd.ends_with(want.as_bytes())
                && (cmd.len() == want.len() || cmd[cmd.len() - want.len() - 1] == 0)
        })
        .collect()
}

/// Waits until no `sleep <marker>` is left or `limit` passed; returns those left (and kills
/// them, so that a failing test leaves nothing behind).
fn sleeps_left(marker: &str, limit: Duration) -> Vec<u32> {
    let start = Instant::now();
    loop {
        let left = sleeps(marker);
        if left.is_empty() || start.elapsed() > limit {
            for pid in &left {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `ferry run ARGS` and reads its stdout until `n` lines `rank R pid P` arrived;
/// returns the launcher and the pids by rank.
fn start_ranks(ferry: &PathBuf, args: &[&str], n: usize) -> (Child, Vec<u32>) {
    let mut child = Command::new(ferry)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ferry");
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut pids = vec![0u32; n];
    let mut seen = 0;
    let mut line = String::new();
    while seen < n {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            panic!("launcher ended before its ranks reported");
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        if let ["rank", r, "pid", p] = w[..] {
            pids[r.parse::<usize>().unwrap()] = p.parse().unwrap();
            seen += 1;
        }
    }
    // Keep reading in the background so that the ranks never block on a full pipe.
    std::thread::spawn(move || for _ in reader.lines() {});
    (child, pids)
}

fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// A rank that fails while the others are still being started ends the launch: the rest are
/// not started, and the failure is reported once.
#[test]
fn a_failure_during_the_launch_stops_it() {
    let Some(ferry) = ferry() else { return };
    let n = 300;
    let script = "echo started $FERRY_RANK; [ $FERRY_RANK != 0 ] || exit 3; exec sleep 30";
    let (out, elapsed) = run_limited(
        Command::new(&ferry).args(["run", "-n", &n.to_string(), "sh", "-c", script]),
        Duration::from_secs(60),
    );
    let stderr = text(&out.stderr);
    let started = text(&out.stdout).lines().count();
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        started < n,
        "all {n} ranks were started after rank 0 failed"
    );
    assert!(stderr.contains("ranks were not started"), "{stderr}");
    assert_eq!(
        stderr.matches("exited with code").count(),
        1,
        "one report: {stderr}"
    );
    eprintln!("{started} of {n} ranks started, {elapsed:?}");
}

/// A hybrid node's segment has a name in /dev/shm until the node's last rank attaches; if the
/// node's ranks die while it gathers, nobody of them removes it. The launcher removes the
/// job's names once every rank has ended (here a name as such a job leaves it).
#[test]
fn names_a_job_left_in_dev_shm_are_removed_after_it() {
    use std::os::unix::fs::MetadataExt;
    let Some(ferry) = ferry() else { return };
    let uid = std::fs::metadata("/proc/self").expect("/proc/self").uid();
    let job = format!("leftover{}", marker().replace('.', "x"));
    let left = PathBuf::from(format!("/dev/shm/ferry-{uid}-j{job}-n0"));
    std::fs::write(&left, b"").expect("make a name in /dev/shm");
    let (out, _) = run_limited(
        Command::new(&ferry).args(["run", "--job-name", &job, "-n", "1", "true"]),
        Duration::from_secs(60),
    );
    let gone = !left.exists();
    let _ = std::fs::remove_file(&left);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(gone, "{} is still there after the job", left.display());
}

/// More ranks than the host's task limit can hold: refused at once, nothing started.
#[test]
fn a_rank_count_the_host_cannot_hold_is_refused() {
    let Some(ferry) = ferry() else { return };
    let (out, elapsed) = run_limited(
        Command::new(&ferry).args(["run", "-n", "100000", "sh", "-c", "echo started"]),
        Duration::from_secs(30),
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("100000 ranks do not fit"), "{stderr}");
    assert!(out.stdout.is_empty(), "ranks were started");
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
}

/// More ranks than the launcher's open-file limit can serve: refused, nothing started
/// (instead of starting ranks until a pipe cannot be made).
#[test]
fn a_rank_count_beyond_the_file_limit_is_refused() {
    let Some(ferry) = ferry() else { return };
    let line = format!(
        "ulimit -n 256 && exec '{}' run -n 1000 sh -c 'echo started'",
        ferry.display()
    );
    let (out, _) = run_limited(
        Command::new("sh").args(["-c", &line]),
        Duration::from_secs(60),
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("open files"), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{} ranks started",
        text(&out.stdout).lines().count()
    );
}

/// SIGTERM during a long launch ends it quickly: no more ranks are started.
#[test]
fn sigterm_ends_a_launch_in_progress() {
    let Some(ferry) = ferry() else { return };
    let n = 1000;
    let mark = marker();
    let script = format!("echo started; exec sleep {mark}");
    let mut child = Command::new(&ferry)
        .args(["run", "-n", &n.to_string(), "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let counter = std::thread::spawn(move || 1 + reader.lines().count());
    std::thread::sleep(Duration::from_millis(50));
    let killed_at = Instant::now();
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let took = killed_at.elapsed();
    let started = counter.join().unwrap();
    let left = sleeps_left(&mark, Duration::from_secs(3));
    assert_eq!(status.and_then(|s| s.code()), Some(143));
    assert!(started < n, "all {n} ranks were started despite SIGTERM");
    assert!(took < Duration::from_secs(5), "SIGTERM took {took:?}");
    assert!(left.is_empty(), "ranks left: {left:?}");
    eprintln!("{started} of {n} started; ended {took:?} after SIGTERM");
}

/// Two launchers given the same job name at the same instant: one runs, the other starts
/// nothing and says the job is already running. Ten pairs at once.
#[test]
fn one_job_per_name_even_when_started_together() {
    let Some(ferry) = ferry() else { return };
    let pairs = 10;
    let barrier = Arc::new(Barrier::new(2 * pairs));
    let threads: Vec<_> = (0..2 * pairs)
        .map(|i| {
            let (ferry, barrier) = (ferry.clone(), barrier.clone());
            let name = format!("race-{}-{}", std::process::id(), i / 2);
            std::thread::spawn(move || {
                let mut cmd = Command::new(&ferry);
                cmd.args(["run", "-n", "1", "--job-name", &name]).args([
                    "sh",
                    "-c",
                    "echo started; sleep 3",
                ]);
                barrier.wait();
                let (out, _) = run_limited(&mut cmd, Duration::from_secs(60));
                (out.status.success(), text(&out.stdout), text(&out.stderr))
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (p, pair) in results.chunks(2).enumerate() {
        let winners = pair.iter().filter(|r| r.0).count();
        assert_eq!(winners, 1, "pair {p}: {pair:?}");
        let loser = pair.iter().find(|r| !r.0).unwrap();
        assert!(loser.2.contains("already running"), "pair {p}: {loser:?}");
        assert!(loser.1.is_empty(), "pair {p}: the loser started ranks");
    }
}

/// A SIGKILLed rank takes what it started with it (its process group), whether the job then
/// ends or goes on (--keep-going).
#[test]
fn processes_of_a_killed_rank_do_not_outlive_it() {
    let Some(ferry) = ferry() else { return };
    for keep_going in [false, true] {
        let mark = marker();
        let script = format!("echo rank $FERRY_RANK pid $$; sleep {mark} & wait");
        let mut args = vec!["run", "-n", "2"];
        if keep_going {
            args.push("--keep-going");
        }
        args.extend(["sh", "-c", &script]);
        let (mut child, pids) = start_ranks(&ferry, &args, 2);
        let start = Instant::now();
        while sleeps(&mark).len() < 2 && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = Command::new("kill")
            .args(["-9", &pids[0].to_string()])
            .status();
        if keep_going {
            // The job goes on with rank 1 and its sleep; rank 0's sleep must go now.
            let deadline = Instant::now() + Duration::from_secs(3);
            while sleeps(&mark).len() > 1 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let n = sleeps(&mark).len();
            let running = child.try_wait().unwrap().is_none();
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = wait_exit(&mut child, Duration::from_secs(10));
            let left = sleeps_left(&mark, Duration::from_secs(3));
            assert!(running, "--keep-going: the job ended");
            assert_eq!(n, 1, "--keep-going: the killed rank's sleep survived it");
            assert!(left.is_empty(), "after the job: {left:?}");
        } else {
            let status = wait_exit(&mut child, Duration::from_secs(20));
            let left = sleeps_left(&mark, Duration::from_secs(3));
            assert_eq!(status.and_then(|s| s.code()), Some(137));
            assert!(
                left.is_empty(),
                "processes of the job outlived it: {left:?}"
            );
        }
    }
}

/// A SIGKILLed launcher takes the ranks and what they started with it.
#[test]
fn processes_of_the_ranks_do_not_outlive_a_killed_launcher() {
    let Some(ferry) = ferry() else { return };
    let mark = marker();
    let script = format!("echo rank $FERRY_RANK pid $$; sleep {mark} & wait");
    let (mut child, pids) = start_ranks(&ferry, &["run", "-n", "2", "sh", "-c", &script], 2);
    let start = Instant::now();
    while sleeps(&mark).len() < 2 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(sleeps(&mark).len(), 2, "the ranks' sleeps did not start");
    child.kill().unwrap();
    child.wait().unwrap();
    let left = sleeps_left(&mark, Duration::from_secs(3));
    let ranks_left: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                !s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
        })
        .collect();
    assert!(
        ranks_left.is_empty(),
        "ranks outlived the launcher: {ranks_left:?}"
    );
    assert!(
        left.is_empty(),
        "the ranks' children outlived the launcher: {left:?}"
    );
}

/// The same error line from every rank is printed once, naming the ranks; the ranks' other
/// lines are all there, whole, and after it.
#[test]
fn identical_error_lines_of_many_ranks_are_printed_once() {
    let Some(ferry) = ferry() else { return };
    let n = 8;
    let dir = std::env::temp_dir().join(format!("ferry-collapse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Every rank waits for all to be up, then fails the same way (as with a bad setting).
    let script = format!(
        r#"d='{}'; : > "$d/$FERRY_RANK"
        i=0; while [ $(ls "$d" | wc -l) -lt {n} ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done
        echo "prog: error: configure: bad value" >&2
        echo "rank $FERRY_RANK after the error" >&2
        exit 1"#,
        dir.display()
    );
    let (out, _) = run_limited(
        Command::new(&ferry).args([
            "run",
            "-n",
            &n.to_string(),
            "--keep-going",
            "sh",
            "-c",
            &script,
        ]),
        Duration::from_secs(60),
    );
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let merged: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains("prog: error: configure: bad value"))
        .collect();
    assert_eq!(merged.len(), 1, "{stderr}");
    assert_eq!(
        lines[merged[0]],
        format!("ranks 0-{}: prog: error: configure: bad value", n - 1),
        "{stderr}"
    );
    for r in 0..n {
        let after = format!("rank {r} after the error");
        let at = lines.iter().position(|l| *l == after);
        assert!(at.is_some_and(|i| i > merged[0]), "`{after}`: {stderr}");
    }
    assert!(
        stderr.contains(&format!("ferry: ranks 0-{} exited with code 1", n - 1)),
        "{stderr}"
    );
}

/// A bad value from the environment is named by its variable in the ranks' error.
#[test]
fn a_bad_environment_value_names_its_variable() {
    let Some(ferry) = ferry() else { return };
    let ex = target_dir().join("examples").join("t_alltoall");
    if !ex.exists() {
        return support::skip_or_fail(
            "a_bad_environment_value_names_its_variable",
            "t_alltoall not built (cargo build --release --workspace --bins --examples)",
        );
    }
    let (out, _) = run_limited(
        Command::new(&ferry)
            .args(["run", "-n", "2"])
            .arg(&ex)
            .env("FERRY_TCP_CONNECTION_CAP", "abc"),
        Duration::from_secs(30),
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("FERRY_TCP_CONNECTION_CAP=abc: `tcp.connection_cap`"),
        "{stderr}"
    );
    assert!(!stderr.contains("defaults"), "{stderr}");
}

/// With --keep-going, ranks that fail the same way a second apart (after the blame was
/// decided) still give one line: `ranks 0-2 exited with code 3`, not one line per batch.
#[test]
fn equal_exits_far_apart_in_time_are_reported_once() {
    let Some(ferry) = ferry() else { return };
    let (out, _) = run_limited(
        Command::new(&ferry).args([
            "run",
            "-n",
            "3",
            "--keep-going",
            "sh",
            "-c",
            r#"[ "$FERRY_RANK" = 0 ] || sleep 1; exit 3"#,
        ]),
        Duration::from_secs(60),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let exits: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("exited with"))
        .collect();
    assert_eq!(exits, ["ferry: ranks 0-2 exited with code 3"], "{stderr}");
}
