//! Retained messages (T6, `tcp.retain`; seed 000 §5.3.3-5.3.4) in jobs started by hand from a
//! configuration file of addresses, without the launcher: one rank is SIGKILLed mid-run, its
//! address in the file is changed, and the same command is started again; the job must print
//! the output of an undisturbed run. Also: the checkpointed variant keeps retention bounded,
//! and a rank that is never restarted fails the job after `general.failure_timeout_ms`.
//!
//! `FERRY_RETAIN_RUNS` repeats the kill-and-restart tests (default 1).

mod support;

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use support::{skip_or_fail, target_dir};

/// One job at a time: the tests' timing must not depend on each other's load.
static ONE: Mutex<()> = Mutex::new(());

/// A rank process with its output collected in the background.
struct Rank {
    child: Child,
    /// Stdout so far (read as it comes, so a test can act on progress).
    live: Arc<Mutex<Vec<u8>>>,
    out: Option<JoinHandle<Vec<u8>>>,
    err: Option<JoinHandle<Vec<u8>>>,
}

struct Ended {
    ok: bool,
    timed_out: bool,
    status: String,
    stdout: String,
    stderr: String,
}

impl Rank {
    fn start(exe: &Path, args: &[&str], config: &Path, env: &[(&str, &str)]) -> Rank {
        let mut cmd = Command::new(exe);
        cmd.args(args)
            .env("FERRY_BACKEND", "tcp")
            .env("FERRY_CONFIG", config)
            .env_remove("FERRY_RANK")
            .env_remove("FERRY_SIZE")
            .env_remove("FERRY_RENDEZVOUS")
            .env_remove("FERRY_JOB_ID")
            .env_remove("FERRY_SECRET")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start a rank");
        let mut o = child.stdout.take().expect("stdout");
        let mut e = child.stderr.take().expect("stderr");
        let live = Arc::new(Mutex::new(Vec::new()));
        let sink = live.clone();
        Rank {
            child,
            live,
            out: Some(std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                loop {
                    match o.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => sink
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .extend_from_slice(&buf[..n]),
                    }
                }
                let v = sink.lock().unwrap_or_else(|p| p.into_inner()).clone();
                v
            })),
            err: Some(std::thread::spawn(move || {
                let mut v = Vec::new();
                let _ = e.read_to_end(&mut v);
                v
            })),
        }
    }

    /// Waits until the rank printed `needle` (progress), at most `limit`.
    fn wait_for(&self, needle: &str, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            let seen = {
                let v = self.live.lock().unwrap_or_else(|p| p.into_inner());
                String::from_utf8_lossy(&v).contains(needle)
            };
            if seen {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    fn kill(&mut self) {
        // std's kill is SIGKILL.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the rank's end; one still running at `deadline` is killed and reported as
    /// failed (`timed_out`), with what it printed, so that a hang shows its logs.
    fn wait(mut self, deadline: Instant) -> Ended {
        let end = loop {
            if let Some(s) = self.child.try_wait().expect("wait for a rank") {
                break Some(s);
            }
            if Instant::now() > deadline {
                self.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let timed_out = end.is_none();
        let ok = end.is_some_and(|s| s.success());
        let status = end.map_or_else(
            || "still running at the deadline (killed)".to_string(),
            |s| format!("{s:?}"),
        );
        let text = |h: Option<JoinHandle<Vec<u8>>>| {
            String::from_utf8_lossy(&h.and_then(|h| h.join().ok()).unwrap_or_default()).into_owned()
        };
        Ended {
            ok,
            timed_out,
            status,
            stdout: text(self.out.take()),
            stderr: text(self.err.take()),
        }
    }
}

impl Drop for Rank {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

/// Ports that were free a moment ago.
fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    ls.iter()
        .map(|l| l.local_addr().expect("addr").port())
        .collect()
}

fn write_config(path: &Path, ports: &[u16]) {
    let list: Vec<String> = ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
    // Written whole and renamed, so that a rank re-reading it never sees half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(
        &tmp,
        format!(
            "[tcp]\naddresses = [{}]\nsecret = \"retain-test\"\nretain = true\n",
            list.join(", ")
        ),
    )
    .expect("write config");
    std::fs::rename(&tmp, path).expect("rename config");
}

/// Waits until something listens on `port` (the rank that took it started).
fn wait_listening(port: u16) -> bool {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

struct Job {
    dir: PathBuf,
    config: PathBuf,
    ports: Vec<u16>,
}

impl Job {
    fn new(name: &str, n: usize) -> Job {
        let dir = std::env::temp_dir().join(format!(
            "ferry-retain-{name}-{}-{}",
            std::process::id(),
            rand_u64() % 1_000_000
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let config = dir.join("ferry.toml");
        let ports = free_ports(n);
        write_config(&config, &ports);
        Job { dir, config, ports }
    }

    /// Starts the ranks one after the other, each once the previous one listens, so that
    /// rank r is `ranks[r]` (each process takes the first address it can bind).
    fn start(&self, exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Vec<Rank> {
        let mut ranks = Vec::new();
        for &p in &self.ports {
            ranks.push(Rank::start(exe, args, &self.config, env));
            assert!(wait_listening(p), "no rank listens on port {p}");
        }
        ranks
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

fn example(test: &str, name: &str) -> Option<PathBuf> {
    let p = target_dir().join("examples").join(name);
    if p.exists() {
        Some(p)
    } else {
        skip_or_fail(
            test,
            &format!(
                "{} not built (cargo build --release --workspace --examples)",
                p.display()
            ),
        );
        None
    }
}

fn runs() -> usize {
    std::env::var("FERRY_RETAIN_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// Runs the job undisturbed; returns rank 0's output and how long the job took.
fn reference(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> (String, Duration) {
    let job = Job::new("ref", 4);
    let t = Instant::now();
    let ranks = job.start(exe, args, env);
    let deadline = Instant::now() + Duration::from_secs(120);
    let ended: Vec<Ended> = ranks.into_iter().map(|r| r.wait(deadline)).collect();
    for (r, e) in ended.iter().enumerate() {
        assert!(
            e.ok,
            "undisturbed rank {r}: {}\n{}{}",
            e.status, e.stdout, e.stderr
        );
    }
    (ended[0].stdout.clone(), t.elapsed())
}

/// Kills rank `victim` once rank 0 printed `progress` and `then` passed, moves it to a new
/// port in the file and starts the same command again; returns every rank's end (the
/// restarted one for `victim`) and what the killed process had printed.
fn kill_and_restart(
    exe: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    victim: usize,
    progress: &str,
    then: Duration,
) -> (Vec<Ended>, String) {
    let mut job = Job::new("run", 4);
    let mut ranks = job.start(exe, args, env);
    assert!(
        ranks[0].wait_for(progress, Duration::from_secs(120)),
        "rank 0 never printed {progress:?}"
    );
    std::thread::sleep(then);
    let mut old = ranks.remove(victim);
    let early_end = old.child.try_wait().ok().flatten();
    old.kill();
    let printed = old.wait(Instant::now()).stdout;
    assert!(
        early_end.is_none(),
        "rank {victim} ended before it was killed"
    );
    // 000 §5.3.4: the replacement listens elsewhere; the others re-read the file.
    job.ports[victim] = free_ports(1)[0];
    write_config(&job.config, &job.ports);
    ranks.insert(victim, Rank::start(exe, args, &job.config, env));
    let deadline = Instant::now() + Duration::from_secs(180);
    let ended = ranks.into_iter().map(|x| x.wait(deadline)).collect();
    (ended, printed)
}

/// Every rank ended well, and rank 0 printed the undisturbed run's output: the survivor
/// rank 0 all of it; a restarted rank 0 what the killed process printed up to some line and
/// the restart the rest from where it resumed (a line may come twice: the restart repeats
/// the lines after its checkpoint, or all of them when it runs from the start).
fn check_recovered(what: &str, ended: &[Ended], victim: usize, killed: &str, expected: &str) {
    let hung = ended.iter().any(|e| e.timed_out);
    for (r, e) in ended.iter().enumerate() {
        assert!(
            e.ok,
            "{what}: rank {r} failed ({}){}:\n{}\n{}",
            e.status,
            if hung {
                " (a rank hung; FERRY_LOG=ferry_tcp=debug shows the connection events)"
            } else {
                ""
            },
            e.stdout,
            e.stderr
        );
    }
    if victim != 0 {
        assert_eq!(
            ended[0].stdout, expected,
            "{what}: rank 0's output differs from the undisturbed run's"
        );
        return;
    }
    let want: Vec<&str> = expected.lines().collect();
    let before: Vec<&str> = killed.lines().collect();
    let after: Vec<&str> = ended[0].stdout.lines().collect();
    assert!(
        want.starts_with(&before)
            && want.ends_with(&after)
            && before.len() + after.len() >= want.len(),
        "{what}: the killed and the restarted rank 0 together do not print the undisturbed \
         run's output\nkilled:\n{killed}\nrestarted:\n{}\nundisturbed:\n{expected}",
        ended[0].stdout
    );
}

/// 000's demonstration (§5.3.4) as a test: jac3d started by hand from a file of 4 addresses
/// with retention on; rank 3 killed mid-run; its address changed in the file; rank 3 started
/// again; the job prints the undisturbed run's output.
#[test]
fn jac3d_started_by_hand_survives_a_restart_at_a_new_address() {
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let test = "jac3d_started_by_hand_survives_a_restart_at_a_new_address";
    let Some(exe) = example(test, "jac3d") else {
        return;
    };
    // Long enough (about 0.5 s) that a kill at iteration 400 at the latest comes well before
    // the victim's end: a rank killed after its program finished (and its peers left) cannot
    // be restarted, so such a run would test nothing.
    let args = ["-s", "40", "2000"];
    let env = [("FERRY_GENERAL_FAILURE_TIMEOUT_MS", "20000")];
    let (expected, took) = reference(&exe, &args, &env);
    assert!(expected.contains("Global value sum after "));
    for run in 0..runs() {
        // Rank 3 as in 000's demonstration, and rank 0 (the one that prints, and that every
        // other rank's reductions go through).
        for victim in [3, 0] {
            // Killed somewhere between iterations 1 and ~400 of 2000.
            let after = format!("after {:>2} iters", 1 + 10 * (rand_u64() % 40));
            let then = Duration::from_millis(rand_u64() % 50);
            let (ended, killed) = kill_and_restart(&exe, &args, &env, victim, &after, then);
            check_recovered(
                &format!(
                    "run {run}, rank {victim} killed {then:?} after rank 0 printed {after:?} \
                     (undisturbed run: {took:?})"
                ),
                &ended,
                victim,
                &killed,
                &expected,
            );
        }
    }
}

/// The same with checkpoints (`t_retain ... CKPT_EVERY DIR`): the restart resumes from its
/// saved state and token, and the retained bytes stay bounded by what the ranks sent since
/// their receivers' last checkpoints (reported by `FERRY_STATS=1`).
#[test]
fn t_retain_restarted_from_its_checkpoint_finishes_with_bounded_retention() {
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let test = "t_retain_restarted_from_its_checkpoint_finishes_with_bounded_retention";
    let Some(exe) = example(test, "t_retain") else {
        return;
    };
    let ckpt = std::env::temp_dir().join(format!("ferry-retain-ckpt-{}", std::process::id()));
    let fresh = || {
        let _ = std::fs::remove_dir_all(&ckpt);
        std::fs::create_dir_all(&ckpt).expect("checkpoint dir");
    };
    let elems = 2000usize;
    let dir = ckpt.to_string_lossy().into_owned();
    let args = ["300", "2000", "2", "10", dir.as_str()];
    let env = [
        ("FERRY_GENERAL_FAILURE_TIMEOUT_MS", "20000"),
        ("FERRY_STATS", "1"),
    ];
    fresh();
    let (expected, took) = reference(&exe, &args, &env);
    assert!(expected.contains("Global sum after 300 iterations"));
    for run in 0..runs() {
        // Rank 0 (it prints: its restart prints the lines after its checkpoint again) and
        // one of the others.
        for victim in [0, 1 + (rand_u64() % 3) as usize] {
            fresh();
            // Past the first checkpoint (10), before the last lines.
            let after = format!("iter {} sum", 20 + 10 * (rand_u64() % 20));
            let then = Duration::from_millis(rand_u64() % 30);
            let (ended, killed) = kill_and_restart(&exe, &args, &env, victim, &after, then);
            check_recovered(
                &format!(
                    "run {run}, rank {victim} killed {then:?} after {after:?} (undisturbed: \
                     {took:?})"
                ),
                &ended,
                victim,
                &killed,
                &expected,
            );
            assert!(
                ended[victim].stderr.contains("resumes at iteration"),
                "the restart did not resume from its checkpoint:\n{}",
                ended[victim].stderr
            );
            // Each rank sends 2 halos of `elems` doubles per iteration (and a sum every 10):
            // with a checkpoint every 10 iterations at most ~2 checkpoint intervals are kept.
            let per_iter = 2 * elems * 8 + 8;
            let bound = 25 * per_iter;
            for (r, e) in ended.iter().enumerate() {
                let peak = stat(&e.stderr, "tcp retained bytes peak")
                    .unwrap_or_else(|| panic!("rank {r} reports no retention:\n{}", e.stderr));
                assert!(
                    peak <= bound as u64,
                    "rank {r}: {peak} bytes retained at most, bound {bound} (300 iterations \
                     would be {})",
                    300 * per_iter
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&ckpt);
}

/// The value of statistics line `name` in a rank's stderr (`FERRY_STATS=1`).
fn stat(stderr: &str, name: &str) -> Option<u64> {
    stderr
        .lines()
        .filter(|l| l.contains(name))
        .filter_map(|l| l.split_whitespace().last()?.parse().ok())
        .next()
}

/// 000 §5.3.3 retries forever; ferry gives a rank that is not restarted
/// `general.failure_timeout_ms` and then fails the job with an error naming it.
#[test]
fn a_rank_that_is_never_restarted_fails_the_job_after_the_failure_timeout() {
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let test = "a_rank_that_is_never_restarted_fails_the_job_after_the_failure_timeout";
    let Some(exe) = example(test, "t_retain") else {
        return;
    };
    let job = Job::new("dead", 4);
    let env = [("FERRY_GENERAL_FAILURE_TIMEOUT_MS", "2000")];
    let mut ranks = job.start(&exe, &["100000", "100", "1"], &env);
    std::thread::sleep(Duration::from_millis(500));
    let mut victim = ranks.remove(2);
    victim.kill();
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(30);
    let mut named = 0;
    for (i, r) in ranks.into_iter().enumerate() {
        let e = r.wait(deadline);
        assert!(!e.timed_out, "survivor {i} waited forever:\n{}", e.stderr);
        assert!(
            !e.ok,
            "survivor {i} succeeded although rank 2 never came back"
        );
        // Its neighbours report that it was not restarted; the others that their peers
        // ended after rank 2 failed.
        assert!(
            e.stderr.contains("rank 2"),
            "survivor {i} does not name rank 2:\n{}",
            e.stderr
        );
        named += usize::from(e.stderr.contains("not restarted"));
    }
    assert!(named >= 1, "no survivor says that rank 2 was not restarted");
    let took = killed.elapsed();
    assert!(
        took >= Duration::from_millis(1800) && took < Duration::from_secs(15),
        "the survivors ended {took:?} after the kill (failure timeout 2 s)"
    );
}
