//! R2c under `mpirun`: the `ferry` facade's examples started by Open MPI's `mpirun` without
//! `ferry run`, with `FERRY_BACKEND=tcp|shm|hybrid` (rank and size from `OMPI_COMM_WORLD_*`,
//! rendezvous through the per-job file store) and `FERRY_BACKEND=mpi` (when the examples were
//! built with `--features ferry/mpi`), must print the conformance outputs.
//!
//! Skips with a message when `mpirun`, the examples (`cargo build --workspace --examples`) or
//! the conformance data (`../shared/conformance`) are missing, and fails instead when `CI=true`.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::skip_or_fail;

const NO_MPIRUN: &str = "no `mpirun` on PATH (install openmpi-bin)";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    dir.join("examples").join(name)
}

fn is_open_mpi() -> Option<bool> {
    let out = Command::new("mpirun").arg("--version").output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).contains("Open MPI"))
}

/// Compares like the conformance tool: `exact`, or `sorted` (lines sorted bytewise).
fn matches(mode: &str, got: &str, expected: &str) -> bool {
    match mode {
        "exact" => got == expected,
        _ => {
            let mut lines: Vec<&str> = got.lines().collect();
            lines.sort_unstable();
            let mut joined = lines.join("\n");
            if !lines.is_empty() {
                joined.push('\n');
            }
            joined == expected
        }
    }
}

/// Runs `n` ranks of `prog args` under mpirun with `backend`; `None` if the backend is not
/// compiled into the example.
fn run(prog: &Path, n: usize, args: &[&str], backend: &str) -> Option<(bool, String, String)> {
    let mut cmd = Command::new("mpirun");
    if is_open_mpi() == Some(true) {
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .arg("--oversubscribe");
    }
    cmd.arg("-n")
        .arg(n.to_string())
        .arg(prog)
        .args(args)
        .env("FERRY_BACKEND", backend)
        // Variables of an enclosing `ferry run` would take precedence over discovery.
        .env_remove("FERRY_RANK")
        .env_remove("FERRY_SIZE")
        .env_remove("FERRY_RENDEZVOUS")
        .env_remove("FERRY_JOB_ID")
        .env_remove("FERRY_SECRET")
        .env_remove("FERRY_CONFIG");
    let out = cmd.output().expect("run mpirun");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if stderr.contains("is not available in this build") {
        return None;
    }
    Some((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
    ))
}

/// The file-store job directories of Open MPI jobs that exist now.
fn job_dirs() -> std::collections::BTreeSet<PathBuf> {
    let base = std::env::var_os("FERRY_STORE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    std::fs::read_dir(&base)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ferry-"))
        .flat_map(|e| {
            std::fs::read_dir(e.path().join("store"))
                .into_iter()
                .flatten()
                .flatten()
        })
        .filter(|e| e.file_name().to_string_lossy().starts_with("ompi-"))
        .map(|e| e.path())
        .collect()
}

#[test]
fn examples_under_mpirun_print_the_conformance_output() {
    if is_open_mpi().is_none() {
        return skip_or_fail("mpirun_discovery", NO_MPIRUN);
    }
    let data = repo().join("../shared/conformance");
    if !data.join("cases.tsv").exists() {
        return skip_or_fail(
            "mpirun_discovery",
            &format!("no conformance data in {}", data.display()),
        );
    }
    // (example, ranks, args, expected file, compare mode)
    let cases = [
        ("vsum", 4, vec!["100"], "vsum-100-4.expected", "sorted"),
        (
            "jac2d",
            4,
            vec!["-s", "100"],
            "jac2d-s-100-4.expected",
            "exact",
        ),
    ];
    let mut ran = 0;
    let before = job_dirs();
    for (name, n, args, expected, mode) in cases {
        let prog = example(name);
        if !prog.exists() {
            skip_or_fail(
                "mpirun_discovery",
                &format!("{name}: {} not built", prog.display()),
            );
            continue;
        }
        let expected = std::fs::read_to_string(data.join(expected)).expect("expected output");
        for backend in ["tcp", "shm", "hybrid", "mpi"] {
            let Some((ok, out, err)) = run(&prog, n, &args, backend) else {
                skip_or_fail(
                    "mpirun_discovery",
                    &format!("{name} on {backend}: not compiled into the example"),
                );
                continue;
            };
            assert!(
                ok,
                "{name} {args:?} on {backend} under mpirun failed:\n{out}\n{err}"
            );
            assert!(
                matches(mode, &out, &expected),
                "{name} {args:?} on {backend} under mpirun printed:\n{out}\nexpected:\n{expected}\nstderr:\n{err}"
            );
            ran += 1;
        }
    }
    eprintln!("{ran} example runs under mpirun matched");
    // The job directories of the file store are removed by the last rank of each job.
    let left: Vec<_> = job_dirs().difference(&before).cloned().collect();
    assert!(
        left.is_empty(),
        "file-store job directories left behind: {left:?}"
    );
}

/// The hybrid backend over two "nodes" under one mpirun (MPMD syntax gives ranks 0-1 and 2-3
/// different `FERRY_NODE`s): shared memory inside each pair, TCP between them, addresses
/// through the file store.
#[test]
fn hybrid_over_two_nodes_under_mpirun() {
    if is_open_mpi().is_none() {
        return skip_or_fail("mpirun_discovery", NO_MPIRUN);
    }
    let expected = repo().join("../shared/conformance/jac2d-s-100-4.expected");
    let Ok(expected) = std::fs::read_to_string(&expected) else {
        return skip_or_fail("mpirun_discovery", &format!("no {}", expected.display()));
    };
    let prog = example("jac2d");
    if !prog.exists() {
        return skip_or_fail("mpirun_discovery", &format!("{} not built", prog.display()));
    }
    let mut cmd = Command::new("mpirun");
    if is_open_mpi() == Some(true) {
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .arg("--oversubscribe");
    }
    for node in ["node-a", "node-b"] {
        if node == "node-b" {
            cmd.arg(":");
        }
        cmd.args(["-n", "2", "env"])
            .arg(format!("FERRY_NODE={node}"))
            .arg(&prog)
            .args(["-s", "100"]);
    }
    let out = cmd
        .env("FERRY_BACKEND", "hybrid")
        .env("FERRY_STATS", "1")
        .env_remove("FERRY_RANK")
        .env_remove("FERRY_SIZE")
        .env_remove("FERRY_RENDEZVOUS")
        .env_remove("FERRY_JOB_ID")
        .env_remove("FERRY_NODE")
        .output()
        .expect("run mpirun");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout, expected, "stderr:\n{stderr}");
    // Ranks of different nodes talked over TCP.
    assert!(
        stderr.contains("tcp connections opened"),
        "no TCP statistics from the hybrid backend:\n{stderr}"
    );
}

/// The Slurm side of R2c without a Slurm installation: four processes get the variables `srun`
/// would give its tasks (`SLURM_PROCID`, `SLURM_STEP_NUM_TASKS`, `SLURM_JOB_ID`,
/// `SLURM_STEP_ID`, ...) and must find each other through the file store of that job step.
#[test]
fn slurm_task_variables_rendezvous_without_srun() {
    let expected = repo().join("../shared/conformance/jac2d-s-100-4.expected");
    let Ok(expected) = std::fs::read_to_string(&expected) else {
        return skip_or_fail("mpirun_discovery", &format!("no {}", expected.display()));
    };
    let prog = example("jac2d");
    if !prog.exists() {
        return skip_or_fail("mpirun_discovery", &format!("{} not built", prog.display()));
    }
    let job = format!("{}", 900_000 + std::process::id());
    for (step, backend) in ["tcp", "shm", "hybrid"].into_iter().enumerate() {
        let children: Vec<_> = (0..4)
            .map(|rank| {
                Command::new(&prog)
                    .args(["-s", "100"])
                    .env("FERRY_BACKEND", backend)
                    .env("SLURM_PROCID", rank.to_string())
                    .env("SLURM_LOCALID", rank.to_string())
                    .env("SLURM_STEP_NUM_TASKS", "4")
                    .env("SLURM_NTASKS", "4")
                    .env("SLURM_JOB_ID", &job)
                    .env("SLURM_STEP_ID", step.to_string())
                    .env("SLURMD_NODENAME", "localnode")
                    .env_remove("FERRY_RANK")
                    .env_remove("FERRY_SIZE")
                    .env_remove("FERRY_RENDEZVOUS")
                    .env_remove("FERRY_JOB_ID")
                    .env_remove("FERRY_NODE")
                    .env_remove("OMPI_COMM_WORLD_RANK")
                    .env_remove("OMPI_COMM_WORLD_SIZE")
                    .env("FERRY_GENERAL_TIMEOUT_MS", "30000")
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("start a task")
            })
            .collect();
        let mut stdout = String::new();
        for child in children {
            let out = child.wait_with_output().expect("task output");
            assert!(
                out.status.success(),
                "{backend}: task failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            stdout.push_str(&String::from_utf8_lossy(&out.stdout));
        }
        assert_eq!(
            stdout, expected,
            "{backend}: only rank 0 prints the reference"
        );
    }
}
