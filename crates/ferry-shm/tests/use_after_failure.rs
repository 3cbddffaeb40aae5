//! No use after failure (issue 05): once an exchange with single-copy sends has returned an
//! error, no peer reads the caller's buffer any more. Real processes: rank 0's exchange sends
//! 1 MiB to rank 1 (a single-copy descriptor pointing at rank 0's buffer) and fails because of
//! rank 2; rank 0 then overwrites the buffer, and rank 1 receives only afterwards. It must get
//! the original bytes or an error, never the overwritten ones.

mod common;

use std::time::Duration;

use common::{text, unique, wait_output, worker_cmd};

fn run(extra: &[(&str, String)]) {
    let job = unique("uaf");
    let mut env = vec![("FERRY_JOB_ID", job.clone())];
    env.extend(extra.iter().cloned());
    let kids: Vec<_> = (0..3)
        .map(|r| {
            worker_cmd(&env, Some(r), 3, &["abandon", "1048576"])
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    let outs: Vec<_> = kids
        .into_iter()
        .map(|k| wait_output(k, Duration::from_secs(30)))
        .collect();
    let (o0, o1) = (&outs[0], &outs[1]);
    let s0 = text(&o0.stdout);
    assert!(
        s0.contains("single copy true"),
        "the check needs single copy (process_vm_readv) between the ranks: {s0} {}",
        text(&o0.stderr)
    );
    assert!(s0.contains("exchange failed"), "rank 0: {s0}");
    assert!(s0.contains("overwritten"), "rank 0: {s0}");
    let s1 = text(&o1.stdout);
    let e1 = text(&o1.stderr);
    assert!(
        !s1.contains("STALE"),
        "rank 1 received bytes rank 0 wrote after its exchange failed: {s1}"
    );
    match o1.status.code() {
        // The original bytes: acceptable.
        Some(0) => assert!(s1.contains("original"), "{s1}"),
        // An error naming rank 0 (whose send failed) or rank 2 (why it failed).
        Some(3) => assert!(
            e1.contains("error peer: 0") || e1.contains("error peer: 2"),
            "rank 1: {e1}"
        ),
        other => panic!("rank 1 ended with {other:?}: {s1} {e1}"),
    }
    assert!(common::leftovers(&job).is_empty());
}

/// The exchange fails because rank 2 died.
#[test]
fn failed_exchange_by_dead_peer_leaves_nothing_to_read() {
    run(&[]);
}

/// The exchange fails on the optional operation timeout (rank 2 alive but late). The spin
/// phase (and with it the wait before an unclaimed descriptor is withdrawn to send fragments
/// instead) is longer than the timeout, so the descriptor is still offered when it fires.
#[test]
fn failed_exchange_by_operation_timeout_leaves_nothing_to_read() {
    run(&[
        ("FERRY_GENERAL_OPERATION_TIMEOUT_MS", "100".into()),
        ("FERRY_GENERAL_SPIN_US", "400000".into()),
    ]);
}
