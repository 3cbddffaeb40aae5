//! Drawing schedules and events, and the tests that run them.

use super::*;

/// The events of one schedule.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Events {
    /// The sender's operation fails at this step.
    pub(super) fail_at: Option<usize>,
    /// (sender?, step): that side is killed at that step.
    pub(super) kill: Option<(bool, usize)>,
    /// The receiver gives up a receive at this step.
    pub(super) give_up_at: Option<usize>,
    /// The receiver also gives up receives at random steps.
    pub(super) random_give_ups: bool,
}

impl Events {
    pub(super) fn steps(&self, messages: usize) -> usize {
        400 + messages * 30
    }
}

/// Draws the number of messages and the events of schedule `seed`.
fn draw(seed: u64) -> (usize, Events) {
    let mut pick = Rng::new(seed ^ 0x5eed);
    let messages = 1 + pick.below(40) as usize;
    let fail_at = (pick.below(3) == 0).then(|| pick.below(300) as usize);
    let kill = (pick.below(4) == 0).then(|| (pick.below(2) == 0, pick.below(300) as usize));
    let random_give_ups = pick.below(4) == 0;
    let ev = Events {
        fail_at,
        kill,
        give_up_at: None,
        random_give_ups,
    };
    (messages, ev)
}

/// Runs schedule `seed` with events `ev`; returns the violation, if any, and what it
/// exercised.
fn schedule_with(
    seed: u64,
    messages: usize,
    settle: Settle,
    ev: Events,
) -> Result<Coverage, Violation> {
    let mut sim = Sim::new(seed, messages, settle);
    sim.run(ev)?;
    Ok(sim.cov)
}

/// Runs schedule `seed`; returns the violation, if any, and what it exercised.
fn schedule(seed: u64, settle: Settle) -> Result<Coverage, Violation> {
    let (messages, ev) = draw(seed);
    schedule_with(seed, messages, settle, ev)
}

fn seeds() -> Vec<u64> {
    match std::env::var("FERRY_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(s) => vec![s],
        None => (0..8000).collect(),
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "thousands of schedules; the ring steps run under Miri in ring.rs"
)]
fn ring_protocol_holds_under_random_schedules() {
    let mut total = Coverage::default();
    let all = seeds();
    for &seed in &all {
        match schedule(seed, Settle::WithdrawOrWait) {
            Ok(c) => total.add(&c),
            Err(Violation(v)) => panic!("schedule {seed} (replay: FERRY_SIM_SEED={seed}): {v}"),
        }
    }
    eprintln!("{} schedules: {total:?}", all.len());
    if all.len() > 1 {
        let c = total;
        assert!(
            c.full_ring > 0
                && c.claimed > 0
                && c.withdrawn > 0
                && c.aborted > 0
                && c.waited_for_claim > 0
                && c.lost_race > 0
                && c.chunks > 0
                && c.spans > 0
                && c.deferred > 0
                && c.early > 0
                && c.discarded > 0
                && c.stream_aborted > 0
                && c.heap_copies > 0
                && c.heap_after_death > 0,
            "the schedules missed a protocol path: {c:?}"
        );
    }
}

/// Kills either side, fails the sender's operation, or gives up a receive at every step of
/// a few schedules of pipelined messages (not only at random steps): no step of the protocol
/// lets a half-sent message through, loses a later one or leaves a receiver waiting forever.
/// `FERRY_SIM_SEED=N` runs only schedule N.
#[test]
#[cfg_attr(miri, ignore = "tens of thousands of schedules")]
fn every_step_kill_and_abandon() {
    let all: Vec<u64> = match std::env::var("FERRY_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(s) => vec![s],
        None => (0..6).collect(),
    };
    let mut total = Coverage::default();
    let mut runs = 0u64;
    for &seed in &all {
        let messages = 6 + (seed as usize % 5);
        let steps = Events::default().steps(messages);
        for step in 0..steps {
            let cases = [
                Events {
                    fail_at: Some(step),
                    ..Events::default()
                },
                Events {
                    kill: Some((true, step)),
                    ..Events::default()
                },
                Events {
                    kill: Some((false, step)),
                    ..Events::default()
                },
                Events {
                    give_up_at: Some(step),
                    ..Events::default()
                },
            ];
            for ev in cases {
                match schedule_with(seed, messages, Settle::WithdrawOrWait, ev) {
                    Ok(c) => total.add(&c),
                    Err(Violation(v)) => {
                        panic!("schedule {seed} with {ev:?} (replay: FERRY_SIM_SEED={seed}): {v}")
                    }
                }
                runs += 1;
            }
        }
    }
    eprintln!("{runs} schedules: {total:?}");
    if all.len() > 1 {
        assert!(
            total.stream_aborted > 0 && total.discarded > 0 && total.spans > 0,
            "the schedules missed a protocol path: {total:?}"
        );
    }
}

/// The checker is not blind: a sender that reuses its buffers after a failure without taking
/// its descriptors back (issue 05's defect) is caught by some schedule.
#[test]
#[cfg_attr(miri, ignore = "thousands of schedules")]
fn broken_settle_is_caught() {
    let caught = (0..5000u64).find(|&s| schedule(s, Settle::Broken).is_err());
    assert!(
        caught.is_some(),
        "no schedule noticed reuse of lent buffers"
    );
}

/// A few schedules, small enough for Miri (checks the ring's raw-pointer accesses and the
/// atomics' use under its model).
#[test]
fn a_few_schedules() {
    for seed in 0..8 {
        if let Err(Violation(v)) = schedule(seed, Settle::WithdrawOrWait) {
            panic!("schedule {seed}: {v}");
        }
    }
}
