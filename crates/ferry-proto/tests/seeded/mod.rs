//! What the seeded simulations share: the random source that picks a schedule, and the list
//! of seeds to run (`FERRY_SIM_SEEDS` sets how many, `FERRY_SIM_SEED` replays one).

// Each simulation binary uses part of this module.
#![allow(dead_code)]

/// splitmix64: small, fast, and good enough to pick schedules.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in 0..n (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// An index into a collection of `n` items (0 when it is empty).
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// True with the given probability in percent.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The seeds to run: `FERRY_SIM_SEED` alone if set, else 0..`FERRY_SIM_SEEDS` (or 0..`default`).
pub fn seeds(default: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("FERRY_SIM_SEED") {
        return vec![s.trim().parse().expect("FERRY_SIM_SEED is a number")];
    }
    let count: u64 = std::env::var("FERRY_SIM_SEEDS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default);
    (0..count).collect()
}
