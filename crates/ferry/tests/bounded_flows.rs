//! Bounded state (issue 05) for what the data layer does not manage: generations of
//! fault-tolerant communicators (over tcp, shm and hybrid) and point-to-point tags on one
//! generation (over the backends that forget idle point-to-point flows so far: mem). Each test
//! loops far longer than the slack it allows (ranks as threads) and checks every rank's flow
//! table (`Transport::flow_count`) stays flat. Figures: `cargo test
//! --release -p ferry --test bounded_flows -- --nocapture` (docs/PERFORMANCE.md, "Bounded
//! state").

#[path = "support/threads.rs"]
mod threads;

use ferry_coll::ReduceOp;
use ferry_core::{Exchange, MsgKey};
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

/// Backends whose point-to-point flows are forgotten once idle: mem (receive-side numbering
/// over in-order channels, `ferry_proto::FifoFlows`) and tcp (a retirement handshake once a
/// rank's outgoing flows pass 256). shm, and so hybrid, still keep a flow per tag and peer
/// (docs/PERFORMANCE.md, "Point-to-point tags").
// tcp's retirement handshake is off by default (`EndpointConfig::retire_p2p_above`).
const P2P_RETIRING: [&str; 1] = ["mem"];

/// Flows a rank may keep on top of its first sample. tcp retires in batches once a rank's
/// outgoing flows pass 256 (`EndpointConfig::retire_p2p_above`), so its tables swing between
/// nearly nothing and that bound on both the sending and the receiving side, plus flows whose
/// answer is still on its way under load (up to about 620 seen): it may hold at most
/// 4 x 256 + 64 flows, whatever its first sample (without retirement it holds 40,000).
fn p2p_slack(backend: &str, first: usize) -> usize {
    if backend == "tcp" {
        (4 * 256 + 64usize).saturating_sub(first)
    } else {
        8
    }
}

/// 20,000 iterations of a ring on a new tag each (two messages per tag, so the second one may
/// wait while the first is taken), then 10,000 more that reuse the first tags: every rank's
/// flow table stays at what is in flight, and a reused tag starts again in order (each
/// message carries its iteration and place, checked on receipt).
#[test]
fn a_new_tag_per_iteration_keeps_flow_tables_flat() {
    const NEW: u32 = 20_000;
    const REUSED: u32 = 10_000;
    for backend in P2P_RETIRING {
        let per_rank = threads::on_threads(backend, 4, "p2ptags", |mut t| {
            let (r, n) = (t.rank(), t.size());
            let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
            let mut flows = Vec::new();
            for i in 0..NEW + REUSED {
                let key = MsgKey::user(i % NEW);
                let first = (2 * i).to_le_bytes();
                let second = (2 * i + 1).to_le_bytes();
                let (mut a, mut b) = (Vec::new(), Vec::new());
                let mut ex = Exchange::new();
                ex.send(next, key, &first);
                ex.send(next, key, &second);
                ex.recv(prev, key, &mut a);
                ex.recv(prev, key, &mut b);
                t.exchange(&mut ex).expect("ring exchange");
                drop(ex);
                assert_eq!(
                    (a, b),
                    (first.to_vec(), second.to_vec()),
                    "rank {r} iteration {i}"
                );
                if (i + 1) % ((NEW + REUSED) / 10) == 0 {
                    flows.push(t.flow_count().expect("flow count"));
                }
            }
            flows
        });
        for (rank, f) in per_rank.iter().enumerate() {
            threads::assert_flat_flows(
                &format!("p2p tags, {backend}, rank {rank}"),
                f,
                p2p_slack(backend, f[0]),
            );
        }
    }
}
