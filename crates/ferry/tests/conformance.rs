//! Conformance of the example programs with LAIK's observable behaviour (issue 03).
//!
//! Reads `../shared/conformance/cases.tsv` (relative to the workspace root; more case
//! directories may be named in `FERRY_CONFORMANCE_DIRS`, comma-separated) and runs every case
//! with a plain SPMD launch through `target/<profile>/ferry run -n RANKS --backend B PROGRAM
//! ARGS`, on every backend that serves the rank count: `single` for one rank; `tcp`, `shm`,
//! `hybrid`, and `hybrid2` for more; and `mpi` for every case when `mpirun` is installed and
//! the examples were built with `--features mpi` (`mpirun --allow-run-as-root --oversubscribe
//! -n RANKS PROGRAM ARGS` with `FERRY_BACKEND=mpi`, as the outside checks do). `hybrid2` is the hybrid backend with the ranks split into
//! two "nodes" on this host: each rank is started through `sh -c` that sets
//! `FERRY_NODE=node<k>` (first half of the ranks node0, the rest node1) before it execs the
//! program, so shm carries the traffic within a node and TCP the traffic between them. Stdout is compared in the
//! case's mode (`exact`, `sorted`, `prefix`), and the exit status too (`ping_pong-1` must exit
//! 1, everything else 0). The environment column is translated the way the outside runner
//! does: `LAIK_LOG=...` adds `FERRY_LOG=debug`, any other `LAIK_X=v` adds `FERRY_X=v`, and the
//! original variables are passed on too.
//!
//! Skips (printing why) when the conformance data is absent, the launcher binary is not built,
//! or a backend answers that it is not part of this build; with `CI=true` each of these is a
//! failure instead, so that a green CI run means every case ran on every backend. Elastic cases (launch column
//! `tcp2:spares=S,remove=PAT`) run like the outside checks run them, on every launcher backend
//! (not mpi): `ferry run -n RANKS --spares S --job-name J ...` and, about 0.5 s after the start,
//! `ferry ctl J remove PAT`.
//!
//! Knobs: `FERRY_CONFORMANCE_BACKENDS=tcp,shm` restricts the multi-rank backends (and `mpi`),
//! `FERRY_CONFORMANCE_ONLY=<substring>` restricts the cases, `FERRY_CONFORMANCE_TIMEOUT_S`
//! sets the per-run timeout (default 120 s; the machine may be loaded), and
//! `FERRY_CONFORMANCE_EXAMPLES=DIR` takes the programs from DIR instead of
//! `target/<profile>/examples` and runs only the cases whose program is in DIR (how
//! `crates/ferry-c/laik-sources.sh` judges LAIK's own C programs built against `laik.h`).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use support::cases::{compare, parse_cases, parse_elastic, run_group, translate_env, Case};
use support::verdict::{judge, load_cases, run_parallel, workspace_root, Outcome};
use support::{in_ci, skip_or_fail};

/// At most this many cases run at once: the CI machine has two cores and every case starts
/// several processes.
const PARALLEL: usize = 2;

/// Wrapper of the `hybrid2` variant: the launcher gives all ranks the same environment, so
/// each rank computes its node from `FERRY_RANK`/`FERRY_SIZE` (block split in two halves).
const HYBRID2_WRAPPER: &str =
    r#"FERRY_NODE=node$((FERRY_RANK / ((FERRY_SIZE + 1) / 2))) exec "$0" "$@""#;

/// Writes to the process's stderr directly: unlike `eprintln!`, this is not captured by the
/// test harness, so skips and the summary show even when the test passes.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `target/<profile>`: the test binary lives in `target/<profile>/deps/`.
fn profile_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    Some(deps.parent()?.to_path_buf())
}

struct Runner {
    ferry: Option<PathBuf>,
    mpirun: Option<PathBuf>,
    examples: PathBuf,
    timeout: Duration,
}

impl Runner {
    fn run_case(&self, case: &Case, backend: &str) -> Outcome {
        let prog = self.examples.join(&case.example);
        if !prog.exists() {
            return Outcome::Fail(format!("example program {} not built", prog.display()));
        }
        let real_backend = if backend == "hybrid2" {
            "hybrid"
        } else {
            backend
        };
        let elastic = parse_elastic(&case.launch);
        let job = format!("conf-{}-{}-{backend}", std::process::id(), case.id);
        let mut cmd = match (&self.ferry, &self.mpirun) {
            (_, Some(mpirun)) if backend == "mpi" => {
                let mut c = Command::new(mpirun);
                c.args([
                    "--allow-run-as-root",
                    "--oversubscribe",
                    "-n",
                    &case.ranks.to_string(),
                ])
                .arg(&prog)
                // Open MPI refuses root without these (CI containers run as root).
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
                c
            }
            (Some(ferry), _) => {
                let mut c = Command::new(ferry);
                c.args([
                    "run",
                    "-n",
                    &case.ranks.to_string(),
                    "--backend",
                    real_backend,
                ]);
                if let Some((spares, _)) = &elastic {
                    c.args(["--spares", &spares.to_string(), "--job-name", &job]);
                }
                c.arg("--");
                if backend == "hybrid2" {
                    c.args(["sh", "-c", HYBRID2_WRAPPER]);
                }
                c.arg(&prog);
                c
            }
            _ => {
                // Without the launcher only one-rank runs are possible.
                let mut c = Command::new(&prog);
                c.env("FERRY_BACKEND", "single");
                c
            }
        };
        cmd.args(&case.args);
        // A stray setting of the developer's shell must not change the backend under test.
        cmd.env_remove("FERRY_BACKEND").env_remove("FERRY_LOG");
        if backend == "mpi" {
            cmd.env("FERRY_BACKEND", "mpi");
        } else if self.ferry.is_none() {
            cmd.env("FERRY_BACKEND", "single");
        }
        for (k, v) in translate_env(&case.env) {
            cmd.env(k, v);
        }
        let remover = match (&elastic, &self.ferry) {
            (Some((_, Some(pat))), Some(ferry)) => {
                let (ferry, pat, job) = (ferry.clone(), pat.clone(), job.clone());
                Some(std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(500));
                    Command::new(ferry)
                        .args(["ctl", &job, "remove", &pat])
                        .stdout(Stdio::null())
                        .stderr(Stdio::piped())
                        .output()
                }))
            }
            _ => None,
        };
        let r = run_group(cmd, self.timeout);
        if let Some(h) = remover {
            match h.join() {
                Ok(Ok(o)) if o.status.success() => {}
                Ok(Ok(o)) => {
                    return Outcome::Fail(format!(
                        "ferry ctl remove failed: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    ))
                }
                Ok(Err(e)) => return Outcome::Fail(format!("cannot run ferry ctl: {e}")),
                Err(_) => return Outcome::Fail("ferry ctl thread panicked".into()),
            }
        }
        let r = match r {
            Ok(r) => r,
            Err(e) => return Outcome::Fail(format!("cannot start: {e}")),
        };
        if r.stderr.contains("is not available in this build") {
            return Outcome::Skip(format!("backend {backend} not built"));
        }
        judge(case, &r, self.timeout)
    }
}

fn backends_for(case: &Case, multi: &[String]) -> Vec<String> {
    if parse_elastic(&case.launch).is_some() {
        // Elastic runs need the launcher's spares and job control.
        multi.iter().filter(|m| *m != "mpi").cloned().collect()
    } else if case.ranks == 1 {
        let mut b = vec!["single".to_string()];
        b.extend(multi.iter().filter(|m| *m == "mpi").cloned());
        b
    } else {
        multi.to_vec()
    }
}

/// `mpirun` from `PATH`, if installed.
fn find_mpirun() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("mpirun"))
            .find(|p| p.is_file())
    })
}

#[test]
fn conformance_cases() {
    const TEST: &str = "conformance";
    let root = workspace_root();
    let (mut cases, missing) = load_cases(&root).unwrap_or_else(|e| panic!("{e}"));
    for tsv in &missing {
        note!(
            "conformance: {} absent, its cases are not run",
            tsv.display()
        );
    }
    if cases.is_empty() {
        return skip_or_fail(
            TEST,
            "no conformance data found (expected ../shared/conformance next to the workspace)",
        );
    }
    if let Ok(only) = std::env::var("FERRY_CONFORMANCE_ONLY") {
        cases.retain(|c| c.id.contains(&only) || c.example == only);
    }
    let Some(profile) = profile_dir() else {
        return skip_or_fail(TEST, "cannot locate target/<profile> from the test binary");
    };
    let ferry = profile.join("ferry");
    let ferry = ferry.exists().then_some(ferry);
    if ferry.is_none() {
        note!(
            "conformance: launcher {} not built (cargo build -p ferry-cli); multi-rank cases \
             skipped, one-rank cases run directly on the single backend",
            profile.join("ferry").display()
        );
    }
    let timeout = std::env::var("FERRY_CONFORMANCE_TIMEOUT_S")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(120);
    let mpirun = find_mpirun();
    let examples = match std::env::var_os("FERRY_CONFORMANCE_EXAMPLES") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            cases.retain(|c| dir.join(&c.example).exists());
            note!(
                "conformance: programs from {}: {} cases have their program there",
                dir.display(),
                cases.len()
            );
            if cases.is_empty() {
                panic!(
                    "FERRY_CONFORMANCE_EXAMPLES={}: no case's program is there",
                    dir.display()
                );
            }
            dir
        }
        None => profile.join("examples"),
    };
    let runner = Runner {
        ferry: ferry.clone(),
        mpirun: mpirun.clone(),
        examples,
        timeout: Duration::from_secs(timeout),
    };
    let multi: Vec<String> = std::env::var("FERRY_CONFORMANCE_BACKENDS")
        .unwrap_or_else(|_| "tcp,shm,hybrid,hybrid2,mpi".to_string())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();

    // Work list; elastic and launcher-less multi-rank cases are recorded as skipped.
    let mut results: Vec<(Case, String, Outcome)> = Vec::new();
    let mut work: Vec<(Case, String)> = Vec::new();
    for c in &cases {
        if c.launch != "-" && parse_elastic(&c.launch).is_none() {
            results.push((
                c.clone(),
                "other".to_string(),
                Outcome::Skip(format!("unknown launch column `{}`", c.launch)),
            ));
            continue;
        }
        for b in backends_for(c, &multi) {
            if b == "mpi" && mpirun.is_none() {
                results.push((c.clone(), b, Outcome::Skip("mpirun not installed".into())));
            } else if b == "mpi" {
                work.push((c.clone(), b));
            } else if ferry.is_none() && c.ranks > 1 {
                results.push((c.clone(), b, Outcome::Skip("launcher not built".into())));
            } else {
                work.push((c.clone(), b));
            }
        }
    }

    results.extend(run_parallel(
        "conformance",
        &work,
        PARALLEL,
        |b| format!("backend {b} not built"),
        |case, backend| runner.run_case(case, backend),
    ));

    // Summary per set and backend.
    let mut per: BTreeMap<(String, String), [usize; 3]> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut skip_reasons = std::collections::BTreeSet::new();
    for (case, backend, outcome) in &results {
        let e = per
            .entry((case.set.clone(), backend.clone()))
            .or_insert([0; 3]);
        match outcome {
            Outcome::Pass => e[0] += 1,
            Outcome::Fail(why) => {
                e[1] += 1;
                failures.push(format!("{} {} [{}]: {}", case.set, case.id, backend, why));
            }
            Outcome::Skip(why) => {
                e[2] += 1;
                skip_reasons.insert(format!("{backend}: {why}"));
            }
        }
    }
    note!("conformance summary (pass/fail/skip):");
    for ((set, backend), [p, f, s]) in &per {
        note!("  {set:<16} {backend:<8} {p:>3} pass {f:>3} fail {s:>3} skipped");
    }
    for why in &skip_reasons {
        note!("  skipped: {why}");
    }
    failures.sort();
    if in_ci() {
        // In CI every case must run on every backend: a skip hides that nothing was checked.
        for (case, backend, outcome) in &results {
            if let Outcome::Skip(why) = outcome {
                failures.push(format!(
                    "{} {} [{}]: skipped under CI=true: {}",
                    case.set, case.id, backend, why
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} conformance case-run(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn compare_modes_follow_the_readme() {
    assert!(compare("exact", "a\nb\n", "a\nb\n"));
    assert!(!compare("exact", "a\nb", "a\nb\n"));
    assert!(compare("sorted", "b\na\n", "a\nb\n"));
    assert!(compare("sorted", "b\na", "a\nb\n"));
    // Byte order: upper case before lower case, as LC_ALL=C sort.
    assert!(compare("sorted", "a\nB\n", "B\na\n"));
    assert!(!compare("sorted", "a\na\n", "a\n"));
    let exp = "Do 4 iterations\n";
    let good = "Do 4 iterations\nTime: 0.123 s (average per iteration: 30.750 ms, per phase: 15.375 ms)\nGB/s: 0.000260\n";
    assert!(compare("prefix", good, exp));
    assert!(compare(
        "prefix",
        "Do 4 iterations\nTime: 0.000 s (average per iteration: 0.000 ms, per phase: 0.000 ms)\nGB/s: inf\n",
        exp
    ));
    assert!(!compare("prefix", "Do 4 iterations\nTime: 0.12 s (average per iteration: 30.750 ms, per phase: 15.375 ms)\nGB/s: 0.000260\n", exp));
    assert!(!compare("prefix", "Do 4 iterations\nTime: 0.123 s (average per iteration: 30.750 ms, per phase: 15.375 ms)\nGB/s: 0.26\n", exp));
    assert!(!compare("prefix", "Do 5 iterations\nTime: 0.123 s (average per iteration: 30.750 ms, per phase: 15.375 ms)\nGB/s: 0.000260\n", exp));
    assert!(!compare("prefix", exp, exp));
    assert!(!compare("unknown-mode", "x", "x"));
}

#[test]
fn environment_translation_matches_the_runner() {
    let t = translate_env("LAIK_LOG=1:0,OMP_NUM_THREADS=1,LAIK_LAYOUT_GENERIC=1");
    let want: Vec<(String, String)> = [
        ("LAIK_LOG", "1:0"),
        ("FERRY_LOG", "debug"),
        ("OMP_NUM_THREADS", "1"),
        ("LAIK_LAYOUT_GENERIC", "1"),
        ("FERRY_LAYOUT_GENERIC", "1"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(t, want);
    assert!(translate_env("-").is_empty());
}

#[test]
fn case_table_parses() {
    let text = "# comment\ncase-id\texample\tranks\targs\texpected-file\tcompare-mode\tenv\tlaunch\torigin\n\
                a-1\tvsum\t1\t\ta.expected\texact\t-\t-\tlaik-test\n\
                b-4\tjac3d\t4\t-s 100 10\tb.expected\texact\tLAIK_LOG=1\ttcp2:spares=2\tgenerated\n";
    let c = parse_cases(Path::new("/x/set"), text).unwrap();
    assert_eq!(c.len(), 2);
    assert!(c[0].args.is_empty());
    assert_eq!(c[1].args, ["-s", "100", "10"]);
    assert_eq!(c[1].ranks, 4);
    assert_eq!(c[1].launch, "tcp2:spares=2");
    assert_eq!(c[0].set, "set");
    assert!(parse_cases(Path::new("/x"), "a\tb\n").is_err());
    assert!(parse_cases(Path::new("/x"), "a\tb\tx\td\te\tf\tg\th\n").is_err());
}
