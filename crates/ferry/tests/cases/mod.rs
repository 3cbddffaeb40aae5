//! Conformance data shared by the suites that run it (`conformance.rs` through `ferry run` and
//! `mpirun`, `slurm.rs` through `srun`): the case table of `../shared/conformance`, the
//! environment translation and compare modes of its README, and running one case with a
//! deadline. The expected outputs are read at run time, never copied.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Writes to the process's stderr directly: unlike `eprintln!`, this is not captured by the
/// test harness, so skips and the summary show even when the test passes.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

#[derive(Debug, Clone)]
pub struct Case {
    pub set: String,
    pub id: String,
    pub example: String,
    pub ranks: usize,
    pub args: Vec<String>,
    pub expected: PathBuf,
    pub mode: String,
    pub env: String,
    pub launch: String,
}

/// Outcome of one case on one backend.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// `target/<profile>`: the test binary lives in `target/<profile>/deps/`.
pub fn profile_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    Some(deps.parent()?.to_path_buf())
}

pub fn case_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![root.join("../shared/conformance")];
    if let Ok(extra) = std::env::var("FERRY_CONFORMANCE_DIRS") {
        for d in extra.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            let p = PathBuf::from(d);
            dirs.push(if p.is_absolute() { p } else { root.join(p) });
        }
    }
    dirs
}

pub fn parse_cases(dir: &Path, text: &str) -> Result<Vec<Case>, String> {
    let set = dir
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string());
    let mut cases = Vec::new();
    for (no, line) in text.lines().enumerate() {
        if line.is_empty() || line.starts_with('#') || line.starts_with("case-id") {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 8 {
            return Err(format!(
                "{}: line {}: {} columns, need at least 8",
                dir.display(),
                no + 1,
                f.len()
            ));
        }
        let ranks = f[2].trim().parse::<usize>().map_err(|_| {
            format!(
                "{}: line {}: bad rank count `{}`",
                dir.display(),
                no + 1,
                f[2]
            )
        })?;
        cases.push(Case {
            set: set.clone(),
            id: f[0].to_string(),
            example: f[1].to_string(),
            ranks,
            args: f[3].split_whitespace().map(str::to_string).collect(),
            expected: dir.join(f[4]),
            mode: f[5].to_string(),
            env: f[6].to_string(),
            launch: f[7].to_string(),
        });
    }
    Ok(cases)
}

/// The runner's translation of LAIK variables: originals are kept, ferry's equivalents added.
pub fn translate_env(env: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if env == "-" || env.is_empty() {
        return out;
    }
    for kv in env.split(',') {
        let Some((k, v)) = kv.split_once('=') else {
            continue;
        };
        out.push((k.to_string(), v.to_string()));
        if k == "LAIK_LOG" {
            out.push(("FERRY_LOG".to_string(), "debug".to_string()));
        } else if let Some(rest) = k.strip_prefix("LAIK_") {
            out.push((format!("FERRY_{rest}"), v.to_string()));
        }
    }
    out
}

pub fn split_lines(s: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = s.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    lines
}

/// `^\d+\.\d{n}` followed by `rest`; returns the remainder after the number.
pub fn eat_fixed(s: &str, decimals: usize) -> Option<&str> {
    let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
    if int_len == 0 {
        return None;
    }
    let s = s[int_len..].strip_prefix('.')?;
    let frac_len = s.bytes().take_while(u8::is_ascii_digit).count();
    if frac_len != decimals {
        return None;
    }
    Some(&s[frac_len..])
}

/// `^Time: \d+\.\d{3} s \(average per iteration: \d+\.\d{3} ms, per phase: \d+\.\d{3} ms\)$`
pub fn is_time_line(l: &str) -> bool {
    (|| {
        let s = l.strip_prefix("Time: ")?;
        let s = eat_fixed(s, 3)?.strip_prefix(" s (average per iteration: ")?;
        let s = eat_fixed(s, 3)?.strip_prefix(" ms, per phase: ")?;
        let s = eat_fixed(s, 3)?;
        (s == " ms)").then_some(())
    })()
    .is_some()
}

/// `^GB/s: (\d+\.\d{6}|inf|nan|-?inf|-nan)$`
pub fn is_gbs_line(l: &str) -> bool {
    match l.strip_prefix("GB/s: ") {
        Some("inf" | "nan" | "-inf" | "-nan") => true,
        Some(s) => eat_fixed(s, 6) == Some(""),
        None => false,
    }
}

/// Compares stdout with the expected bytes in `mode` (cases.tsv header, README).
pub fn compare(mode: &str, got: &str, expected: &str) -> bool {
    match mode {
        "exact" => got == expected,
        "sorted" => {
            let mut lines = split_lines(got);
            lines.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            let mut joined = lines.join("\n");
            if !lines.is_empty() {
                joined.push('\n');
            }
            joined == expected
        }
        "prefix" => {
            let g = split_lines(got);
            let e = split_lines(expected);
            g.len() == e.len() + 2
                && g[..e.len()] == e[..]
                && is_time_line(g[g.len() - 2])
                && is_gbs_line(g[g.len() - 1])
        }
        _ => false,
    }
}

/// First lines where two outputs differ, for failure messages.
pub fn first_difference(got: &str, expected: &str) -> String {
    let g = split_lines(got);
    let e = split_lines(expected);
    for i in 0..g.len().max(e.len()) {
        let (a, b) = (g.get(i), e.get(i));
        if a != b {
            return format!(
                "line {}: got {:?}, expected {:?} ({} vs {} lines)",
                i + 1,
                a.copied().unwrap_or("<none>"),
                b.copied().unwrap_or("<none>"),
                g.len(),
                e.len()
            );
        }
    }
    "outputs differ only in line endings".to_string()
}

pub struct RunResult {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
}

pub fn read_all(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

/// Runs `cmd` in a process group of its own, capturing its output; after `timeout` the whole
/// group (a launcher and its ranks) is killed and the result marked as timed out.
pub fn run_with_timeout(mut cmd: Command, timeout: Duration) -> std::io::Result<RunResult> {
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn()?;
    let out = read_all(child.stdout.take().expect("piped stdout"));
    let err = read_all(child.stderr.take().expect("piped stderr"));
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if start.elapsed() > timeout {
            timed_out = true;
            // The launcher and its ranks share the process group we created.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.kill();
            break child.wait()?;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = String::from_utf8_lossy(&out.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned();
    Ok(RunResult {
        status: status.code(),
        stdout,
        stderr,
        timed_out,
    })
}

/// Judges a finished run of `case`: exit status (`ping_pong-1` must exit 1, every other case
/// 0) and stdout in the case's compare mode against the expected file.
pub fn judge(case: &Case, r: &RunResult, timeout: Duration) -> Outcome {
    let expected = match std::fs::read(&case.expected) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => return Outcome::Fail(format!("cannot read {}: {e}", case.expected.display())),
    };
    // The ranks' own first complaint says more than the launcher's summary line.
    let lines: Vec<&str> = r.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let last_err = lines
        .iter()
        .find(|l| {
            !l.starts_with("ferry: ")
                && !l.starts_with("srun: ")
                && !l.contains(" DEBUG ")
                && !l.contains(" INFO ")
        })
        .or(lines.last())
        .copied()
        .unwrap_or("")
        .to_string();
    if r.timed_out {
        return Outcome::Fail(format!("timeout after {timeout:?}; stderr: {last_err}"));
    }
    let want = if case.id == "ping_pong-1" { 1 } else { 0 };
    if r.status != Some(want) {
        return Outcome::Fail(format!(
            "exit status {:?}, expected {want}; stderr: {last_err}",
            r.status
        ));
    }
    if !compare(&case.mode, &r.stdout, &expected) {
        let shown = if case.mode == "sorted" {
            let mut l = split_lines(&r.stdout);
            l.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            let mut s = l.join("\n");
            s.push('\n');
            s
        } else {
            r.stdout.clone()
        };
        return Outcome::Fail(format!(
            "stdout differs ({}): {}; stderr: {last_err}",
            case.mode,
            first_difference(&shown, &expected)
        ));
    }
    Outcome::Pass
}

/// Reads every case table of [`case_dirs`]; a missing table is reported in the second list.
pub fn load_cases(root: &Path) -> Result<(Vec<Case>, Vec<PathBuf>), String> {
    let mut cases = Vec::new();
    let mut missing = Vec::new();
    for dir in case_dirs(root) {
        let tsv = dir.join("cases.tsv");
        match std::fs::read_to_string(&tsv) {
            Ok(text) => cases.extend(parse_cases(&dir, &text)?),
            Err(_) => missing.push(tsv),
        }
    }
    Ok((cases, missing))
}
