//! S2 with processes (the `hybrid_worker` example): 4 ranks placed on 2 "nodes" by
//! `FERRY_NODE`, rendezvous through the job's file store; every rank agrees on the node map,
//! the ring allreduce (traffic within and across nodes) is right, and no /dev/shm segment or
//! store directory is left behind.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `target/<profile>/examples/hybrid_worker`, built by `cargo test` with the test binaries.
fn worker() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile> directory");
    let w = dir.join("examples").join("hybrid_worker");
    assert!(
        w.exists(),
        "{} missing: build it with `cargo build -p ferry-hybrid --examples`",
        w.display()
    );
    w
}

fn wait_output(mut child: std::process::Child, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().expect("collect output"),
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("collect output");
                panic!(
                    "worker did not finish within {limit:?}; stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("wait: {e}"),
        }
    }
}

#[test]
fn hybrid_processes_on_two_nodes() {
    let job = format!("hyb{}", std::process::id());
    let store_dir = std::env::temp_dir().join(format!("ferry-hybrid-test-{}", std::process::id()));
    std::fs::create_dir_all(&store_dir).expect("store directory");
    let size = 4;
    let kids: Vec<_> = (0..size)
        .map(|r| {
            Command::new(worker())
                .args(["40", "100000"])
                .env_remove("FERRY_RENDEZVOUS")
                .env_remove("FERRY_CONFIG")
                .env("FERRY_BACKEND", "hybrid")
                .env("FERRY_JOB_ID", &job)
                .env("FERRY_RANK", r.to_string())
                .env("FERRY_SIZE", size.to_string())
                .env("FERRY_NODE", format!("node{}", r / 2))
                .env("FERRY_SECRET", "hybrid-test-secret")
                .env("FERRY_STORE_DIR", &store_dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn hybrid_worker")
        })
        .collect();
    for (r, k) in kids.into_iter().enumerate() {
        let o = wait_output(k, Duration::from_secs(60));
        let s = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "rank {r} failed: {:?}\nstdout: {s}\nstderr: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        let mut lines = s.lines();
        assert_eq!(lines.next(), Some("nodes [0, 0, 1, 1]"), "rank {r}: {s}");
        assert_eq!(
            lines.next(),
            Some(format!("rank {r} of 4 ok").as_str()),
            "{s}"
        );
    }
    let shm_left: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(&job))
                .collect()
        })
        .unwrap_or_default();
    assert!(shm_left.is_empty(), "{shm_left:?}");
    let job_dir = ferry_core::file_store::FileStore::job_dir(&store_dir, &job);
    assert!(
        !job_dir.exists(),
        "store left behind: {}",
        job_dir.display()
    );
    let _ = std::fs::remove_dir_all(&store_dir);
}
