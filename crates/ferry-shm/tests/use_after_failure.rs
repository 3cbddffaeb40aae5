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

/// The exchange fails because rank 2 died (single copy: the descriptor is withdrawn or
/// waited for).
#[test]
fn failed_exchange_by_dead_peer_leaves_nothing_to_read() {
    run(&[("FERRY_SHM_PIPELINE", "off".into())]);
}

/// The same with the message pipelined through the ring: the exchange fails with part of it
/// in the ring; rank 1 never takes that part for the whole message.
#[test]
fn failed_pipelined_exchange_by_dead_peer_leaves_nothing_to_read() {
    run(&[("FERRY_SHM_PIPELINE", "on".into())]);
}

/// The exchange fails on the optional operation timeout (rank 2 alive but late). The spin
/// phase (and with it the wait before an unclaimed descriptor is withdrawn to send fragments
/// instead) is longer than the timeout, so the descriptor is still offered when it fires.
#[test]
fn failed_exchange_by_operation_timeout_leaves_nothing_to_read() {
    run(&[
        ("FERRY_GENERAL_OPERATION_TIMEOUT_MS", "100".into()),
        ("FERRY_GENERAL_SPIN_US", "400000".into()),
        ("FERRY_SHM_PIPELINE", "off".into()),
    ]);
}

/// The same with the message pipelined through the ring.
#[test]
fn failed_pipelined_exchange_by_operation_timeout_leaves_nothing_to_read() {
    run(&[
        ("FERRY_GENERAL_OPERATION_TIMEOUT_MS", "100".into()),
        ("FERRY_GENERAL_SPIN_US", "400000".into()),
        ("FERRY_SHM_PIPELINE", "on".into()),
    ]);
}

/// The same with rank 0's buffer in its shared heap (`SharedHeap`): the descriptor names the
/// region, which rank 1 would copy from through its own mapping (no process_vm_readv that
/// fails once rank 0 is gone), so only the single-copy protocol keeps it from reading the
/// overwritten bytes. Large messages are pipelined otherwise, as by default.
#[test]
fn failed_shared_heap_exchange_by_dead_peer_leaves_nothing_to_read() {
    run(&[
        ("FERRY_SHM_PIPELINE", "on".into()),
        ("SHM_WORKER_SHARED_HEAP", "1".into()),
    ]);
}

/// The same, failing on the operation timeout while the descriptor is still offered.
#[test]
fn failed_shared_heap_exchange_by_operation_timeout_leaves_nothing_to_read() {
    run(&[
        ("FERRY_GENERAL_OPERATION_TIMEOUT_MS", "100".into()),
        ("FERRY_GENERAL_SPIN_US", "400000".into()),
        ("FERRY_SHM_PIPELINE", "on".into()),
        ("SHM_WORKER_SHARED_HEAP", "1".into()),
    ]);
}

/// The same through `progress_exchange`, which the data layer calls directly for its first
/// pass: an error there (here a message longer than its fixed receive buffer) settles the
/// exchange as well. Ranks are threads, so the reused buffer is plain process memory.
#[test]
fn failed_progress_pass_leaves_nothing_to_read() {
    progress_pass_fails(ferry_core::config::Pipeline::Off);
}

/// The same with the message pipelined through the ring.
#[test]
fn failed_pipelined_progress_pass_leaves_nothing_to_read() {
    progress_pass_fails(ferry_core::config::Pipeline::On);
}

fn progress_pass_fails(pipeline: ferry_core::config::Pipeline) {
    use ferry_core::config::SingleCopy;
    use ferry_core::{Config, Exchange, MsgKey, Transport};
    use ferry_shm::ShmTransport;

    let mut cfg = Config::default();
    cfg.shm.single_copy = SingleCopy::Auto;
    cfg.shm.pipeline = pipeline;
    cfg.shm.single_copy_threshold = 4096;
    cfg.general.operation_timeout_ms = 5_000;
    // Rank 2's message is in the ring before rank 0's pass (not merely 50 ms later, which a
    // loaded machine does not guarantee: the pass then found nothing wrong, rank 0's check
    // panicked and rank 1 waited for it at the barrier forever).
    let sent = std::sync::Barrier::new(2);
    let overwritten = std::sync::Barrier::new(2);
    let received = std::sync::Barrier::new(2);
    let out = ShmTransport::run_threads(3, &cfg, |mut t| -> Result<String, String> {
        let key = MsgKey::user(3);
        match t.rank() {
            0 => {
                sent.wait();
                let mut buf = vec![0xa5u8; 1 << 20];
                let mut small = [0u8; 5];
                let mut ex = Exchange::new();
                ex.send(1, key, &buf);
                ex.recv_into(2, key, &mut small);
                let r = t.progress_exchange(&mut ex);
                drop(ex);
                let e = r.expect_err("10 bytes do not fit 5");
                buf.fill(0x5a);
                overwritten.wait();
                // Keep the buffer mapped until rank 1 has received.
                received.wait();
                std::hint::black_box(&buf);
                Ok(format!("failed: {e}"))
            }
            1 => {
                overwritten.wait();
                let mut got = Vec::new();
                let r = t.recv(0, key, &mut got);
                received.wait();
                match r {
                    Ok(()) if got.contains(&0x5a) => Err("STALE: read the reused buffer".into()),
                    Ok(()) if got.iter().all(|&b| b == 0xa5) => Ok("original".into()),
                    Ok(()) => Err("wrong bytes".into()),
                    Err(e) => Ok(format!("error: {e}")),
                }
            }
            _ => {
                let r = t.send(0, key, &[7u8; 10]).map_err(|e| e.to_string());
                sent.wait();
                r?;
                Ok("sent".into())
            }
        }
    })
    .expect("threads");
    for (r, o) in out.into_iter().enumerate() {
        let o = o.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        eprintln!("rank {r}: {o}");
    }
}
