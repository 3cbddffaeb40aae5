//! Bounded state (issue 05) for what the data layer does not manage: generations of
//! fault-tolerant communicators and point-to-point tags on one generation. Each test loops
//! far longer than the slack it allows over tcp, shm and hybrid (ranks as threads) and checks
//! every rank's flow table (`Transport::flow_count`) stays flat. Figures: `cargo test
//! --release -p ferry --test bounded_flows -- --nocapture` (docs/PERFORMANCE.md, "Bounded
//! state").

#[path = "support/threads.rs"]
mod threads;

use ferry_coll::ReduceOp;
use ferry_ft::{Communicator, FailureMode, MessageMode, Options};

/// 1,000 generations of a SHRINK communicator (each a `shrink` without a failure, then an
/// allreduce and a ring of point-to-point messages on the new generation) keep the flow
/// tables flat: each generation's flows are retired when the members move on to the next
/// (before, a communicator kept the flows of every generation until it was freed).
#[test]
fn recovering_a_communicator_1000_times_keeps_flow_tables_flat() {
    for backend in threads::BACKENDS {
        let per_rank = threads::on_threads(backend, 4, "ftgen", |t| {
            let opts = Options::new(FailureMode::Shrink, MessageMode::Cont);
            let mut c = Communicator::new(t, opts).expect("ft communicator");
            let mut flows = Vec::new();
            for i in 0..1_000u32 {
                c = c.shrink().expect("shrink");
                let mut v = [1u32];
                c.allreduce(&mut v, &ReduceOp::Sum).expect("allreduce");
                assert_eq!(v[0], 4);
                let (n, r) = (c.size(), c.rank());
                let mut got = Vec::new();
                c.send((r + 1) % n, 5, &i.to_le_bytes()).expect("send");
                c.recv((r + n - 1) % n, 5, &mut got).expect("recv");
                assert_eq!(got, i.to_le_bytes());
                if (i + 1) % 100 == 0 {
                    flows.push(c.raw_transport().flow_count().expect("flow count"));
                }
            }
            c.finish().expect("finish");
            flows
        });
        for (rank, f) in per_rank.iter().enumerate() {
            threads::assert_flat_flows(&format!("ft generations, {backend}, rank {rank}"), f, 8);
        }
    }
}
