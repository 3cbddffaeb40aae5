//! Starting jobs of built examples through the launcher and finding their rank processes
//! (shared by the fault-tolerance, recovery, sessions and start-up suites).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{skip_or_fail, target_dir};

/// The launcher and the named examples, or `None` after reporting them missing (a skip, or a
/// failure under `CI=true`).
pub fn built_tools(test: &str, examples: &[&str]) -> Option<(PathBuf, Vec<PathBuf>)> {
    let ferry = target_dir().join("ferry");
    let ex: Vec<PathBuf> = examples
        .iter()
        .map(|e| target_dir().join("examples").join(e))
        .collect();
    if let Some(missing) = std::iter::once(&ferry).chain(&ex).find(|p| !p.exists()) {
        skip_or_fail(
            test,
            &format!(
                "{} not built (run `cargo build --release --bins --examples`)",
                missing.display()
            ),
        );
        return None;
    }
    Some((ferry, ex))
}

/// The launcher and one example, as [`built_tools`] finds them.
pub fn built_tool(test: &str, example: &str) -> Option<(PathBuf, PathBuf)> {
    let (ferry, mut ex) = built_tools(test, &[example])?;
    Some((ferry, ex.pop()?))
}

/// Output bytes as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `ferry run -n N [--keep-going] --backend B [hybrid: two nodes] EXAMPLE ARGS`.
pub fn job(
    ferry: &PathBuf,
    n: usize,
    backend: &str,
    keep_going: bool,
    ex: &PathBuf,
    args: &[&str],
) -> Command {
    let mut cmd = Command::new(ferry);
    cmd.args(["run", "-n", &n.to_string(), "--backend", backend]);
    if keep_going {
        cmd.arg("--keep-going");
    }
    two_nodes_if_hybrid(&mut cmd, backend, n);
    cmd.arg(ex).args(args);
    cmd
}

/// On the hybrid backend, wraps the program of a `ferry run` of `n` ranks so that the first
/// half of the ranks runs on node `n0` and the rest on `n1` (`FERRY_NODE`), as on two hosts.
pub fn two_nodes_if_hybrid(cmd: &mut Command, backend: &str, n: usize) {
    if backend == "hybrid" {
        let half = (n / 2).max(1);
        cmd.args([
            "--",
            "sh",
            "-c",
            &format!(r#"FERRY_NODE=n$((FERRY_RANK / {half})) exec "$0" "$@""#),
        ]);
    }
}

/// World rank -> pid of the launcher's children (from their FERRY_RANK).
pub fn rank_pids(launcher: u32) -> Vec<(usize, u32)> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid != Some(launcher) {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        for kv in env.split(|&b| b == 0) {
            if let Some(r) = kv.strip_prefix(b"FERRY_RANK=") {
                if let Some(r) = std::str::from_utf8(r).ok().and_then(|s| s.parse().ok()) {
                    found.push((r, pid));
                }
            }
        }
    }
    found
}

/// A small deterministic generator for kill times and victims (xorshift), seeded per test:
/// `FERRY_TEST_SEED` replays a run (the seed is printed on stderr).
pub struct Rng(u64);

impl Rng {
    /// Seeded from `FERRY_TEST_SEED`, else from the clock; prints the seed for `test`.
    pub fn from_env(test: &str) -> Rng {
        let seed = std::env::var("FERRY_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{test}: FERRY_TEST_SEED={seed}");
        Rng(seed | 1)
    }

    /// A number below `n` (0 for `n` 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Ranks the launcher reports killed by SIGKILL in `stderr`, once per report:
/// `ferry: rank 2 was killed by signal 9 ...` or, merged,
/// `ferry: ranks 1,3-4 were killed by signal 9 ...`.
pub fn killed_by_launcher(stderr: &str) -> Vec<usize> {
    let mut ranks = Vec::new();
    for l in stderr.lines() {
        let Some(rest) = l
            .strip_prefix("ferry: ranks ")
            .or_else(|| l.strip_prefix("ferry: rank "))
        else {
            continue;
        };
        let Some((list, _)) = rest
            .split_once(" was killed by signal 9")
            .or_else(|| rest.split_once(" were killed by signal 9"))
        else {
            continue;
        };
        for part in list.split(',') {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            if let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
                ranks.extend(a..=b);
            }
        }
    }
    ranks
}

/// A job started through the launcher whose stdout and stderr lines are collected while it
/// runs, so that a test can act on what the ranks print (kill a rank once it reached a
/// point) and fails instead of hanging when the job does not end.
pub struct Watched {
    child: std::process::Child,
    out: Arc<Mutex<Vec<String>>>,
    err: Arc<Mutex<Vec<String>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    start: Instant,
}

/// How a watched job ended.
pub struct Finished {
    /// Whether the launcher exited 0.
    pub ok: bool,
    /// The launcher's exit code (`None`: ended by a signal).
    pub code: Option<i32>,
    pub stdout: Vec<String>,
    pub stderr: String,
    /// From the start to the end of the job.
    pub took: Duration,
}

impl Watched {
    /// Starts `cmd` with its output piped and collected.
    pub fn spawn(mut cmd: Command) -> Watched {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let start = Instant::now();
        let mut child = cmd.spawn().expect("spawn ferry");
        let collect = |from: Box<dyn std::io::Read + Send>, into: Arc<Mutex<Vec<String>>>| {
            std::thread::spawn(move || {
                for l in BufReader::new(from).lines().map_while(Result::ok) {
                    into.lock().unwrap().push(l);
                }
            })
        };
        let (out, err) = (Arc::default(), Arc::default());
        let readers = vec![
            collect(Box::new(child.stdout.take().unwrap()), Arc::clone(&out)),
            collect(Box::new(child.stderr.take().unwrap()), Arc::clone(&err)),
        ];
        Watched {
            child,
            out,
            err,
            readers,
            start,
        }
    }

    /// Since the start.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Whether the launcher still runs.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// The pids of the job's `n` ranks, once all run (up to `within`; fewer if not).
    pub fn rank_pids(&self, n: usize, within: Duration) -> Vec<(usize, u32)> {
        let mut pids = Vec::new();
        while self.start.elapsed() < within {
            pids = rank_pids(self.child.id());
            if pids.len() >= n {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        pids
    }

    /// Waits until `seen(stdout, stderr)` holds, the job ended or `limit` (from the start)
    /// passed; returns whether `seen` held.
    pub fn wait_for(
        &mut self,
        limit: Duration,
        seen: impl Fn(&[String], &[String]) -> bool,
    ) -> bool {
        loop {
            if seen(&self.out.lock().unwrap(), &self.err.lock().unwrap()) {
                return true;
            }
            if !self.running() || self.start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// SIGKILLs the current processes of `ranks` (looked up now: a rank may have been
    /// replaced) in one kill(1); false if one of them was not found or kill failed. A kill
    /// that succeeds may still hit a process that had ended its work (see
    /// [`killed_by_launcher`]).
    pub fn kill(&mut self, ranks: &[usize]) -> bool {
        if !self.running() {
            return false;
        }
        let pids = rank_pids(self.child.id());
        let mut args = Vec::new();
        for v in ranks {
            let Some((_, pid)) = pids.iter().find(|(r, _)| r == v) else {
                return false;
            };
            args.push(pid.to_string());
        }
        Command::new("kill")
            .arg("-KILL")
            .args(&args)
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Waits for the end of the job; kills it and panics with its stderr as `what` hung if it
    /// runs past `limit` (from the start).
    pub fn finish(mut self, limit: Duration, what: &str) -> Finished {
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if self.start.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{what} hung (more than {limit:?}):\n{}",
                    self.err.lock().unwrap().join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let took = self.start.elapsed();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let stdout = std::mem::take(&mut *self.out.lock().unwrap());
        let stderr = self.err.lock().unwrap().join("\n");
        Finished {
            ok: status.success(),
            code: status.code(),
            stdout,
            stderr,
            took,
        }
    }
}

/// `ferry run -n N --respawn K [--backend B ...] EXAMPLE ARGS` in REBUILD mode
/// (`FERRY_FT_MODE=rebuild`): as [`job`], failed ranks replaced up to K times.
pub fn rebuild_job(
    ferry: &PathBuf,
    n: usize,
    backend: &str,
    respawn: u32,
    ex: &PathBuf,
    args: &[&str],
) -> Command {
    let base = job(ferry, n, backend, false, ex, args);
    // `job` puts `run` first; the option goes anywhere before the program.
    let words: Vec<std::ffi::OsString> = base.get_args().map(|a| a.to_os_string()).collect();
    let mut cmd = Command::new(ferry);
    cmd.arg(&words[0])
        .args(["--respawn", &respawn.to_string()])
        .args(&words[1..])
        .env("FERRY_FT_MODE", "rebuild");
    cmd
}
