//! Helpers shared by the multi-process test files: the worker and launcher binaries, unique
//! job names, /dev/shm inspection and waiting with a deadline.
#![allow(dead_code)]

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `target/<profile>`, found from this test binary (`target/<profile>/deps/<test>-*`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile> directory")
        .to_path_buf()
}

/// `target/<profile>/examples/shm_worker`, built by `cargo test` with the test binaries.
pub fn worker() -> PathBuf {
    let w = target_dir().join("examples").join("shm_worker");
    assert!(
        w.exists(),
        "{} missing: build it with `cargo build -p ferry-shm --examples`",
        w.display()
    );
    w
}

/// The `ferry` launcher of the same profile. Tests that need it fail (never pass silently)
/// when it has not been built.
pub fn ferry() -> PathBuf {
    let f = target_dir().join("ferry");
    assert!(
        f.exists(),
        "{} missing: these tests start jobs through the launcher; build it with \
         `cargo build -p ferry-cli` (same profile) first",
        f.display()
    );
    f
}

pub fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("t{}-{}-{}", std::process::id(), tag, nanos)
}

/// Every /dev/shm entry whose name mentions `job`.
pub fn leftovers(job: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(job))
                .collect()
        })
        .unwrap_or_default()
}

/// A worker process of a job, with the test's environment cleaned of ferry variables.
pub fn worker_cmd(
    env: &[(&str, String)],
    rank: Option<usize>,
    size: usize,
    args: &[&str],
) -> Command {
    let mut c = Command::new(worker());
    c.args(args)
        .env_remove("FERRY_RANK")
        .env_remove("FERRY_JOB_ID")
        .env_remove("FERRY_SHM_JOB")
        .env_remove("FERRY_SEGMENT_FD")
        .env_remove("FERRY_CONFIG")
        .env_remove("FERRY_GENERAL_TIMEOUT_MS")
        .env_remove("FERRY_GENERAL_OPERATION_TIMEOUT_MS")
        .env("FERRY_SIZE", size.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    if let Some(r) = rank {
        c.env("FERRY_RANK", r.to_string());
    }
    c
}

/// Waits for a child with a deadline, killing it if it overstays.
pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().expect("collect output"),
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("collect output");
                panic!(
                    "process did not finish within {limit:?}; stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => panic!("wait: {e}"),
        }
    }
}

/// Reads the rest of a pipe on a thread (so a child never blocks on a full pipe).
pub fn drain<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

pub fn sigkill(pid: u32) {
    let p = rustix::process::Pid::from_raw(pid as i32).expect("pid");
    let _ = rustix::process::kill_process(p, rustix::process::Signal::Kill);
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
