//! Starting jobs of built examples through the launcher and finding their rank processes
//! (shared by the fault-tolerance, recovery, sessions and start-up suites).

use std::path::PathBuf;
use std::process::Command;

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
    if backend == "hybrid" {
        let half = (n / 2).max(1);
        cmd.args([
            "--",
            "sh",
            "-c",
            &format!(r#"FERRY_NODE=n$((FERRY_RANK / {half})) exec "$0" "$@""#),
        ]);
    }
    cmd.arg(ex).args(args);
    cmd
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
