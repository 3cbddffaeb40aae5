//! A long run that keeps creating groups and containers one after another (bounded state,
//! M2): shared by ferry-data's test over the in-memory backend and the facade's tests over
//! real backends (`#[path]`-included there).

use ferry_core::Transport;
use ferry_data::{Container, DataFlow, Instance, Partitioner, Partitioning, ReduceOp, Space};

/// Flow-table size and resident memory at one point of a churn run.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Iterations done.
    pub iteration: usize,
    /// `Transport::flow_count` of this rank.
    pub flows: usize,
    /// Resident set of the whole process in KiB (all ranks when they are threads).
    pub rss_kib: u64,
}

/// Resident set size of this process in KiB (`VmRSS` of /proc/self/status).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Runs `iterations` rounds; each creates a fresh group (a new generation) of the whole world
/// and a container, moves data over the group (block -> master), runs an allreduce on the
/// group and drops all of it. Samples every `iterations / samples` rounds.
pub fn churn(t: &mut dyn Transport, iterations: usize, samples: usize) -> Vec<Sample> {
    let mut inst = Instance::for_transport(t).expect("data instance");
    let world = inst.world().clone();
    let space = Space::new1(64).expect("space");
    let every = (iterations / samples.max(1)).max(1);
    let mut out = Vec::new();
    for i in 0..iterations {
        let g = inst.shrink(&world, &[]).expect("fresh group");
        let block = Partitioning::new(&space, &g, &Partitioner::block()).expect("block");
        let master = Partitioning::new(&space, &g, &Partitioner::Master).expect("master");
        let mut c = Container::<f64>::new(&mut inst, "churn", &space);
        c.switch_to(t, &block, DataFlow::None, None)
            .expect("first switch");
        c.fill(1.0);
        c.switch_to(t, &master, DataFlow::Preserve, None)
            .expect("block -> master");
        let mut sum = [c.local_data().iter().sum::<f64>()];
        ferry_coll::allreduce(t, &g, &mut sum, &ReduceOp::Sum).expect("allreduce");
        assert_eq!(sum[0], 64.0, "iteration {i}");
        drop((c, block, master, g));
        if (i + 1) % every == 0 {
            out.push(Sample {
                iteration: i + 1,
                flows: t.flow_count().expect("the backend counts its flows"),
                rss_kib: rss_kib(),
            });
        }
    }
    inst.finalize(t).expect("finalize");
    out
}

/// Checks that flow tables and memory stayed flat from the first sample on: the largest flow
/// count of any later sample is at most `slack` flows above the first one, and the process
/// grew by at most `rss_slack_kib` after the first tenth of the run.
pub fn assert_flat(label: &str, samples: &[Sample], slack: usize, rss_slack_kib: u64) {
    let first = samples.first().expect("samples");
    let last = samples.last().expect("samples");
    let max_flows = samples.iter().map(|s| s.flows).max().unwrap_or(0);
    eprintln!(
        "{label}: flows after {} iterations {}, after {} {} (max {max_flows}); RSS {} KiB -> {} KiB",
        first.iteration, first.flows, last.iteration, last.flows, first.rss_kib, last.rss_kib
    );
    assert!(
        max_flows <= first.flows + slack,
        "{label}: flow table grew from {} to {max_flows}: {samples:?}",
        first.flows
    );
    assert!(
        last.rss_kib <= first.rss_kib + rss_slack_kib,
        "{label}: RSS grew from {} KiB to {} KiB",
        first.rss_kib,
        last.rss_kib
    );
}
