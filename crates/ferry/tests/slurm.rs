//! Conformance cases started by a real Slurm, as a user of a Slurm cluster starts them (R2c,
//! issue 05 "the real cluster engine"): `srun -n RANKS env FERRY_BACKEND=B PROGRAM ARGS`, with
//! no `ferry run` in between. Each rank learns its rank, the job size and a job id from the
//! `SLURM_*` variables of its step (`ferry_core::discovery`) and rendezvous through the per-job
//! file store; `mpi` runs through Slurm's PMIx plugin (`srun --mpi=pmix`), which Open MPI's
//! `MPI_Init` uses when there is no `mpirun`.
//!
//! Every plain multi-rank case of `../shared/conformance` (launch column `-`, more than one rank)
//! runs on `tcp`, `shm`, `hybrid` and `mpi`, all ranks on one node; stdout and exit status are
//! judged like `conformance.rs` does, against the expected files read at run time.
//!
//! Needs a Slurm cluster that `srun` reaches: `.ci/run` starts a single-node one with
//! `.ci/slurm-up DIR` and exports `SLURM_CONF`; a developer can do the same (as root). Without a
//! responding cluster the test fails when `CI=true` and says why it skipped otherwise; so do
//! backends that cannot run (an example build without `--features ferry/mpi`, a Slurm without
//! the PMIx plugin).
//!
//! Knobs: `FERRY_SLURM_BACKENDS=tcp,shm` restricts the backends, `FERRY_SLURM_ONLY=<substring>`
//! the cases, `FERRY_SLURM_TIMEOUT_S` the per-run timeout (default 120 s).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::cases::{run_group, translate_env, Case};
use support::verdict::{judge, load_cases, run_parallel, workspace_root, Outcome};
use support::{in_ci, skip_or_fail, target_dir};

/// Writes to the process's stderr directly: unlike `eprintln!`, this is not captured by the
/// test harness, so skips and the summary show even when the test passes.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// Two steps at once: the single-node cluster has 8 (oversubscribed) CPUs, each case takes 4.
const PARALLEL: usize = 2;

/// `name` from `PATH`, if installed.
fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// Runs a Slurm client command with a deadline; its stdout, or why it failed.
fn slurm_query(prog: &Path, args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(prog);
    cmd.args(args);
    let r = run_group(cmd, Duration::from_secs(30))
        .map_err(|e| format!("cannot run {}: {e}", prog.display()))?;
    if r.timed_out || r.status != Some(0) {
        return Err(format!(
            "`{} {}` failed ({}): {}",
            prog.display(),
            args.join(" "),
            if r.timed_out {
                "timeout".to_string()
            } else {
                format!("exit status {:?}", r.status)
            },
            r.stderr.trim()
        ));
    }
    Ok(r.stdout)
}

/// `srun`, if a Slurm controller answers and has a node that can run jobs.
fn slurm_cluster() -> Result<PathBuf, String> {
    let srun = find_on_path("srun").ok_or("no `srun` on PATH (Debian: slurm-client)")?;
    let sinfo = find_on_path("sinfo").ok_or("no `sinfo` on PATH (Debian: slurm-client)")?;
    let states = slurm_query(&sinfo, &["-h", "-o", "%T"]).map_err(|e| {
        format!(
            "{e} (no Slurm cluster answers: start one with `.ci/slurm-up DIR` as root and \
             export SLURM_CONF=DIR/slurm.conf)"
        )
    })?;
    let usable = ["idle", "mixed", "allocated", "completing"];
    if !states
        .lines()
        .any(|s| usable.contains(&s.trim().trim_end_matches('*')))
    {
        return Err(format!(
            "no Slurm node can run jobs (sinfo states: {})",
            states.split_whitespace().collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(srun)
}

/// Why `srun --mpi=pmix` cannot start MPI ranks here, if it cannot.
fn pmix_missing(srun: &Path) -> Option<String> {
    let mut cmd = Command::new(srun);
    cmd.arg("--mpi=list");
    match run_group(cmd, Duration::from_secs(30)) {
        // Slurm prints the list on stdout or stderr depending on the version.
        Ok(r) if r.stdout.contains("pmix") || r.stderr.contains("pmix") => None,
        Ok(_) => Some(
            "Slurm has no PMIx plugin (`srun --mpi=list`), which Open MPI needs to start under \
             srun (Debian: slurm-wlm-basic-plugins)"
                .into(),
        ),
        Err(e) => Some(format!("cannot run `srun --mpi=list`: {e}")),
    }
}

fn not_built(backend: &str) -> String {
    format!(
        "backend {backend} not in this build of the examples (build them with \
         --features ferry/{backend})"
    )
}

fn srun_command(srun: &Path, case: &Case, backend: &str, prog: &Path) -> Command {
    let mut cmd = Command::new(srun);
    cmd.arg("-n")
        .arg(case.ranks.to_string())
        // One node: the per-job file store lives in the node's temporary directory, and shm
        // needs every rank on one host (on a real cluster too, where this test may run).
        .arg("--nodes=1")
        // One failed rank ends the step instead of leaving its peers waiting.
        .arg("--kill-on-bad-exit=1")
        .arg(format!("--job-name=ferry-{}-{backend}", case.id));
    if backend == "mpi" {
        cmd.arg("--mpi=pmix");
    }
    // Exactly what a user types: the backend (and the case's variables) through `env`.
    cmd.arg("env").arg(format!("FERRY_BACKEND={backend}"));
    for (k, v) in translate_env(&case.env) {
        cmd.arg(format!("{k}={v}"));
    }
    cmd.arg(prog).args(&case.args);
    // A stray setting of the developer's shell must not change what is tested; srun passes
    // the whole environment on to the ranks.
    for (k, _) in std::env::vars() {
        if k.starts_with("FERRY_") || k.starts_with("OMPI_COMM_WORLD") {
            cmd.env_remove(k);
        }
    }
    // Open MPI refuses root without these (CI containers run as root).
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    cmd
}

#[test]
fn conformance_cases_through_srun() {
    const TEST: &str = "slurm";
    let srun = match slurm_cluster() {
        Ok(s) => s,
        Err(why) => return skip_or_fail(TEST, &why),
    };
    let root = workspace_root();
    let (mut cases, missing) = load_cases(&root).unwrap_or_else(|e| panic!("{e}"));
    for tsv in &missing {
        note!("slurm: {} absent, its cases are not run", tsv.display());
    }
    cases.retain(|c| c.launch == "-" && c.ranks > 1);
    if cases.is_empty() {
        return skip_or_fail(
            TEST,
            "no multi-rank conformance cases found (expected ../shared/conformance next to the \
             workspace)",
        );
    }
    if let Ok(only) = std::env::var("FERRY_SLURM_ONLY") {
        cases.retain(|c| c.id.contains(&only) || c.example == only);
    }
    let examples = target_dir().join("examples");
    let timeout = Duration::from_secs(
        std::env::var("FERRY_SLURM_TIMEOUT_S")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(120),
    );
    let backends: Vec<String> = std::env::var("FERRY_SLURM_BACKENDS")
        .unwrap_or_else(|_| "tcp,shm,hybrid,mpi".to_string())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let no_pmix = backends
        .iter()
        .any(|b| b == "mpi")
        .then(|| pmix_missing(&srun))
        .flatten();

    let mut results: Vec<(Case, String, Outcome)> = Vec::new();
    let mut work: Vec<(Case, String)> = Vec::new();
    for c in &cases {
        for b in &backends {
            match &no_pmix {
                Some(why) if b == "mpi" => {
                    results.push((c.clone(), b.clone(), Outcome::Skip(why.clone())))
                }
                _ => work.push((c.clone(), b.clone())),
            }
        }
    }

    results.extend(run_parallel(
        "slurm",
        &work,
        PARALLEL,
        not_built,
        |case, backend| {
            let prog = examples.join(&case.example);
            if !prog.exists() {
                return Outcome::Fail(format!("example program {} not built", prog.display()));
            }
            match run_group(srun_command(&srun, case, backend, &prog), timeout) {
                Err(e) => Outcome::Fail(format!("cannot start srun: {e}")),
                Ok(r) if r.stderr.contains("is not available in this build") => {
                    Outcome::Skip(not_built(backend))
                }
                Ok(r) => judge(case, &r, timeout),
            }
        },
    ));

    let mut failures = Vec::new();
    let mut skips = std::collections::BTreeSet::new();
    let mut counts = std::collections::BTreeMap::<&str, [usize; 3]>::new();
    for (case, backend, outcome) in &results {
        let e = counts.entry(backend.as_str()).or_insert([0; 3]);
        match outcome {
            Outcome::Pass => e[0] += 1,
            Outcome::Fail(why) => {
                e[1] += 1;
                failures.push(format!("{} [{backend}]: {why}", case.id));
            }
            Outcome::Skip(why) => {
                e[2] += 1;
                skips.insert(format!("{backend}: {why}"));
                if in_ci() {
                    failures.push(format!(
                        "{} [{backend}]: skipped under CI=true: {why}",
                        case.id
                    ));
                }
            }
        }
    }
    note!("slurm summary (srun -n RANKS, pass/fail/skip):");
    for (backend, [p, f, s]) in &counts {
        note!("  {backend:<6} {p:>3} pass {f:>3} fail {s:>3} skipped");
    }
    for why in &skips {
        note!("  skipped: {why}");
    }
    failures.sort();
    assert!(
        failures.is_empty(),
        "{} srun case-run(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
