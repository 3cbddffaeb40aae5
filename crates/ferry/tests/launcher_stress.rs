//! Slow launcher stress runs, ignored by default (run them with `cargo test --release -p ferry
//! --test launcher_stress -- --include-ignored` after `cargo build --release --bins
//! --examples`): many jobs in a row that lose a random rank to SIGKILL at a random moment (the
//! launcher must name it, end the others and leave no process behind), and heavy output from
//! many ranks at once (whole lines only).

mod support;

use std::path::PathBuf;

use std::process::Command;
use std::time::{Duration, Instant};
use support::pids::is_dead;
use support::{run_limited, target_dir};

/// A built binary; these tests run only when asked for, so a missing one is a failure.
fn tool(rel: &str) -> PathBuf {
    let p = target_dir().join(rel);
    assert!(
        p.exists(),
        "{} not built (run `cargo build --release --bins --examples` first)",
        p.display()
    );
    p
}

/// A small deterministic generator, so a failing iteration can be replayed from its number.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x
}

#[test]
#[ignore = "stress: 40 jobs in a row, each losing a rank; run with --include-ignored"]
fn random_rank_killed_at_random_times() {
    let (ferry, t_fail) = (tool("ferry"), tool("examples/t_fail"));
    for i in 0..40u64 {
        let ranks = 2 + (mix(i) % 15) as usize;
        let victim = (mix(i + 1000) % ranks as u64) as usize;
        let delay = mix(i + 2000) % 400;
        let mode = if i % 2 == 0 { "kill" } else { "exit3" };
        let start = Instant::now();
        let out = run_limited(
            Command::new(&ferry)
                .args(["run", "-n", &ranks.to_string()])
                .arg(&t_fail)
                .args([victim.to_string(), mode.to_string(), delay.to_string()]),
            Duration::from_secs(60),
        )
        .0;
        let elapsed = start.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let want = if mode == "kill" {
            format!("ferry: rank {victim} was killed by signal 9 (SIGKILL)")
        } else {
            format!("ferry: rank {victim} exited with code 3")
        };
        assert!(stderr.contains(&want), "iteration {i}: {stderr}");
        assert_eq!(
            out.status.code(),
            Some(if mode == "kill" { 137 } else { 3 }),
            "iteration {i}"
        );
        assert!(
            elapsed < Duration::from_secs(20),
            "iteration {i}: {elapsed:?}"
        );
        let pids: Vec<u32> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                l.split_once(" pid ")
                    .and_then(|(_, p)| p.trim().parse().ok())
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        for p in pids {
            assert!(is_dead(p), "iteration {i}: pid {p} survived the job");
        }
    }
}

#[test]
#[ignore = "stress: 32 ranks printing 1.6 million lines; run with --include-ignored"]
fn many_ranks_heavy_output() {
    let (ferry, t_print) = (tool("ferry"), tool("examples/t_print_lines"));
    let (ranks, lines) = (32usize, 50_000usize);
    let out = run_limited(
        Command::new(&ferry)
            .args(["run", "-n", &ranks.to_string()])
            .arg(&t_print)
            .arg(lines.to_string()),
        Duration::from_secs(300),
    )
    .0;
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut next = vec![0usize; ranks];
    for line in stdout.lines() {
        let w: Vec<&str> = line.splitn(5, ' ').collect();
        assert!(
            w.len() >= 4 && w[0] == "rank" && w[2] == "line",
            "mangled `{line}`"
        );
        let r: usize = w[1].parse().expect("rank number");
        let i: usize = w[3].parse().expect("line number");
        assert_eq!(i, next[r], "rank {r}: lines lost or reordered");
        next[r] += 1;
    }
    assert!(next.iter().all(|&n| n == lines), "{next:?}");
}
