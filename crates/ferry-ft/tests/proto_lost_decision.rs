//! A decision lost with a relay that died right after deciding (seen in chaos runs): the ranks
//! below it must still decide once they learn of the death.

use std::collections::{BTreeSet, VecDeque};

use ferry_proto::ft::Agreement;

/// Runs one instance on `n` ranks where `dead` dies the moment it decides (nothing it would
/// send afterwards leaves); the others are told after `delay` further deliveries. Returns the
/// ranks that never decided.
fn run(n: u32, dead: u32, delay: usize) -> Vec<u32> {
    let members: Vec<u32> = (0..n).collect();
    let mut a: Vec<Agreement> = members
        .iter()
        .map(|&m| Agreement::new(m, &members, 132, 1, &BTreeSet::new()))
        .collect();
    let mut q: VecDeque<(u32, u32, Vec<u8>)> = VecDeque::new();
    let mut died_at: Option<usize> = None;
    let mut told = false;
    for step in 0..1_000_000 {
        for m in 0..n {
            if m == dead && died_at.is_some() {
                while a[m as usize].poll_transmit().is_some() {}
                continue;
            }
            if m == dead && a[m as usize].decision().is_some() {
                died_at = Some(step);
                while a[m as usize].poll_transmit().is_some() {}
                continue;
            }
            while let Some((to, b)) = a[m as usize].poll_transmit() {
                q.push_back((m, to, b));
            }
        }
        if let Some(d) = died_at {
            if !told && step >= d + delay {
                told = true;
                for m in 0..n {
                    if m != dead {
                        a[m as usize].on_failure(dead);
                    }
                }
                continue;
            }
        }
        let Some((from, to, b)) = q.pop_front() else {
            if died_at.is_some() && !told {
                told = true;
                for m in 0..n {
                    if m != dead {
                        a[m as usize].on_failure(dead);
                    }
                }
                continue;
            }
            break;
        };
        if died_at.is_some() && to == dead {
            continue;
        }
        a[to as usize].on_message(from, &b).unwrap();
    }
    (0..n)
        .filter(|&m| m != dead && a[m as usize].decision().is_none())
        .collect()
}

#[test]
fn a_decision_lost_with_its_relay_still_reaches_the_ranks_below() {
    for n in [4, 8, 13] {
        for dead in 1..n {
            for delay in [0, 1, 3, 10, 100] {
                let stuck = run(n, dead, delay);
                assert!(
                    stuck.is_empty(),
                    "n {n}, relay {dead} dies on deciding, told after {delay}: {stuck:?} never decide"
                );
            }
        }
    }
}
