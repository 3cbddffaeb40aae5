//! Several fault-tolerant communicators per process, with real processes under
//! `ferry run --keep-going` on tcp, shm and hybrid (issue 07): a SHRINK/NOP world and its
//! BLANK/CONT halves (`t_ft_comms`); rank 4 is SIGKILLed. The half without the dead rank
//! never notices, the half with it refuses only what involves it, the world fails everything
//! until it is shrunk, and a revoke of one half leaves the world working.
//!
//! Needs `target/<profile>/ferry` and the examples (`cargo build --bins --examples`); without
//! them the test fails under `CI=true` and says why it skips otherwise.

mod support;

use std::time::Duration;

use support::procs::{built_tools, job};
use support::run_limited;

const BACKENDS: &[&str] = &["tcp", "shm", "hybrid"];

#[test]
fn communicators_with_different_modes_survive_a_death_independently() {
    let test = "communicators_with_different_modes_survive_a_death_independently";
    let Some((ferry, ex)) = built_tools(test, &["t_ft_comms"]) else {
        return;
    };
    for backend in BACKENDS {
        let (out, took) = run_limited(
            &mut job(&ferry, 6, backend, true, &ex[0], &[]),
            Duration::from_secs(60),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let ctx = format!("{backend} ({took:?}):\n{stdout}\n{stderr}");
        assert!(!stderr.contains("t_ft_comms: error"), "{ctx}");
        let has = |line: String| assert!(stdout.contains(&line), "missing `{line}` in {ctx}");
        for r in [1, 3, 5] {
            has(format!(
                "rank {r}: comms ok half 1 across the failure, generation 0"
            ));
            has(format!("rank {r}: comms ok half 1 revoked"));
            has(format!(
                "rank {r}: comms ok half 1 shrink 1 members [1, 3, 5]"
            ));
        }
        for r in [0, 2] {
            has(format!("rank {r}: comms ok half 0 p2p across the failure"));
            has(format!(
                "rank {r}: comms ok half 0 recovered generation 1 size 3 live 2"
            ));
        }
        let recv = stdout
            .lines()
            .find_map(|l| l.strip_prefix("rank 0: comms ok half 0 recv error after "))
            .unwrap_or_else(|| panic!("no receive error line in {ctx}"));
        let ms: u64 = recv
            .split(' ')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad receive error line in {ctx}"));
        // The victim dies 300 ms after the receive is posted; the error follows within 1 s.
        assert!(ms < 300 + 1000, "{ctx}");
        for r in [0, 1, 2, 3, 5] {
            has(format!("rank {r}: comms ok world error names rank 4"));
            has(format!(
                "rank {r}: comms ok world shrink 1 members [0, 1, 2, 3, 5]"
            ));
            has(format!(
                "rank {r}: comms ok world works after the revoke of half 1"
            ));
            has(format!("rank {r}: comms ok done sum 5"));
        }
        assert!(!stdout.contains("rank 4: comms ok"), "{ctx}");
    }
}
