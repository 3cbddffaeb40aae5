//! Helpers of the C program tests (`c_programs.rs`, `laik_current.rs`): build `libferry` of
//! this profile, find the launcher and `cc`, compile `tests/c/NAME.c`, launch a program.
//! Each test binary uses a part of them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::cases::{run_group, RunResult};
use crate::support::{skip_or_fail, target_dir};

/// The backends every multi-process C test runs on.
pub const BACKENDS: [&str; 3] = ["tcp", "shm", "hybrid"];
/// How long one launched program may run.
pub const LIMIT: Duration = Duration::from_secs(120);

/// Builds `libferry` of this profile: `cargo test` builds no cdylib for an integration test,
/// so without this the programs would link whatever library an earlier build left.
fn build_library() {
    let dir = target_dir();
    let mut c = Command::new(env!("CARGO"));
    c.args(["build", "-p", "ferry-c"]);
    if dir.file_name().is_some_and(|n| n == "release") {
        c.arg("--release");
    }
    if let Some(root) = dir.parent() {
        c.env("CARGO_TARGET_DIR", root);
    }
    let out = c.output().expect("run cargo build -p ferry-c");
    assert!(
        out.status.success(),
        "cargo build -p ferry-c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The launcher and the library directory, if both are built.
pub fn tools(test: &str) -> Option<(PathBuf, PathBuf)> {
    static BUILD: std::sync::Once = std::sync::Once::new();
    BUILD.call_once(build_library);
    let dir = target_dir();
    let ferry = dir.join("ferry");
    let lib = dir.join("libferry.so");
    for p in [&ferry, &lib] {
        if !p.exists() {
            skip_or_fail(
                test,
                &format!(
                    "{} not built (cargo build --release --workspace)",
                    p.display()
                ),
            );
            return None;
        }
    }
    if Command::new("cc").arg("--version").output().is_err() {
        skip_or_fail(test, "no C compiler `cc` on PATH");
        return None;
    }
    Some((ferry, dir))
}

/// Compiles `tests/c/NAME.c` into a fresh directory; panics with the compiler's output if it
/// does not compile (warnings are errors).
pub fn compile(name: &str, libdir: &Path) -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out_dir = std::env::temp_dir().join(format!("ferry-c-tests-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).expect("temp dir");
    let exe = out_dir.join(name);
    let out = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(here.join("include"))
        .arg(here.join("tests/c").join(format!("{name}.c")))
        .arg("-L")
        .arg(libdir)
        .args(["-lferry", "-lm", "-o"])
        .arg(&exe)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc {name}.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

pub fn launch(
    ferry: &Path,
    libdir: &Path,
    backend: &str,
    n: usize,
    extra: &[&str],
    prog: &Path,
    args: &[String],
) -> RunResult {
    let mut c = Command::new(ferry);
    c.arg("run").arg("-n").arg(n.to_string());
    c.args(extra)
        .args(["--backend", backend])
        .arg(prog)
        .args(args);
    c.env("LD_LIBRARY_PATH", libdir);
    run_group(c, LIMIT).expect("start ferry run")
}

/// A compiled program of `tests/c/` with the launcher and library it runs with, and the
/// checks every C test makes of a run (exit status, output, LAIK's fatal error), so that each
/// test states only what its program must show.
pub struct Prog {
    pub ferry: PathBuf,
    pub libdir: PathBuf,
    pub exe: PathBuf,
    name: String,
}

impl Prog {
    /// Builds the library, finds the launcher and compiles `tests/c/NAME.c`; `None` (after
    /// [`skip_or_fail`] for `test`) when the tools are missing.
    pub fn build(test: &str, name: &str) -> Option<Prog> {
        let (ferry, libdir) = tools(test)?;
        let exe = compile(name, &libdir);
        Some(Prog {
            ferry,
            libdir,
            exe,
            name: name.to_string(),
        })
    }

    /// Another program of `tests/c/`, run with the same launcher and library.
    pub fn other(&self, name: &str) -> Prog {
        Prog {
            ferry: self.ferry.clone(),
            libdir: self.libdir.clone(),
            exe: compile(name, &self.libdir),
            name: name.to_string(),
        }
    }

    /// Runs the program on `backend` with `n` processes, launcher options `extra` and the
    /// program's arguments `args`.
    pub fn launch(&self, backend: &str, n: usize, extra: &[&str], args: &[&str]) -> RunResult {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        launch(
            &self.ferry,
            &self.libdir,
            backend,
            n,
            extra,
            &self.exe,
            &args,
        )
    }

    /// Names a run in assertion messages.
    pub fn what(&self, backend: &str, n: usize, args: &[&str]) -> String {
        format!("{} {} on {backend} -n {n}", self.name, args.join(" "))
    }

    /// Runs the program and asserts that it exited with `status`.
    pub fn expect(&self, backend: &str, n: usize, args: &[&str], status: i32) -> RunResult {
        let r = self.launch(backend, n, &[], args);
        assert_eq!(
            r.status,
            Some(status),
            "{}: exit status; stdout:\n{}stderr:\n{}",
            self.what(backend, n, args),
            r.stdout,
            r.stderr
        );
        r
    }

    /// Runs the program and asserts that it exited with status 0 printing exactly `stdout`.
    pub fn expect_stdout(&self, backend: &str, n: usize, args: &[&str], stdout: &str) {
        let r = self.expect(backend, n, args, 0);
        assert_eq!(r.stdout, stdout, "{}", self.what(backend, n, args));
    }

    /// Runs a program that checks facts itself and prints a line ending with `suffix` per
    /// fact that holds: asserts exit status 0, `count` such lines and no "wrong" in its
    /// output.
    pub fn expect_checks(
        &self,
        backend: &str,
        n: usize,
        args: &[&str],
        suffix: &str,
        count: usize,
    ) -> RunResult {
        let r = self.expect(backend, n, args, 0);
        let what = self.what(backend, n, args);
        let right = r.stdout.lines().filter(|l| l.ends_with(suffix)).count();
        assert_eq!(
            right, count,
            "{what}: lines ending `{suffix}` in:\n{}",
            r.stdout
        );
        assert!(
            !r.stdout.contains("wrong") && !r.stderr.contains("wrong"),
            "{what}: stdout:\n{}stderr:\n{}",
            r.stdout,
            r.stderr
        );
        r
    }

    /// Runs the program and asserts LAIK's fatal error: exit status 1, every one of `needles`
    /// in stderr, no panic or abort, and not `unreached` in stdout (what the program prints
    /// if the failing call returns; empty if nothing).
    pub fn expect_fatal(
        &self,
        backend: &str,
        n: usize,
        args: &[&str],
        needles: &[&str],
        unreached: &str,
    ) -> RunResult {
        let r = self.expect(backend, n, args, 1);
        assert!(
            unreached.is_empty() || !r.stdout.contains(unreached),
            "{}: the failing call returned:\n{}",
            self.what(backend, n, args),
            r.stdout
        );
        for s in needles.iter().chain(["LAIK error: rank "].iter()) {
            assert!(
                r.stderr.contains(s),
                "{}: no `{s}` in stderr:\n{}",
                self.what(backend, n, args),
                r.stderr
            );
        }
        no_abort(&r.stderr, &self.what(backend, n, args));
        r
    }
}

/// Asserts that a run's `stderr` shows no panic and no abort (`what` names the run).
pub fn no_abort(stderr: &str, what: &str) {
    for bad in ["panicked", "Aborted", "SIGABRT", "signal 6"] {
        assert!(
            !stderr.contains(bad),
            "{what}: `{bad}` in stderr:\n{stderr}"
        );
    }
}
