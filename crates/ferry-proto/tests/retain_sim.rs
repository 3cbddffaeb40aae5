//! Seeded simulation of retained messages (T6; `ferry_proto::endpoint` with
//! `EndpointConfig::retain`): N endpoints run a deterministic program (rounds in which every
//! rank sends every other rank a message, small or large, whose bytes depend on its state, and
//! folds what it receives into its state) over a simulated network in virtual time. One rank
//! is killed at a random moment (mid-round, mid-frame, during its end) and started again after
//! a random delay as a fresh endpoint with a new incarnation: from the start, or, in checkpoint
//! mode, from the state it saved at its last checkpoint with the token of its flow counters.
//!
//! Checked for every schedule:
//! - every rank ends with the state of the undisturbed run (nothing lost, nothing twice: a
//!   duplicate or a missing message changes the state);
//! - no operation fails and every rank's end succeeds;
//! - in checkpoint mode the retained bytes never exceed what the rounds since the receivers'
//!   checkpoints can hold, however long the run; without checkpoints they grow with the run;
//! - a rank that is killed and never restarted makes its peers fail with an error naming it,
//!   once the restart timeout passed, instead of waiting forever.
//!
//! `FERRY_SIM_SEEDS` sets the number of schedules (default 300), `FERRY_SIM_SEED` replays one.

mod retain_harness;

use retain_harness::{run, Mode, Rng, EAGER, RESTART_TIMEOUT};

fn seeds(default: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("FERRY_SIM_SEED") {
        return vec![s.parse().expect("FERRY_SIM_SEED is a number")];
    }
    let n = std::env::var("FERRY_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    (1..=n).collect()
}

/// Bytes one rank sends in one round at most (upper bound of `message`'s lengths).
fn round_bytes(n: usize) -> usize {
    (n - 1) * (EAGER * 3 + 7)
}

fn check_recovers(mode: Mode, rounds: usize, default_seeds: u64) {
    for seed in seeds(default_seeds) {
        let mut r = Rng(seed ^ 0x5eed);
        let n = 3 + r.below(2) as usize;
        let reference = run(seed, n, rounds, mode, None);
        let undisturbed_end = reference.end_us;
        assert!(
            reference.violations.is_empty() && reference.results.iter().all(|x| x == &Some(Ok(()))),
            "seed {seed}: undisturbed run failed: {:?} {:?} {:?}",
            reference.violations,
            reference.results,
            reference.errors
        );
        let k = r.below(n as u64) as usize;
        let at = r.below(undisturbed_end + 200);
        let again = r.below(RESTART_TIMEOUT.as_micros() as u64 / 2);
        let out = run(seed, n, rounds, mode, Some((k, at, Some(again))));
        let ok = out.violations.is_empty()
            && out.states == reference.states
            && out.results.iter().all(|x| x == &Some(Ok(())))
            && out.errors.iter().all(|e| e.is_empty());
        assert!(
            ok,
            "seed {seed} (replay with FERRY_SIM_SEED={seed}): rank {k} of {n} killed at {at} \
             us, restarted {again} us later ({mode:?}):\nviolations {:?}\nstates {:?} want \
             {:?}\nresults {:?}\nerrors {:?}\ntrace {:?}",
            out.violations, out.states, reference.states, out.results, out.errors, out.trace
        );
        // Every rank met every other one: each knows whether it is a restart. Only the
        // restarted rank is, and only if a survivor had met its killed process.
        for (r, v) in out.verdicts.iter().enumerate() {
            let want = r == k && out.restarts_seen.iter().any(|&n| n > 0);
            assert_eq!(
                *v,
                Some(Some(want)),
                "seed {seed}: rank {r}'s restart verdict (rank {k} restarted; restarts seen \
                 {:?})",
                out.restarts_seen
            );
        }
        if let Mode::Checkpoint(every) = mode {
            // Retained: at most the rounds since the receivers' last checkpoints, plus the
            // rounds in flight around one.
            let bound = (every + 2) * round_bytes(n);
            assert!(
                out.peak_retained <= bound,
                "seed {seed}: {} bytes retained, bound {bound}",
                out.peak_retained
            );
        }
    }
}

#[test]
fn a_killed_rank_restarted_from_the_start_catches_up() {
    check_recovers(Mode::FromStart, 12, 300);
}

#[test]
fn a_killed_rank_restarted_from_its_checkpoint_catches_up() {
    check_recovers(Mode::Checkpoint(3), 12, 300);
}

#[test]
fn retention_stays_bounded_with_checkpoints_and_grows_without() {
    let rounds = 60;
    let with = run(7, 3, rounds, Mode::Checkpoint(4), None);
    let without = run(7, 3, rounds, Mode::FromStart, None);
    assert!(with.violations.is_empty() && without.violations.is_empty());
    assert_eq!(with.states, without.states, "checkpoints change no result");
    let bound = 6 * round_bytes(3);
    assert!(
        with.peak_retained <= bound,
        "{} bytes retained with checkpoints, bound {bound}",
        with.peak_retained
    );
    // Without checkpoints a rank keeps everything it sent until the end.
    assert!(
        without.peak_retained >= rounds * 2 * 8,
        "{} bytes retained without checkpoints",
        without.peak_retained
    );
    assert!(without.peak_retained > 4 * with.peak_retained);
}

#[test]
fn a_rank_that_never_comes_back_fails_its_peers_after_the_restart_timeout() {
    for seed in seeds(40) {
        let mut r = Rng(seed ^ 0xdead);
        let n = 3;
        let k = r.below(n as u64) as usize;
        let undisturbed = run(seed, n, 30, Mode::FromStart, None).end_us;
        let at = r.below(undisturbed * 3 / 4);
        let out = run(seed, n, 30, Mode::FromStart, Some((k, at, None)));
        assert!(
            out.violations.is_empty(),
            "seed {seed}: {:?}",
            out.violations
        );
        if out.trace.is_empty() {
            // Rank k had begun to end at `at`: not killed (see `run`).
            continue;
        }
        for s in (0..n).filter(|&s| s != k) {
            let named = out.errors[s]
                .iter()
                .chain(out.results[s].iter().filter_map(|x| x.as_ref().err()))
                .any(|e| {
                    // Killed before anyone reached it: it never started, as far as they know.
                    e.contains(&format!("rank {k}"))
                        && (e.contains("not restarted") || e.contains("cannot connect"))
                });
            assert!(
                named,
                "seed {seed}: rank {s} does not report rank {k} (killed at {at} us): {:?} {:?}\n\
                 all errors {:?}\nall results {:?}\ntrace {:?}",
                out.errors[s], out.results[s], out.errors, out.results, out.trace
            );
        }
        let limit = at + RESTART_TIMEOUT.as_micros() as u64 + 300_000;
        assert!(
            out.end_us <= limit,
            "seed {seed}: ended at {} us, kill at {at} us",
            out.end_us
        );
    }
}

/// Regression (the restart tests of `crates/ferry/tests/retain.rs` hung now and then): a
/// survivor re-dials the killed rank at once, and the listener of the dying process still
/// completes the connect before the connection is reset. Retained messages queued behind the
/// `Hello` of that connection were counted as sent and never sent again, so the restart
/// waited for them forever (seeds 1 and 8 of the tests above failed so, among others). Runs
/// the first 40 schedules of each mode and checks that the interleaving occurred in several.
#[test]
fn a_dial_to_a_dying_listener_loses_no_retained_message() {
    for mode in [Mode::FromStart, Mode::Checkpoint(3)] {
        let mut dying_dials = 0;
        for seed in 1..=40 {
            let mut r = Rng(seed ^ 0x5eed);
            let n = 3 + r.below(2) as usize;
            let rounds = 12;
            let reference = run(seed, n, rounds, mode, None);
            let k = r.below(n as u64) as usize;
            let at = r.below(reference.end_us + 200);
            let again = r.below(RESTART_TIMEOUT.as_micros() as u64 / 2);
            let out = run(seed, n, rounds, mode, Some((k, at, Some(again))));
            dying_dials += usize::from(out.trace.iter().any(|t| t.contains("dials dying")));
            assert!(
                out.violations.is_empty()
                    && out.states == reference.states
                    && out.results.iter().all(|x| x == &Some(Ok(()))),
                "seed {seed} ({mode:?}): violations {:?}\nstates {:?} want {:?}\nresults {:?}\n\
                 errors {:?}\ntrace {:?}",
                out.violations,
                out.states,
                reference.states,
                out.results,
                out.errors,
                out.trace
            );
        }
        assert!(
            dying_dials >= 5,
            "{mode:?}: only {dying_dials} of 40 schedules dialled a dying listener"
        );
    }
}
