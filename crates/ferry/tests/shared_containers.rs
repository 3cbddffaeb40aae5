//! Shared containers (S3) in real jobs on the shm backend: switches between block
//! partitionings (halo and full redistribution) give the same values as the message path, the
//! data examples print the same with `data.shared_containers` on.
//!
//! They need `target/<profile>/ferry` and the examples (`cargo build --bins --examples`);
//! without them each test says so and skips, or fails when `CI=true`.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use support::procs::built_tool;
use support::run_limited;

fn run(ferry: &PathBuf, n: usize, shared: bool, prog: &PathBuf, args: &[&str]) -> String {
    let mut cmd = Command::new(ferry);
    cmd.args(["run", "-n", &n.to_string()])
        .arg(prog)
        .args(args)
        .env("FERRY_BACKEND", "shm")
        .env(
            "FERRY_DATA_SHARED_CONTAINERS",
            if shared { "true" } else { "false" },
        )
        // Small problems: share every pair (halo rows too), not only those of 32 KiB and more.
        .env("FERRY_DATA_SHARED_MIN_BYTES", "0");
    let (out, _) = run_limited(&mut cmd, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{prog:?} {args:?} on {n} ranks (shared {shared}) failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn shared_switches_give_the_values_of_the_message_path() {
    let Some((ferry, bench)) = built_tool("shared_containers", "transition_bench") else {
        return;
    };
    for n in [2, 3, 4] {
        // 2 MiB, 3 round trips; every cell is checked after every switch in both modes.
        let out = run(&ferry, n, false, &bench, &["-c", "2", "3"]);
        for name in ["halo", "redistribute"] {
            let digest = |mode: &str| {
                out.lines()
                    .find(|l| l.starts_with(&format!("{name} {mode}: digest ")))
                    .unwrap_or_else(|| panic!("no {name} {mode} digest in:\n{out}"))
                    .rsplit(' ')
                    .next()
                    .unwrap()
                    .to_string()
            };
            assert_eq!(
                digest("copy"),
                digest("shared"),
                "{n} ranks, {name}:\n{out}"
            );
        }
    }
}

#[test]
fn data_examples_print_the_same_with_shared_containers() {
    let cases: &[(&str, &[&str])] = &[
        ("jac2d", &["-s", "200", "30"]),
        ("jac1d", &["20", "30"]),
        ("jac3d", &["-s", "30", "10"]),
        ("markov", &["2000", "4", "5"]),
        ("spmv2", &["3", "400"]),
    ];
    for (example, args) in cases {
        let Some((ferry, prog)) = built_tool("shared_containers", example) else {
            return;
        };
        for n in [3, 4] {
            let copy = run(&ferry, n, false, &prog, args);
            let shared = run(&ferry, n, true, &prog, args);
            let strip = |s: &str| -> Vec<String> {
                // Timing lines differ from run to run; values do not.
                s.lines()
                    .filter(|l| !l.contains("time") && !l.contains(" ms") && !l.contains("sec"))
                    .map(str::to_string)
                    .collect()
            };
            assert_eq!(
                strip(&copy),
                strip(&shared),
                "{example} {args:?} on {n} ranks"
            );
        }
    }
}
