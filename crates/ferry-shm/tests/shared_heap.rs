//! Large messages from a sender's shared heap (`ferry_shm::SharedHeap`) between real
//! processes: the receiver copies them from its mapping of the sender's region, every byte
//! right, also when the sender frees a buffer and allocates the next one in its place (a new
//! region that the receiver must not confuse with the mapping it keeps of the old one).

mod common;

use std::time::Duration;

use common::{leftovers, text, unique, wait_output, worker_cmd};

fn run(pipeline: &str, bytes: usize) {
    let job = unique("heap");
    let iters = 30;
    let env = [
        ("FERRY_JOB_ID", job.clone()),
        ("FERRY_SHM_PIPELINE", pipeline.to_string()),
        ("SHM_WORKER_SHARED_HEAP", "1".to_string()),
        // Descriptors wait this long to be claimed before going through the ring instead, so
        // a loaded machine still exercises the mapped copy.
        ("FERRY_GENERAL_SPIN_US", "20000".to_string()),
        ("FERRY_GENERAL_OPERATION_TIMEOUT_MS", "30000".to_string()),
    ];
    let kids: Vec<_> = (0..2)
        .map(|r| {
            worker_cmd(
                &env,
                Some(r),
                2,
                &["heap", &bytes.to_string(), &iters.to_string()],
            )
            .spawn()
            .expect("spawn worker")
        })
        .collect();
    let outs: Vec<_> = kids
        .into_iter()
        .map(|k| wait_output(k, Duration::from_secs(60)))
        .collect();
    for (r, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "rank {r}: {:?} {} {}",
            o.status,
            text(&o.stdout),
            text(&o.stderr)
        );
    }
    let s1 = text(&outs[1].stdout);
    let copies: u64 = s1
        .trim()
        .strip_prefix("heap ok ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("rank 1: {s1}"));
    assert!(
        copies >= iters / 2,
        "only {copies} of {iters} messages were copied from the shared heap: {s1}"
    );
    assert!(leftovers(&job).is_empty(), "{:?}", leftovers(&job));
}

/// Pipelining on (the default on a machine with a core per rank): shared-heap buffers still
/// go by descriptor.
#[test]
fn heap_messages_arrive_intact_when_pipelined() {
    run("on", 1 << 20);
}

/// Single copy otherwise; 64 KiB, the heap's smallest region.
#[test]
fn heap_messages_arrive_intact_with_single_copy() {
    run("off", 64 << 10);
}
