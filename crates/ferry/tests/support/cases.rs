//! The conformance cases (`../shared/conformance/cases.tsv`): parsing, the runner's
//! translation of LAIK variables, the compare modes of the cases file's header, and running
//! a launcher job with a kill-after deadline. Shared by the conformance and differential tests.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One line of a cases file.
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

/// Parses a cases file of directory `dir` (the set is named after the directory).
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

/// Stdout reduced to what a compare mode checks: as is (`exact`), lines sorted by byte value and
/// joined with `\n` (`sorted`), or without its two closing timing lines (`prefix`; None when
/// they are missing or malformed). None for a mode the cases file does not define.
pub fn normalise(mode: &str, got: &str) -> Option<String> {
    let join = |lines: &[&str]| {
        let mut s = lines.join("\n");
        if !lines.is_empty() {
            s.push('\n');
        }
        s
    };
    match mode {
        "exact" => Some(got.to_string()),
        "sorted" => {
            let mut lines = split_lines(got);
            lines.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            Some(join(&lines))
        }
        "prefix" => {
            let g = split_lines(got);
            let n = g.len();
            (n >= 2 && is_time_line(g[n - 2]) && is_gbs_line(g[n - 1])).then(|| join(&g[..n - 2]))
        }
        _ => None,
    }
}

/// Compares stdout with the expected bytes in `mode` (cases.tsv header, README).
pub fn compare(mode: &str, got: &str, expected: &str) -> bool {
    match (mode, normalise(mode, got)) {
        ("prefix", Some(n)) => split_lines(&n) == split_lines(expected),
        (_, Some(n)) => n == expected,
        (_, None) => false,
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

/// The spares and removal pattern of an elastic launch column (`tcp2:spares=S,remove=PAT`).
pub fn parse_elastic(launch: &str) -> Option<(usize, Option<String>)> {
    let opts = launch.strip_prefix("tcp2:")?;
    let mut spares = 0;
    let mut remove = None;
    for kv in opts.split(',') {
        match kv.split_once('=') {
            Some(("spares", v)) => spares = v.parse().unwrap_or(0),
            Some(("remove", v)) => remove = Some(v.to_string()),
            _ => {}
        }
    }
    Some((spares, remove))
}

/// What one job did.
pub struct RunResult {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
}

fn read_all(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

/// Runs `cmd` (the launcher and its ranks) in a process group of its own with its output
/// captured; past `limit` the whole group is killed and the result says so (`timed_out`), with
/// what the ranks printed until then.
pub fn run_group(mut cmd: Command, limit: Duration) -> std::io::Result<RunResult> {
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
        if start.elapsed() > limit {
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
