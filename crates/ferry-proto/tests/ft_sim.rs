//! Deterministic simulation of `ferry_proto::ft` (agreement and flood) over 4 to 64 ranks in
//! virtual time, driven by a seeded scheduler (see `ft_harness`): random start times, delays
//! and reorderings, up to three ranks killed at random times (before the agreement, during it,
//! the root, rank 0, the next root), notices of each death delivered to the survivors after a
//! random delay, messages from a dying rank lost or not.
//!
//! Checked for every agreement schedule: every survivor decides; all decide the same value and
//! failed set; the failed set holds only killed ranks and everything a survivor knew dead when it
//! started; the value is the AND of the contributions of exactly the members outside it; no
//! message is refused; at most 4N(f+1) messages; without failures and with unit delays, at most
//! 2⌈log2 N⌉+1 rounds. For every flood schedule: a broadcast whose origin survives, or that any
//! survivor delivered, is delivered exactly once by every other survivor; at most
//! N⌈log2 N⌉(f+1) messages per broadcast; without failures and with unit delays, ⌈log2 N⌉ rounds.
//!
//! At scale (1,000 ranks here, 10,000 with `--include-ignored`): 2(N-1) messages and at most
//! 2⌈log2 N⌉ rounds without failures, about 2N more messages per death during the agreement.
//!
//! `FERRY_FT_SIM_SEEDS` sets the number of schedules per test (default 10000), `FERRY_FT_SIM_SEED`
//! replays one.

#[path = "ft_harness/mod.rs"]
mod harness;

use ferry_proto::ft::{AgreeMutations, FloodMutations};
use harness::{AgreeRun, FloodRun, Net, Rng, When};

fn members(r: &mut Rng) -> Vec<u32> {
    let n = if r.chance(50) {
        r.range(4, 12)
    } else {
        r.range(13, 64)
    } as u32;
    if r.chance(70) {
        // World ranks 0..n: rank 0 is the first root.
        (0..n).collect()
    } else {
        // A communicator with gaps in world-rank space (after an earlier shrink).
        let mut m: Vec<u32> = (0..4 * n).filter(|_| r.chance(25)).collect();
        let mut next = 4 * n;
        while m.len() < n as usize {
            m.push(next);
            next += 1 + r.below(3) as u32;
        }
        m.truncate(n as usize);
        m
    }
}

/// Up to three victims: the current root (smallest live member), the first member (world rank
/// 0 where it is one), or anyone; never all members. Each dies at a random time or in the middle
/// of sending (after its first few messages).
fn kills(r: &mut Rng, n: usize, until: u64) -> Vec<(When, usize)> {
    let mut out: Vec<(When, usize)> = Vec::new();
    let count = r.below(4) as usize;
    for _ in 0..count.min(n - 1) {
        let dead = |i: usize, out: &Vec<(When, usize)>| out.iter().any(|&(_, k)| k == i);
        let victim = match r.below(100) {
            0..=34 => (0..n).find(|&i| !dead(i, &out)),
            35..=49 if !dead(0, &out) => Some(0),
            _ => Some(r.below(n as u64) as usize),
        };
        let Some(v) = victim.filter(|&v| !dead(v, &out)) else {
            continue;
        };
        let when = if r.chance(30) {
            When::AfterSends(r.range(1, 6))
        } else {
            When::At(r.range(0, until))
        };
        out.push((when, v));
    }
    out
}

fn agree_schedule(seed: u64, mutations: AgreeMutations) -> AgreeRun {
    let mut r = Rng(seed);
    let members = members(&mut r);
    let n = members.len();
    // Contributions that name their owner: the AND shows exactly who took part.
    let values = (0..n).map(|i| !(1u64 << (i % 64))).collect();
    let unit = r.chance(15);
    let (net, spread) = if unit {
        (Net::rounds(r.range(1, 4)), 0)
    } else {
        let net = Net {
            delay: (1, r.range(1, 30)),
            notice: (1, r.range(1, 60)),
            lose_from_dead: 50,
            slow: [0, 5][r.below(2) as usize],
        };
        (net, [0, 10, 100][r.below(3) as usize])
    };
    let starts = (0..n).map(|_| r.range(0, spread)).collect();
    let until = spread + 2 * harness::ceil_log2(n) * net.delay.1 + 20;
    let kills = kills(&mut r, n, until);
    AgreeRun {
        members,
        values,
        starts,
        kills,
        net,
        mutations,
        check_rounds: unit,
    }
}

fn flood_schedule(seed: u64, mutations: FloodMutations) -> FloodRun {
    let mut r = Rng(seed ^ 0xf100d);
    let members = members(&mut r);
    let n = members.len();
    let unit = r.chance(15);
    let net = if unit {
        Net::rounds(r.range(1, 4))
    } else {
        Net {
            delay: (1, r.range(1, 30)),
            notice: (1, r.range(1, 60)),
            lose_from_dead: 50,
            slow: [0, 5][r.below(2) as usize],
        }
    };
    let originate = (0..r.range(1, 3))
        .map(|b| {
            let at = r.range(0, 50);
            let who = r.below(n as u64) as usize;
            (at, who, format!("broadcast {b} of {who}").into_bytes())
        })
        .collect::<Vec<_>>();
    let mut kills = kills(&mut r, n, 50 + harness::ceil_log2(n) * net.delay.1);
    // Half the time, kill an originator while or just after it sends.
    if r.chance(50) && !kills.is_empty() {
        let (at, who, _) = &originate[0];
        if !kills.iter().any(|&(_, k)| k == *who) {
            kills[0].1 = *who;
            kills[0].0 = if r.chance(50) {
                When::AfterSends(r.range(1, 3))
            } else {
                When::At(*at + r.below(3))
            };
        }
    }
    FloodRun {
        members,
        originate,
        kills,
        net,
        mutations,
        notices: true,
        check_rounds: unit,
    }
}

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("FERRY_FT_SIM_SEED") {
        return vec![s.trim().parse().expect("FERRY_FT_SIM_SEED is a number")];
    }
    let count: u64 = std::env::var("FERRY_FT_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    (0..count).collect()
}

fn check_all(test: &str, run: impl Fn(u64) -> Vec<String>) {
    let mut failed = Vec::new();
    for seed in seeds() {
        let v = run(seed);
        if !v.is_empty() {
            failed.push((seed, v));
        }
    }
    if let Some((seed, v)) = failed.first() {
        panic!(
            "{} of the schedules broke a property; first: seed {seed}:\n  {}\n\
             replay: FERRY_FT_SIM_SEED={seed} cargo test --release -p ferry-proto --test ft_sim \
             {test}",
            failed.len(),
            v.join("\n  ")
        );
    }
}

#[test]
fn agreement_survives_seeded_schedules() {
    check_all("agreement_survives", |seed| {
        let run = agree_schedule(seed, AgreeMutations::default());
        harness::agree(&run, seed).1
    });
}

#[test]
fn flood_survives_seeded_schedules() {
    check_all("flood_survives", |seed| {
        let run = flood_schedule(seed, FloodMutations::default());
        harness::flood(&run, seed).1
    });
}

/// Without any failure notice, the overlay's redundancy alone carries a broadcast of a live
/// origin past up to ⌈log2 N⌉-1 ranks that die during it.
#[test]
fn flood_survives_deaths_without_notices() {
    check_all("flood_survives_deaths_without", |seed| {
        let mut run = flood_schedule(seed, FloodMutations::default());
        run.notices = false;
        let degree = harness::ceil_log2(run.members.len()) as usize;
        let origins: Vec<usize> = run.originate.iter().map(|o| o.1).collect();
        run.kills.retain(|&(_, k)| !origins.contains(&k));
        run.kills.truncate(degree - 1);
        harness::flood(&run, seed).1
    });
}

/// The checker catches a broken agreement: ranks report before their subtree has.
#[test]
fn a_rank_reporting_before_its_subtree_is_caught() {
    let broken = AgreeMutations {
        report_before_children: true,
        ..Default::default()
    };
    let caught = (0..200u64).any(|seed| {
        !harness::agree(&agree_schedule(seed, broken), seed)
            .1
            .is_empty()
    });
    assert!(
        caught,
        "no schedule noticed reports sent before the subtree's"
    );
}

/// The checker catches a broken agreement: decisions accepted from messages of an older view
/// (the rule that keeps a new root's decision from contradicting an old one).
#[test]
fn accepting_decisions_of_older_views_is_caught() {
    let broken = AgreeMutations {
        accept_stale_decisions: true,
        ..Default::default()
    };
    let caught = (0..5_000u64).any(|seed| {
        !harness::agree(&agree_schedule(seed, broken), seed)
            .1
            .is_empty()
    });
    assert!(caught, "no schedule noticed stale decisions accepted");
}

/// The checker catches a broken agreement: a decided rank that stops answering when the tree is
/// rebuilt around a failure.
#[test]
fn a_decided_rank_that_stops_answering_is_caught() {
    let broken = AgreeMutations {
        decided_silent: true,
        ..Default::default()
    };
    let caught = (0..500u64).any(|seed| {
        !harness::agree(&agree_schedule(seed, broken), seed)
            .1
            .is_empty()
    });
    assert!(caught, "no schedule noticed a decided rank falling silent");
}

/// The checker catches a broken flood: each rank forwards to its nearest neighbour only.
#[test]
fn a_flood_forwarded_to_one_neighbour_is_caught() {
    let broken = FloodMutations {
        single_neighbour: true,
    };
    let caught = (0..200u64).any(|seed| {
        !harness::flood(&flood_schedule(seed, broken), seed)
            .1
            .is_empty()
    });
    assert!(caught, "no schedule noticed a flood sent to one neighbour");
}

/// Messages and rounds at `n` ranks for the scale scenarios: 2(N-1) messages and at most
/// 2⌈log2 N⌉ rounds without failures, about 2N more messages per death during the agreement
/// (none for a death known at the start), never more than 4N(f+1).
fn linear_at(n: usize) {
    let l = harness::ceil_log2(n);
    // Deaths during the agreement in scenarios 0..=3 (scenario 2 adds one known at the start).
    let during = [0u64, 1, 1, 2];
    for (f, run) in harness::scale_runs(n, 2).iter().enumerate() {
        let (fig, violations) = harness::agree(run, 1);
        assert!(violations.is_empty(), "N={n} f={f}: {violations:?}");
        let bound = 2 * (n as u64) * (during[f] + 1);
        assert!(
            fig.messages <= bound,
            "N={n} f={f}: {} messages (bound {bound})",
            fig.messages
        );
        if f == 0 {
            assert_eq!(fig.messages, 2 * (n as u64 - 1));
            assert!(fig.time <= 2 * l, "N={n}: {} rounds", fig.time);
        }
    }
}

#[test]
fn agreement_cost_is_linear_at_1000_ranks() {
    linear_at(1000);
}

#[test]
#[ignore = "scale run (10,000 ranks, a few seconds); the table comes from examples/ft_scale.rs"]
fn agreement_cost_is_linear_at_10000_ranks() {
    linear_at(10_000);
}
