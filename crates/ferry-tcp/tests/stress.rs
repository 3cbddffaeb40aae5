//! Randomised traffic under tight limits: every combination of eager and rendezvous messages,
//! a tiny connection cache, inbox and outbox, several exchanges in a row. A short run always;
//! the long run with many more rounds and ranks is ignored by default (run it with
//! `cargo test --release -p ferry-tcp --test stress -- --include-ignored`).

mod common;

use ferry_core::{Exchange, MsgKey, Transport};

/// Deterministic pseudo-random numbers (same on every rank for the same seed).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// Size of the message from `from` to `to` in `round`, the same on both sides.
fn size(seed: u64, round: u32, from: usize, to: usize) -> usize {
    let mut r = Lcg(seed ^ ((round as u64) << 32) ^ ((from as u64) << 16) ^ to as u64);
    r.next();
    match r.next() % 4 {
        0 => 0,
        1 => (r.next() % 100) as usize,
        2 => (r.next() % (80 << 10)) as usize,
        _ => (r.next() % (600 << 10)) as usize,
    }
}

fn fill(round: u32, from: usize, to: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32 ^ round ^ (from as u32 * 31) ^ (to as u32 * 7)) as u8)
        .collect()
}

fn run(n: usize, rounds: u32, seed: u64) {
    let mut cfg = common::config();
    cfg.tcp.connection_cap = 2;
    cfg.tcp.inbox_messages = 2;
    cfg.tcp.inbox_bytes = 100 << 10;
    cfg.tcp.outbox_bytes = 1 << 20;
    cfg.tcp.eager_bytes = 16 << 10;
    common::run(n, cfg, |mut t| {
        let me = t.rank();
        for round in 0..rounds {
            let out: Vec<Vec<u8>> = (0..n)
                .map(|p| fill(round, me, p, size(seed, round, me, p)))
                .collect();
            let mut got: Vec<Vec<u8>> = vec![Vec::new(); n];
            let mut ex = Exchange::new();
            for (p, d) in out.iter().enumerate() {
                ex.send(p, MsgKey::user(round % 3), d);
            }
            for (p, g) in got.iter_mut().enumerate() {
                ex.recv(p, MsgKey::user(round % 3), g);
            }
            // Receives first on odd rounds: the order of operations must not matter.
            if round % 2 == 1 {
                ex.recvs.reverse();
                ex.sends.reverse();
            }
            t.exchange(&mut ex).unwrap();
            drop(ex);
            for (p, g) in got.iter().enumerate() {
                assert!(
                    *g == fill(round, p, me, size(seed, round, p, me)),
                    "rank {me} round {round}: wrong message from {p}"
                );
            }
        }
        t.finish().unwrap();
    });
}

#[test]
fn random_traffic_under_tight_limits() {
    run(5, 6, 1);
}

#[test]
#[ignore = "stress: 9 ranks x 40 rounds x 5 seeds; run with --include-ignored"]
fn random_traffic_stress() {
    for seed in 0..5 {
        run(9, 40, seed);
    }
}
