//! Virtual topologies through the launcher, on every multi-process backend (X6, X7): Cartesian
//! neighbour exchange against hand-computed neighbours, and a 64-rank jac1d whose ranks talk to
//! their two grid neighbours only (collectives included), read from `FERRY_STATS`.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::procs::{built_tools, job, text};
use support::run_limited;

const BACKENDS: [&str; 3] = ["tcp", "shm", "hybrid"];

/// 2 x 3 grid, ranks row-major:
/// ```text
///   0 1 2
///   3 4 5
/// ```
/// Columns: dimension 0 behind, ahead; dimension 1 behind, ahead (`-`: the grid ends).
const ROWS_OPEN_COLUMNS_WRAP: &str = "\
cart 0 (0,0): - 3 2 1
cart 1 (0,1): - 4 0 2
cart 2 (0,2): - 5 1 0
cart 3 (1,0): 0 - 5 4
cart 4 (1,1): 1 - 3 5
cart 5 (1,2): 2 - 4 3
cart sum 15
";

/// The same grid with dimension 0 periodic (extent 2: both neighbours are the other row) and
/// dimension 1 open.
const ROWS_WRAP_COLUMNS_OPEN: &str = "\
cart 0 (0,0): 3 3 - 1
cart 1 (0,1): 4 4 0 2
cart 2 (0,2): 5 5 1 -
cart 3 (1,0): 0 0 - 4
cart 4 (1,1): 1 1 3 5
cart 5 (1,2): 2 2 4 -
cart sum 15
";

fn sorted_lines(s: &str) -> String {
    let mut lines: Vec<&str> = s.lines().collect();
    lines.sort_unstable();
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn cartesian_neighbours_match_the_hand_computed_grid() {
    let Some((ferry, ex)) = built_tools(
        "cartesian_neighbours_match_the_hand_computed_grid",
        &["t_cart"],
    ) else {
        return;
    };
    for b in BACKENDS {
        for (periods, want) in [
            (["0", "1"], ROWS_OPEN_COLUMNS_WRAP),
            (["1", "0"], ROWS_WRAP_COLUMNS_OPEN),
        ] {
            let (out, _) = run_limited(
                &mut job(
                    &ferry,
                    6,
                    b,
                    false,
                    &ex[0],
                    &["2", "3", periods[0], periods[1]],
                ),
                Duration::from_secs(60),
            );
            let stdout = text(&out.stdout);
            assert!(out.status.success(), "{b}: {stdout}{}", text(&out.stderr));
            assert_eq!(sorted_lines(&stdout), sorted_lines(want), "{b} {periods:?}");
        }
    }
}

/// The ranks each rank exchanged messages with, from the `peer N:` lines of `FERRY_STATS`.
fn peers_per_rank(stderr: &str, size: usize) -> Vec<BTreeSet<usize>> {
    let mut out = vec![BTreeSet::new(); size];
    for l in stderr.lines() {
        let Some(rest) = l.strip_prefix("ferry stats rank ") else {
            continue;
        };
        let mut w = rest.split_whitespace();
        let (Some(r), Some("peer"), Some(p)) = (w.next(), w.next(), w.next()) else {
            continue;
        };
        if let (Ok(r), Ok(p)) = (r.parse::<usize>(), p.trim_end_matches(':').parse::<usize>()) {
            if r < size {
                out[r].insert(p);
            }
        }
    }
    out
}

/// jac1d declares a 1-D grid: at 64 ranks every rank talks to `r - 1` and `r + 1` only —
/// halo exchange, residuum and final sums, and the finishing barrier (before the grid, the
/// rank-ordered sums went through rank 0 and the barrier was a dissemination: 11-16 peers).
#[test]
fn jac1d_at_64_ranks_talks_to_its_two_neighbours_only() {
    let Some((ferry, ex)) = built_tools(
        "jac1d_at_64_ranks_talks_to_its_two_neighbours_only",
        &["jac1d"],
    ) else {
        return;
    };
    let n = 64;
    let mut outputs = Vec::new();
    for b in BACKENDS {
        let (out, _) = run_limited(
            job(&ferry, n, b, false, &ex[0], &["20", "30"]).env("FERRY_STATS", "1"),
            Duration::from_secs(180),
        );
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{b}: {stderr}");
        let peers = peers_per_rank(&stderr, n);
        for (r, p) in peers.iter().enumerate() {
            let want: BTreeSet<usize> = [r.wrapping_sub(1), r + 1]
                .into_iter()
                .filter(|&x| x < n)
                .collect();
            assert_eq!(p, &want, "{b}: rank {r} talked to {p:?}");
        }
        outputs.push(text(&out.stdout));
    }
    assert!(
        outputs[0].contains("Global value sum after 30 iterations"),
        "{}",
        outputs[0]
    );
    assert_eq!(outputs[0], outputs[1], "tcp and shm print the same digits");
    assert_eq!(
        outputs[0], outputs[2],
        "tcp and hybrid print the same digits"
    );
}
