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
