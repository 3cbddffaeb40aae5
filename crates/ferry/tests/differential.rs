//! Differential test of the backends (issue 06): every example with the arguments of its
//! conformance cases, run at 5, 6 and 8 ranks, must print the same on every backend.
//!
//! The reference cases stop at 4 ranks, so there is no expected output at these counts:
//! instead the `tcp` run is the reference and `shm` and `hybrid` must agree with it, the
//! hybrid backend with the ranks split over several "nodes" of this host (each rank is
//! started through `sh -c` that sets `FERRY_NODE` from `FERRY_RANK` before it execs the
//! program; the launcher has no per-rank node override). Splits: at 8 ranks 2 nodes of 4, 4
//! nodes of 2 and 3+5; at other counts halves, nodes of 2 and 1+(n-1) for n < 7 (so every
//! count has a node of 4 or more, the shape that hung `vsum`), 3+(n-3) above.
//!
//! Cases come from `../shared/conformance/cases.tsv` at run time (never copied here); the
//! elastic ones (launch column `tcp2:...`) are left out. Cases that differ only in their rank
//! count run once. Stdout is compared in the case's compare mode (`support::cases::normalise`,
//! as the conformance test interprets the modes), taken from the case with the most ranks of
//! the same example and arguments, else from the example's case with the most ranks (elastic
//! ones included); an example whose cases all run one rank is compared by sorted lines when
//! its mode is `exact`, since several ranks may print and their order is not defined. The exit
//! status must agree too. When every backend exits with the same non-zero status and output,
//! the example does not accept that many ranks: the run is reported as skipped with the
//! example's message.
//!
//! Every job runs with a kill-after deadline of its own (the operation timeout may be off): a
//! hang fails the test with what the ranks printed. Without the conformance data the test
//! fails when `CI=true` and is skipped (saying why) otherwise.
//!
//! Knobs: `FERRY_DIFFERENTIAL_DATA=<directory of cases.tsv>`, `FERRY_DIFFERENTIAL_RANKS=5,6,8`,
//! `FERRY_DIFFERENTIAL_ONLY=<substring of the case id, or the example name>`,
//! `FERRY_DIFFERENTIAL_TIMEOUT_S` (per job, default 30).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use support::cases::{
    first_difference, normalise, parse_cases, parse_elastic, run_group, translate_env, Case,
    RunResult,
};

/// Jobs running at once: each starts up to 8 ranks on a CI machine of two cores, but many
/// spend much of their time starting up or sleeping (vsum3 and resize sleep by design).
const PARALLEL: usize = 4;

/// Writes to the process's stderr directly, past the test harness's capture, so that skips
/// and the summary show even when the test passes.
fn note(msg: impl std::fmt::Display) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// One program run: example, arguments, environment, compare mode.
#[derive(Debug, Clone)]
struct Variant {
    id: String,
    example: String,
    args: Vec<String>,
    env: String,
    mode: String,
}

/// A backend under test; `nodes` splits the ranks over nodes (hybrid only).
#[derive(Debug, Clone, PartialEq)]
struct Backend {
    name: &'static str,
    nodes: Vec<usize>,
}

impl Backend {
    /// The command that reproduces a run, for failure reports.
    fn command(&self, v: &Variant, n: usize) -> String {
        let wrap = if self.nodes.is_empty() {
            String::new()
        } else {
            format!("sh -c '{}' ", node_wrapper(&self.nodes))
        };
        let env: Vec<String> = translate_env(&v.env)
            .into_iter()
            .map(|(k, val)| format!("{k}={val} "))
            .collect();
        format!(
            "{}target/release/ferry run -n {n} --backend {} -- {wrap}target/release/examples/{} {}",
            env.concat(),
            self.name,
            v.example,
            v.args.join(" ")
        )
    }

    fn label(&self) -> String {
        if self.nodes.is_empty() {
            self.name.to_string()
        } else {
            let sizes: Vec<String> = self.nodes.iter().map(usize::to_string).collect();
            format!("{}[{}]", self.name, sizes.join("+"))
        }
    }
}

/// The `sh -c` script that gives each rank its node: rank `r` is on the first node whose
/// cumulative size exceeds `r`.
fn node_wrapper(nodes: &[usize]) -> String {
    let sizes: Vec<String> = nodes.iter().map(usize::to_string).collect();
    format!(
        r#"r=$FERRY_RANK; n=0; for s in {}; do [ "$r" -lt "$s" ] && break; r=$((r - s)); n=$((n + 1)); done; FERRY_NODE=node$n exec "$0" "$@""#,
        sizes.join(" ")
    )
}

/// Node splits of `n` ranks (see the module doc), without duplicates.
fn splits(n: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut add = |s: Vec<usize>| {
        if s.len() > 1 && s.iter().all(|&k| k > 0) && !out.contains(&s) {
            out.push(s);
        }
    };
    add(vec![n - n / 2, n / 2]);
    let mut pairs = vec![2; n / 2];
    if n % 2 == 1 {
        pairs.push(1);
    }
    add(pairs);
    add(if n >= 7 {
        vec![3, n - 3]
    } else {
        vec![1, n - 1]
    });
    out
}

fn backends(n: usize) -> Vec<Backend> {
    let mut b = vec![
        Backend {
            name: "tcp",
            nodes: Vec::new(),
        },
        Backend {
            name: "shm",
            nodes: Vec::new(),
        },
    ];
    b.extend(splits(n).into_iter().map(|nodes| Backend {
        name: "hybrid",
        nodes,
    }));
    b
}

/// The non-elastic cases, one per (example, arguments, environment), each with the compare
/// mode of the run with the most ranks (see the module doc).
fn variants(cases: &[Case]) -> Vec<Variant> {
    let plain: Vec<&Case> = cases.iter().filter(|c| c.launch == "-").collect();
    let widest = |pick: &dyn Fn(&Case) -> bool| {
        plain
            .iter()
            .filter(|c| pick(c))
            .max_by_key(|c| c.ranks)
            .copied()
    };
    let mut out: Vec<Variant> = Vec::new();
    for c in &plain {
        if out
            .iter()
            .any(|v| v.example == c.example && v.args == c.args && v.env == c.env)
        {
            continue;
        }
        let same = widest(&|o: &Case| o.example == c.example && o.args == c.args && o.env == c.env)
            .unwrap_or(c);
        // Several ranks may print where the cases only ever ran one: their order is not
        // defined, so such a variant compares sorted lines.
        let mode = if same.ranks > 1 {
            same.mode.clone()
        } else {
            match cases
                .iter()
                .filter(|o| o.example == c.example)
                .max_by_key(|o| o.ranks)
            {
                Some(w) if w.ranks > 1 => w.mode.clone(),
                _ if same.mode == "exact" => "sorted".to_string(),
                _ => same.mode.clone(),
            }
        };
        out.push(Variant {
            id: c.id.clone(),
            example: c.example.clone(),
            args: c.args.clone(),
            env: c.env.clone(),
            mode,
        });
    }
    out
}

struct Runner {
    ferry: PathBuf,
    examples: PathBuf,
    limit: Duration,
}

/// Outcome of one variant at one rank count over every backend.
#[derive(Debug)]
enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
}

/// The last `n` lines of `s`, indented, for failure reports.
fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let from = lines.len().saturating_sub(n);
    let mut out = String::new();
    if from > 0 {
        out.push_str(&format!("    ... ({from} lines before)\n"));
    }
    for l in &lines[from..] {
        out.push_str("    ");
        out.push_str(l);
        out.push('\n');
    }
    out
}

fn describe(r: &RunResult) -> String {
    format!(
        "  stdout:\n{}  stderr:\n{}",
        tail(&r.stdout, 12),
        tail(&r.stderr, 12)
    )
}

impl Runner {
    fn run(&self, v: &Variant, n: usize, b: &Backend) -> std::io::Result<RunResult> {
        let mut cmd = Command::new(&self.ferry);
        cmd.args(["run", "-n", &n.to_string(), "--backend", b.name, "--"]);
        if !b.nodes.is_empty() {
            cmd.args(["sh", "-c", &node_wrapper(&b.nodes)]);
        }
        cmd.arg(self.examples.join(&v.example)).args(&v.args);
        // A stray setting of the developer's shell must not change what runs.
        cmd.env_remove("FERRY_BACKEND")
            .env_remove("FERRY_LOG")
            .env_remove("FERRY_NODE");
        for (k, val) in translate_env(&v.env) {
            cmd.env(k, val);
        }
        run_group(cmd, self.limit)
    }
}

/// Judges the runs of one variant at `n` ranks, in the order of [`backends`] (tcp first, the
/// reference): every run must have finished and agree with the reference in exit status and
/// in stdout (in the variant's compare mode). If they all agree on a non-zero status, the
/// example does not accept `n` ranks.
fn judge(v: &Variant, n: usize, runs: &[(Backend, std::io::Result<RunResult>)]) -> Outcome {
    let mut failures = Vec::new();
    let mut done: Vec<(&Backend, &RunResult)> = Vec::new();
    for (b, r) in runs {
        match r {
            Err(e) => failures.push(format!("{}: cannot start ferry: {e}", b.label())),
            Ok(r) if r.timed_out => failures.push(format!(
                "{}: did not finish within the deadline (killed; a hang): {}\n{}",
                b.label(),
                b.command(v, n),
                describe(r)
            )),
            Ok(r) => done.push((b, r)),
        }
    }
    if !failures.is_empty() {
        return Outcome::Fail(failures.join("\n"));
    }
    let Some(&(rb, reference)) = done.first() else {
        return Outcome::Fail("no runs".into());
    };
    let Some(ref_out) = normalise(&v.mode, &reference.stdout) else {
        return Outcome::Fail(format!(
            "{}: stdout does not fit compare mode `{}`\n{}",
            rb.label(),
            v.mode,
            describe(reference)
        ));
    };
    for &(b, r) in &done[1..] {
        let out = normalise(&v.mode, &r.stdout);
        if r.status != reference.status {
            failures.push(format!(
                "{}: exit status {:?}, {} gave {:?}: {}\n{}",
                b.label(),
                r.status,
                rb.label(),
                reference.status,
                b.command(v, n),
                describe(r)
            ));
        } else if out.as_deref() != Some(ref_out.as_str()) {
            let why = match &out {
                Some(o) => first_difference(o, &ref_out),
                None => format!("stdout does not fit compare mode `{}`", v.mode),
            };
            failures.push(format!(
                "{}: stdout differs from {} ({}): {why}: {}\n{}",
                b.label(),
                rb.label(),
                v.mode,
                b.command(v, n),
                describe(r)
            ));
        }
    }
    if !failures.is_empty() {
        failures.push(format!(
            "{} (reference):\n{}",
            rb.label(),
            describe(reference)
        ));
        return Outcome::Fail(failures.join("\n"));
    }
    if reference.status != Some(0) {
        let first = reference
            .stderr
            .lines()
            .find(|l| !l.trim().is_empty() && !l.starts_with("ferry: "))
            .unwrap_or("")
            .trim()
            .to_string();
        return Outcome::Skip(format!(
            "{} does not accept {n} ranks (every backend exits {:?}: {first})",
            v.example, reference.status
        ));
    }
    Outcome::Pass
}

/// `../shared/conformance` beside the workspace, or `FERRY_DIFFERENTIAL_DATA`.
fn data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FERRY_DIFFERENTIAL_DATA") {
        return PathBuf::from(d);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize()
        .unwrap_or(root)
        .join("../shared/conformance")
}

/// Skips the test (saying why), or fails it under CI, where everything it needs must exist.
fn unavailable(why: String) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("differential: {why} (CI=true: the test must run)");
    }
    note(format!("differential: SKIPPED, {why}"));
}

#[test]
fn backends_agree_at_5_6_and_8_ranks() {
    let dir = data_dir();
    let tsv = dir.join("cases.tsv");
    let text = match std::fs::read_to_string(&tsv) {
        Ok(t) => t,
        Err(e) => return unavailable(format!("no conformance data: {}: {e}", tsv.display())),
    };
    let cases = parse_cases(&dir, &text).unwrap_or_else(|e| panic!("{e}"));
    let profile = support::target_dir();
    let ferry = profile.join("ferry");
    if !ferry.exists() {
        return unavailable(format!(
            "launcher {} not built (cargo build --release --workspace --bins --examples)",
            ferry.display()
        ));
    }
    let examples = profile.join("examples");
    let mut vs = variants(&cases);
    if let Ok(only) = std::env::var("FERRY_DIFFERENTIAL_ONLY") {
        vs.retain(|v| v.id.contains(&only) || v.example == only);
    }
    let missing: Vec<&str> = vs
        .iter()
        .map(|v| v.example.as_str())
        .filter(|e| !examples.join(e).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "examples not built (cargo build --release --workspace --bins --examples): {missing:?}"
    );
    let ranks: Vec<usize> = std::env::var("FERRY_DIFFERENTIAL_RANKS")
        .unwrap_or_else(|_| "5,6,8".to_string())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|&n| n >= 2)
        .collect();
    let limit = Duration::from_secs(
        std::env::var("FERRY_DIFFERENTIAL_TIMEOUT_S")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(30),
    );
    let elastic = cases
        .iter()
        .filter(|c| parse_elastic(&c.launch).is_some())
        .count();
    note(format!(
        "differential: {} variants x ranks {ranks:?} ({elastic} elastic cases left out)",
        vs.len()
    ));
    let runner = Runner {
        ferry,
        examples,
        limit,
    };
    // One job per (variant, rank count, backend): sleeping and starting jobs overlap better
    // than whole variants would. Largest rank counts first, so slow jobs do not end up alone.
    let mut groups: Vec<(Variant, usize, Vec<Backend>)> = Vec::new();
    for &n in ranks.iter().rev() {
        groups.extend(vs.iter().map(|v| (v.clone(), n, backends(n))));
    }
    let jobs: Vec<(usize, usize)> = groups
        .iter()
        .enumerate()
        .flat_map(|(g, (_, _, bs))| (0..bs.len()).map(move |b| (g, b)))
        .collect();
    type Slot = Option<std::io::Result<RunResult>>;
    let slots: Mutex<Vec<Vec<Slot>>> = Mutex::new(
        groups
            .iter()
            .map(|(_, _, bs)| bs.iter().map(|_| None).collect())
            .collect(),
    );
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..PARALLEL {
            s.spawn(|| {
                while let Some(&(g, b)) = jobs.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let (v, n, bs) = &groups[g];
                    let r = runner.run(v, *n, &bs[b]);
                    let finished = {
                        let mut slots = slots.lock().unwrap();
                        slots[g][b] = Some(r);
                        if slots[g].iter().all(Option::is_some) {
                            Some(std::mem::take(&mut slots[g]))
                        } else {
                            None
                        }
                    };
                    let Some(results) = finished else {
                        continue;
                    };
                    let runs: Vec<(Backend, std::io::Result<RunResult>)> = bs
                        .iter()
                        .cloned()
                        .zip(results.into_iter().flatten())
                        .collect();
                    let o = judge(v, *n, &runs);
                    note(format!(
                        "differential: {:<24} {n} ranks {}",
                        v.id,
                        match &o {
                            Outcome::Pass => "ok".to_string(),
                            Outcome::Fail(_) => "FAIL".to_string(),
                            Outcome::Skip(w) => format!("skip: {w}"),
                        }
                    ));
                    done.lock().unwrap().push((v.clone(), *n, o));
                }
            });
        }
    });
    let results = done.into_inner().unwrap();
    let mut per: BTreeMap<usize, [usize; 3]> = BTreeMap::new();
    let mut failures = Vec::new();
    for (v, n, o) in &results {
        let e = per.entry(*n).or_insert([0; 3]);
        match o {
            Outcome::Pass => e[0] += 1,
            Outcome::Fail(why) => {
                e[1] += 1;
                failures.push(format!(
                    "{} ({} {}) at {n} ranks:\n{why}",
                    v.id,
                    v.example,
                    v.args.join(" ")
                ));
            }
            Outcome::Skip(_) => e[2] += 1,
        }
    }
    note(format!(
        "differential summary after {:.1}s (pass/fail/skip per rank count):",
        start.elapsed().as_secs_f64()
    ));
    for (n, [p, f, s]) in &per {
        note(format!(
            "  {n} ranks: {p:>3} pass {f:>3} fail {s:>3} skipped"
        ));
    }
    assert!(
        failures.is_empty(),
        "{} variant(s) differ between backends:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn node_wrapper_places_ranks_in_blocks() {
    for (nodes, want) in [
        (vec![3, 5], vec![0, 0, 0, 1, 1, 1, 1, 1]),
        (vec![2, 2, 1], vec![0, 0, 1, 1, 2]),
        (vec![1, 5], vec![0, 1, 1, 1, 1, 1]),
    ] {
        for (rank, &node) in want.iter().enumerate() {
            let out = Command::new("sh")
                .args(["-c", &node_wrapper(&nodes), "printenv", "FERRY_NODE"])
                .env("FERRY_RANK", rank.to_string())
                .output()
                .expect("run sh");
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                format!("node{node}"),
                "rank {rank} of split {nodes:?}"
            );
        }
    }
}

#[test]
fn splits_cover_each_count_with_a_large_node() {
    assert_eq!(splits(8), vec![vec![4, 4], vec![2, 2, 2, 2], vec![3, 5]]);
    assert_eq!(splits(5), vec![vec![3, 2], vec![2, 2, 1], vec![1, 4]]);
    assert_eq!(splits(6), vec![vec![3, 3], vec![2, 2, 2], vec![1, 5]]);
    for n in [5, 6, 8] {
        assert!(splits(n).iter().all(|s| s.iter().sum::<usize>() == n));
        assert!(splits(n).iter().any(|s| s.iter().any(|&k| k >= 4)));
    }
}

#[test]
fn variants_take_the_multi_rank_compare_mode() {
    let text = "a-1\tvsum\t1\t100\ta\texact\t-\t-\tx\n\
                a-4\tvsum\t4\t100\ta\tsorted\t-\t-\tx\n\
                b-1\tvsum\t1\t\tb\texact\t-\t-\tx\n\
                c-1\tmarkov\t1\t20 4\tc\texact\t-\t-\tx\n\
                d-1\tresize\t1\t1\td\texact\t-\t-\tx\n\
                e-2\tresize\t2\t1\te\tsorted\t-\ttcp2:spares=2\tx\n\
                f-4\tping_pong\t4\t1000 4\tf\tprefix\t-\t-\tx\n\
                g-1\tping_pong\t1\t1000 2\tg\texact\t-\t-\tx\n";
    let v = variants(&parse_cases(Path::new("/x/s"), text).unwrap());
    let got: Vec<(&str, &str)> = v.iter().map(|v| (v.id.as_str(), v.mode.as_str())).collect();
    assert_eq!(
        got,
        [
            ("a-1", "sorted"),
            ("b-1", "sorted"),
            ("c-1", "sorted"),
            ("d-1", "sorted"),
            ("f-4", "prefix"),
            ("g-1", "prefix")
        ]
    );
}

#[test]
fn judge_compares_with_the_reference_and_reports_hangs() {
    let v = Variant {
        id: "x-4".into(),
        example: "x".into(),
        args: vec!["1".into()],
        env: "-".into(),
        mode: "sorted".into(),
    };
    let res = |status: i32, stdout: &str, timed_out: bool| {
        Ok(RunResult {
            status: Some(status),
            stdout: stdout.into(),
            stderr: "x: error: needs an even number of ranks\n".into(),
            timed_out,
        })
    };
    let with = |rs: Vec<std::io::Result<RunResult>>| -> Vec<(Backend, std::io::Result<RunResult>)> {
        backends(8).into_iter().zip(rs).collect()
    };
    // Same lines in another order: equal in sorted mode.
    let o = judge(
        &v,
        8,
        &with(
            (0..5)
                .map(|i| res(0, if i % 2 == 0 { "a\nb\n" } else { "b\na\n" }, false))
                .collect(),
        ),
    );
    assert!(matches!(o, Outcome::Pass), "{o:?}");
    let o = judge(
        &v,
        8,
        &with(vec![
            res(0, "a\n", false),
            res(0, "a\n", false),
            res(0, "b\n", false),
            res(0, "a\n", false),
            res(0, "a\n", false),
        ]),
    );
    assert!(
        matches!(&o, Outcome::Fail(w) if w.contains("hybrid[4+4]: stdout differs")),
        "{o:?}"
    );
    let o = judge(
        &v,
        8,
        &with(vec![
            res(0, "a\n", false),
            res(0, "a\n", false),
            res(0, "a\n", false),
            res(0, "", true),
            res(0, "a\n", false),
        ]),
    );
    assert!(
        matches!(&o, Outcome::Fail(w) if w.contains("hybrid[2+2+2+2]: did not finish")),
        "{o:?}"
    );
    let o = judge(
        &v,
        8,
        &with(vec![
            res(0, "a\n", false),
            res(1, "a\n", false),
            res(0, "a\n", false),
            res(0, "a\n", false),
            res(0, "a\n", false),
        ]),
    );
    assert!(
        matches!(&o, Outcome::Fail(w) if w.contains("shm: exit status Some(1)")),
        "{o:?}"
    );
    // Every backend refuses the rank count the same way: skipped with the example's message.
    let o = judge(&v, 8, &with((0..5).map(|_| res(1, "", false)).collect()));
    assert!(
        matches!(&o, Outcome::Skip(w) if w.contains("needs an even number")),
        "{o:?}"
    );
}
