//! Bounded state (M2): 100,000 groups and containers created one after another over the
//! in-memory backend keep the flow tables and the process's memory flat. Run with
//! `--nocapture` for the figures (docs/PERFORMANCE.md).

use ferry_core::mem::MemTransport;

mod support;
use support::churn::{assert_flat, churn};

#[test]
fn creating_100k_groups_and_containers_keeps_flow_tables_flat_over_mem() {
    let per_rank = MemTransport::run(4, |mut t| churn(&mut t, 100_000, 10));
    for (rank, samples) in per_rank.iter().enumerate() {
        assert_flat(&format!("mem, 4 ranks, rank {rank}"), samples, 8, 16 * 1024);
    }
}
