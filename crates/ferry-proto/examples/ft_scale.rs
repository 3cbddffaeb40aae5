//! Agreement at scale: simulated agreements among 1,000 and 10,000 ranks (or the sizes given as
//! arguments) with 0 to 3 failures, counting messages, bytes and rounds until every survivor has
//! decided (a shrink needs nothing more: each survivor builds the new communicator from the
//! decision), then the worst of ten schedules with random delays and three random deaths, then
//! one flood (revoke) from rank 0. Prints Markdown tables.
//!
//! ```text
//! cargo run --release -p ferry-proto --example ft_scale [N ...]
//! ```
//!
//! Every hop takes one round and every death is noticed by each survivor two rounds later.
//! Failures: 1 = the root (rank 0) dies just before it would decide; 2 = also rank N/2 dead
//! before the agreement (every rank knows it at the start); 3 = also the next root (rank 1) dies
//! just before it would decide in its turn. Each run is checked like the seeded simulation (all
//! survivors decide the same value and failed set, at most 4N(f+1) messages). The flood's
//! failures are rank 0's nearest neighbours (1, then 2), dead as it starts.

#[path = "../tests/ft_harness/mod.rs"]
mod harness;

const NOTICE: u64 = 2;

/// Schedules per size in the random-delay table.
const SEEDS: u64 = 10;

/// Random delays (1 to 10 rounds per hop, 5 to 20 for a notice, start times spread over 20),
/// and three deaths: the root at a random time during the agreement, a random rank in the middle
/// of sending, another at a random time.
fn random_run(n: usize, seed: u64) -> harness::AgreeRun {
    let mut r = harness::Rng(seed);
    let l = harness::ceil_log2(n);
    let mut kills = vec![(harness::When::At(r.range(0, 10 * l)), 0)];
    let a = r.range(1, n as u64 - 1) as usize;
    let mut b = r.range(1, n as u64 - 1) as usize;
    if b == a {
        b = if a + 1 < n { a + 1 } else { 1 };
    }
    kills.push((harness::When::AfterSends(r.range(1, 3)), a));
    kills.push((harness::When::At(r.range(0, 20 * l)), b));
    harness::AgreeRun {
        members: (0..n as u32).collect(),
        values: (0..n).map(|i| !(1u64 << (i % 64))).collect(),
        starts: (0..n).map(|_| r.range(0, 20)).collect(),
        kills,
        net: harness::Net {
            delay: (1, 10),
            notice: (5, 20),
            lose_from_dead: 50,
            slow: 0,
        },
        mutations: Default::default(),
        check_rounds: false,
    }
}

fn main() {
    let sizes: Vec<usize> = {
        let args: Vec<usize> = std::env::args()
            .skip(1)
            .filter_map(|a| a.parse().ok())
            .collect();
        if args.is_empty() {
            vec![1_000, 10_000]
        } else {
            args
        }
    };
    println!(
        "| N | failures | messages | messages / N | messages / (N log2 N) | bytes | rounds | \
         2⌈log2 N⌉ |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut failed = false;
    for &n in &sizes {
        let l = harness::ceil_log2(n);
        let start = |run: &harness::AgreeRun| run.starts[0];
        for (f, run) in harness::scale_runs(n, NOTICE).iter().enumerate() {
            let (fig, violations) = harness::agree(run, 1);
            if !violations.is_empty() {
                failed = true;
                eprintln!("N={n} f={f}: {}", violations.join("; "));
            }
            let nf = n as f64;
            println!(
                "| {n} | {f} | {} | {:.2} | {:.3} | {} | {} | {} |",
                fig.messages,
                fig.messages as f64 / nf,
                fig.messages as f64 / (nf * nf.log2()),
                fig.bytes,
                fig.time - start(run),
                2 * l
            );
        }
    }
    println!();
    println!(
        "| N | seeds | messages / N (max) | messages / (N log2 N) (max) | virtual time (max) | \
         survivors (min) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for &n in &sizes {
        let mut worst = (0u64, 0u64, usize::MAX);
        for seed in 1..=SEEDS {
            let (fig, violations) = harness::agree(&random_run(n, seed), seed);
            if !violations.is_empty() {
                failed = true;
                eprintln!("random N={n} seed {seed}: {}", violations.join("; "));
            }
            worst = (
                worst.0.max(fig.messages),
                worst.1.max(fig.time),
                worst.2.min(fig.survivors),
            );
        }
        let nf = n as f64;
        println!(
            "| {n} | {SEEDS} | {:.2} | {:.3} | {} | {} |",
            worst.0 as f64 / nf,
            worst.0 as f64 / (nf * nf.log2()),
            worst.1,
            worst.2
        );
    }
    println!();
    println!("| N | failures | flood messages | messages / (N log2 N) | rounds | ⌈log2 N⌉ |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for &n in &sizes {
        for f in 0..=2 {
            let (fig, violations) = harness::flood(&harness::scale_flood(n, f, NOTICE), 1);
            if !violations.is_empty() {
                failed = true;
                eprintln!("flood N={n} f={f}: {}", violations.join("; "));
            }
            let nf = n as f64;
            println!(
                "| {n} | {f} | {} | {:.3} | {} | {} |",
                fig.messages,
                fig.messages as f64 / (nf * nf.log2()),
                fig.time,
                harness::ceil_log2(n)
            );
        }
    }
    if failed {
        std::process::exit(1);
    }
}
