//! Running split schedules, the checks at their end, and the tests.

use super::*;

impl SplitSim {
    fn steps(messages: usize) -> usize {
        200 + messages * 40
    }

    fn run(&mut self, ev: SplitEvents) -> Result<(), Violation> {
        let messages = self.len.len();
        for step in 0..Self::steps(messages) {
            if let Some((side, at)) = ev.fail {
                if at == step && !self.dead[side] {
                    self.fail(side, Cause::Own);
                }
            }
            if let Some((side, at)) = ev.kill {
                if at == step {
                    self.dead[side] = true;
                }
            }
            if self.rng.below(2) == 0 {
                if !self.dead[SENDER] {
                    self.sender_step()?;
                }
            } else if !self.dead[RECEIVER] {
                self.receiver_step()?;
            }
        }
        // Drain: both live sides go on until they finish (offers idle out, the sender serves
        // or refuses what is left).
        for _ in 0..(messages * 80 + 400) {
            if !self.dead[SENDER] {
                self.sender_step()?;
            }
            if !self.dead[RECEIVER] {
                self.receiver_step()?;
            }
        }
        self.check_end(ev)
    }

    fn check_end(&self, ev: SplitEvents) -> Result<(), Violation> {
        let who = ["sender", "receiver"];
        for side in [SENDER, RECEIVER] {
            if !self.dead[side] && (!self.finished(side) || self.writing.is_some() && side == 0) {
                return Err(Violation(format!(
                    "the {} waits forever in exchange {} ({:?})",
                    who[side], self.batch[side], self.phase[side]
                )));
            }
            for &(b, cause) in &self.errors[side] {
                let ok = match cause {
                    Cause::PeerDied(x) => x != side && self.dead[x],
                    Cause::Own => ev.fail.is_some_and(|(s, _)| s == side),
                    Cause::SenderGaveUp | Cause::Abandoned => {
                        side == RECEIVER && !self.errors[SENDER].is_empty()
                    }
                };
                if !ok {
                    return Err(Violation(format!(
                        "the {}'s exchange {b} failed for {cause:?}, which did not happen",
                        who[side]
                    )));
                }
            }
        }
        if ev.fail.is_none() && ev.kill.is_none() {
            if let Some(m) = (0..self.len.len()).find(|m| !self.delivered.contains_key(m)) {
                return Err(Violation(format!(
                    "message {m} not delivered without any failure"
                )));
            }
        }
        if !self.dead[RECEIVER] {
            for m in 0..self.len.len() {
                let failed = self.errors[RECEIVER]
                    .iter()
                    .any(|&(b, _)| b == self.batch_of[m]);
                if !self.delivered.contains_key(&m) && !failed {
                    return Err(Violation(format!(
                        "message {m} neither delivered nor its receive reported failed"
                    )));
                }
            }
            for seq in 0..self.r_seq {
                let (c, w) = self.wins.get(&seq).copied().unwrap_or_default();
                if c + w != 1 {
                    return Err(Violation(format!(
                        "offer {seq} ended with {c} claims and {w} withdrawals won"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Draws the number of messages and the events of schedule `seed`.
pub(in crate::sim) fn draw(seed: u64) -> (usize, SplitEvents) {
    let mut pick = Rng::new(seed ^ 0x5917);
    // A quarter of the schedules wrap the completion windows (64 descriptors).
    let messages = if pick.below(4) == 0 {
        60 + pick.below(60) as usize
    } else {
        1 + pick.below(24) as usize
    };
    let steps = SplitSim::steps(messages) as u64;
    let fail = (pick.below(3) == 0).then(|| (pick.below(2) as usize, pick.below(steps) as usize));
    let kill = (pick.below(3) == 0).then(|| (pick.below(2) as usize, pick.below(steps) as usize));
    (messages, SplitEvents { fail, kill })
}

/// Runs schedule `seed` with `messages` and events `ev`; returns the violation, if any, and
/// what it exercised.
pub(in crate::sim) fn schedule_with(
    seed: u64,
    messages: usize,
    bug: Bug,
    ev: SplitEvents,
) -> Result<SplitCoverage, Violation> {
    let mut sim = SplitSim::new(seed, messages, bug);
    sim.run(ev)?;
    Ok(sim.cov)
}

fn schedule(seed: u64, bug: Bug) -> Result<SplitCoverage, Violation> {
    let (messages, ev) = draw(seed);
    schedule_with(seed, messages, bug, ev)
}

fn replay_seed() -> Option<u64> {
    std::env::var("FERRY_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
}

fn run_seeds(seeds: impl Iterator<Item = u64>) -> (u64, SplitCoverage) {
    let mut total = SplitCoverage::default();
    let mut n = 0;
    for seed in seeds {
        match schedule(seed, Bug::None) {
            Ok(c) => total.add(&c),
            Err(Violation(v)) => {
                panic!("split schedule {seed} (replay: FERRY_SIM_SEED={seed}): {v}")
            }
        }
        n += 1;
    }
    (n, total)
}

#[test]
#[cfg_attr(
    miri,
    ignore = "thousands of schedules; the ring steps run under Miri in ring.rs"
)]
fn split_protocol_holds_under_random_schedules() {
    let replay = replay_seed();
    let (n, c) = match replay {
        Some(s) => run_seeds(s..s + 1),
        None => run_seeds(0..3000),
    };
    eprintln!("{n} split schedules: {c:?}");
    if replay.is_none() {
        assert!(
            c.offers > 0
                && c.whole_reads > 0
                && c.written > 0
                && c.refused > 0
                && c.idle_withdrawn > 0
                && c.lost_to_withdrawal > 0
                && c.failed_writes > 0
                && c.writer_died > 0
                && c.taken_back > 0
                && c.waited_for_writer > 0
                && c.fragments > 0
                && c.dropped > 0
                && c.sender_waited_for_split > 0
                && c.done_elsewhere > 0
                && c.foreign_failures > 0,
            "the schedules missed a path of the split protocol: {c:?}"
        );
    }
}

/// 200,000 schedules (a few minutes): `cargo test --release -p ferry-shm --lib
/// split_protocol_long_run -- --ignored`.
#[test]
#[ignore = "opt-in long run: 200,000 schedules"]
fn split_protocol_long_run() {
    let (n, c) = run_seeds(0..200_000);
    eprintln!("{n} split schedules: {c:?}");
}

/// Fails or kills either side at every step of a few schedules (not only at drawn steps):
/// no step of the split protocol lets a write land in a returned receive buffer, a read touch
/// a returned send buffer, or a survivor wait forever.
#[test]
#[cfg_attr(miri, ignore = "tens of thousands of schedules")]
fn every_step_split_kill_and_fail() {
    let seeds: Vec<u64> = match replay_seed() {
        Some(s) => vec![s],
        None => (0..4).collect(),
    };
    let mut total = SplitCoverage::default();
    let mut runs = 0u64;
    for &seed in &seeds {
        let messages = 4 + (seed as usize % 4);
        for step in 0..SplitSim::steps(messages) {
            for side in [SENDER, RECEIVER] {
                for ev in [
                    SplitEvents {
                        fail: Some((side, step)),
                        kill: None,
                    },
                    SplitEvents {
                        fail: None,
                        kill: Some((side, step)),
                    },
                ] {
                    match schedule_with(seed, messages, Bug::None, ev) {
                        Ok(c) => total.add(&c),
                        Err(Violation(v)) => panic!(
                            "split schedule {seed} with {ev:?} (replay: FERRY_SIM_SEED={seed}): {v}"
                        ),
                    }
                    runs += 1;
                }
            }
        }
    }
    eprintln!("{runs} split schedules: {total:?}");
    if seeds.len() > 1 {
        assert!(
            total.writer_died > 0 && total.taken_back > 0 && total.written > 0,
            "the schedules missed a protocol path: {total:?}"
        );
    }
}

/// The checks are not blind: each defect put into the model is caught by some schedule, by
/// the property it breaks.
#[test]
#[cfg_attr(miri, ignore = "thousands of schedules")]
fn split_defects_are_caught() {
    for (bug, breaks) in [
        (Bug::ReturnWithoutTakeBack, "wrote into the receive buffer"),
        (Bug::CompleteBeforeOwnRead, "read the send buffer"),
        (Bug::WriteWithoutClaim, "offered part copied 2 times"),
        (Bug::DropForeignSplit, "waits forever"),
        (Bug::SettleEverySplit, "waits forever"),
    ] {
        let caught = (0..3000u64).find_map(|s| match schedule(s, bug) {
            Err(Violation(v)) if v.contains(breaks) => Some((s, v)),
            _ => None,
        });
        let Some((seed, v)) = caught else {
            panic!("no schedule noticed {bug:?}");
        };
        eprintln!("{bug:?}: schedule {seed}: {v}");
    }
}

/// A few schedules, small enough for Miri (the rings' raw-pointer accesses and the offer
/// words' atomics under its model).
#[test]
fn a_few_split_schedules() {
    for seed in 0..4 {
        if let Err(Violation(v)) = schedule(seed, Bug::None) {
            panic!("split schedule {seed}: {v}");
        }
    }
}

/// The seeds that first showed the two defects fixed in `split.rs` (a split finished or
/// settled by another exchange of the receiver): each fails under the old rule and passes now.
#[test]
#[cfg_attr(miri, ignore = "full-size schedules")]
fn split_regression_seeds() {
    for (seed, old) in [(0, Bug::DropForeignSplit), (0, Bug::SettleEverySplit)] {
        assert!(
            schedule(seed, old).is_err(),
            "schedule {seed} no longer shows {old:?}"
        );
        if let Err(Violation(v)) = schedule(seed, Bug::None) {
            panic!("split schedule {seed} (replay: FERRY_SIM_SEED={seed}): {v}");
        }
    }
}
