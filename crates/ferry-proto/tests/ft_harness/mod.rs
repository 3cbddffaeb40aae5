//! A seeded virtual-time network for `ferry_proto::ft`, shared by `tests/ft_sim.rs` and
//! `examples/ft_scale.rs`.
//!
//! Ranks start at given times; messages take a random delay (so they overtake each other);
//! a message to a dead rank is lost, one from a rank that died in flight is lost or not at random;
//! messages to a rank that has not started yet wait for it (as a runtime buffers them by instance
//! number). A killed rank's death is told to every other live rank after a random delay, and a
//! rank that starts later counts the deaths it was told as `known_failed`. Only killed ranks are
//! ever reported dead.
//!
//! Each run returns its figures (messages, bytes, virtual time and causal depth until the last
//! survivor decided) and the list of properties it broke.

#![allow(dead_code)] // each user takes what it needs

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;

use ferry_proto::ft::{AgreeMutations, Agreement, Decision, Flood, FloodMutations};

/// splitmix64: small, fast, and good enough to pick schedules.
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi.saturating_sub(lo) + 1)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// How the network behaves.
#[derive(Clone, Debug)]
pub struct Net {
    /// Message delay, inclusive range of virtual time units.
    pub delay: (u64, u64),
    /// Delay between a death and the notice of it at each survivor.
    pub notice: (u64, u64),
    /// Chance (percent) that a message in flight from a rank that then died is lost.
    pub lose_from_dead: u64,
    /// Chance (percent) that a message takes 20 times its drawn delay (a slow path, so that
    /// old messages arrive after newer views have come and gone).
    pub slow: u64,
}

/// When a rank is killed.
#[derive(Clone, Copy, Debug)]
pub enum When {
    /// At this virtual time.
    At(u64),
    /// Right after it sent this many messages (the rest of what it had to send is lost).
    AfterSends(u64),
}

impl Net {
    /// Every hop one unit, every notice `notice` units: virtual time counts rounds.
    pub fn rounds(notice: u64) -> Net {
        Net {
            delay: (1, 1),
            notice: (notice, notice),
            lose_from_dead: 0,
            slow: 0,
        }
    }
}

/// Figures of one run.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub messages: u64,
    pub bytes: u64,
    /// Virtual time when the last survivor decided (or delivered the last broadcast).
    pub time: u64,
    /// Longest chain of messages that ended in a survivor's decision (or delivery).
    pub depth: u64,
    /// Survivors at the end.
    pub survivors: usize,
    /// Per member: when it decided (agreement runs).
    pub decided_at: Vec<Option<u64>>,
}

#[derive(Debug)]
enum Ev {
    Start(usize),
    Deliver {
        from: usize,
        to: usize,
        bytes: Vec<u8>,
        depth: u64,
    },
    Kill(usize),
    Notice {
        to: usize,
        dead: usize,
    },
    Originate(usize, Vec<u8>),
}

/// The event queue and liveness shared by both simulations.
struct Core {
    members: Arc<[u32]>,
    net: Net,
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: BTreeMap<u64, Ev>,
    alive: Vec<bool>,
    /// Messages sent by each rank, and the count after which it dies.
    sends: Vec<u64>,
    die_after: Vec<Option<u64>>,
    figures: Figures,
    violations: Vec<String>,
}

impl Core {
    fn new(members: &[u32], net: Net, seed: u64, kills: &[(When, usize)]) -> Core {
        let mut die_after = vec![None; members.len()];
        for &(w, k) in kills {
            if let When::AfterSends(after) = w {
                die_after[k] = Some(after);
            }
        }
        let mut c = Core {
            members: members.into(),
            net,
            rng: Rng(seed ^ 0x5eed_f7f7),
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            alive: vec![true; members.len()],
            sends: vec![0; members.len()],
            die_after,
            figures: Figures::default(),
            violations: Vec::new(),
        };
        for &(w, k) in kills {
            if let When::At(t) = w {
                c.at(t, Ev::Kill(k));
            }
        }
        c
    }
    fn at(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((t, self.seq)));
        self.events.insert(self.seq, ev);
    }
    fn pop(&mut self) -> Option<Ev> {
        let Reverse((t, s)) = self.queue.pop()?;
        self.now = t;
        self.events.remove(&s)
    }
    fn idx(&self, rank: u32) -> usize {
        self.members.binary_search(&rank).unwrap_or(usize::MAX)
    }
    /// Counts and schedules a message; a message to a rank already dead is lost at once. The
    /// sender dies here if its time has come; the caller stops sending for a dead rank.
    fn send(&mut self, from: usize, to: u32, bytes: Vec<u8>, depth: u64) {
        self.figures.messages += 1;
        self.figures.bytes += bytes.len() as u64;
        self.sends[from] += 1;
        if self.die_after[from].is_some_and(|k| self.sends[from] >= k) {
            self.kill(from);
        }
        let to = self.idx(to);
        if to == usize::MAX {
            self.violations
                .push(format!("rank {} sent to a non-member", self.members[from]));
            return;
        }
        if !self.alive[to] {
            return;
        }
        let mut d = self.rng.range(self.net.delay.0, self.net.delay.1);
        if self.rng.chance(self.net.slow) {
            d *= 20;
        }
        self.at(
            self.now + d,
            Ev::Deliver {
                from,
                to,
                bytes,
                depth: depth + 1,
            },
        );
    }
    fn kill(&mut self, k: usize) {
        if !self.alive[k] {
            return;
        }
        self.alive[k] = false;
        for to in 0..self.members.len() {
            if self.alive[to] {
                let d = self.rng.range(self.net.notice.0, self.net.notice.1);
                self.at(self.now + d, Ev::Notice { to, dead: k });
            }
        }
    }
    /// Whether a delivery happens: the receiver lives, and a dead sender's message survives.
    fn arrives(&mut self, from: usize, to: usize) -> bool {
        self.alive[to] && (self.alive[from] || !self.rng.chance(self.net.lose_from_dead))
    }
}

/// One agreement among `members`.
#[derive(Clone, Debug)]
pub struct AgreeRun {
    pub members: Vec<u32>,
    /// Per member: contribution.
    pub values: Vec<u64>,
    /// Per member: when it creates its instance.
    pub starts: Vec<u64>,
    /// Kills: when, member index.
    pub kills: Vec<(When, usize)>,
    pub net: Net,
    pub mutations: AgreeMutations,
    /// Check that a run without failures decides within 2⌈log2 N⌉ + 1 rounds (only meaningful
    /// with unit delays and simultaneous starts).
    pub check_rounds: bool,
}

struct AgreeRank {
    ag: Option<Agreement>,
    told: BTreeSet<u32>,
    /// `known_failed` when it started.
    initial: BTreeSet<u32>,
    waiting: Vec<(usize, Vec<u8>, u64)>,
    decided: Option<(Decision, u64)>,
}

/// Runs `run` with seed `seed` (for delays and losses); returns the figures and the violations.
pub fn agree(run: &AgreeRun, seed: u64) -> (Figures, Vec<String>) {
    let n = run.members.len();
    let mut c = Core::new(&run.members, run.net.clone(), seed, &run.kills);
    let mut ranks: Vec<AgreeRank> = (0..n)
        .map(|_| AgreeRank {
            ag: None,
            told: BTreeSet::new(),
            initial: BTreeSet::new(),
            waiting: Vec::new(),
            decided: None,
        })
        .collect();
    for (i, &t) in run.starts.iter().enumerate() {
        c.at(t, Ev::Start(i));
    }
    let budget = 200 * (n as u64 + 4) * (run.kills.len() as u64 + 1);
    let mut handled = 0u64;
    while let Some(ev) = c.pop() {
        handled += 1;
        if handled > budget {
            c.violations
                .push(format!("no quiescence after {budget} events"));
            break;
        }
        let (i, depth) = match ev {
            Ev::Start(i) => {
                if !c.alive[i] {
                    continue;
                }
                let r = &mut ranks[i];
                r.initial = r.told.clone();
                r.ag = Some(Agreement::with_mutations(
                    run.members[i],
                    c.members.clone(),
                    77,
                    run.values[i],
                    &r.told,
                    run.mutations,
                ));
                let mut depth = 0;
                for (from, bytes, d) in std::mem::take(&mut r.waiting) {
                    depth = depth.max(d);
                    let ag = r.ag.as_mut().expect("started");
                    if let Err(e) = ag.on_message(run.members[from], &bytes) {
                        c.violations.push(format!(
                            "rank {} refused a message of rank {}: {e}",
                            run.members[i], run.members[from]
                        ));
                    }
                }
                (i, depth)
            }
            Ev::Deliver {
                from,
                to,
                bytes,
                depth,
            } => {
                if !c.arrives(from, to) {
                    continue;
                }
                let r = &mut ranks[to];
                match r.ag.as_mut() {
                    None => {
                        r.waiting.push((from, bytes, depth));
                        continue;
                    }
                    Some(ag) => {
                        if let Err(e) = ag.on_message(run.members[from], &bytes) {
                            c.violations.push(format!(
                                "rank {} refused a message of rank {}: {e}",
                                run.members[to], run.members[from]
                            ));
                        }
                    }
                }
                (to, depth)
            }
            Ev::Kill(k) => {
                c.kill(k);
                continue;
            }
            Ev::Notice { to, dead } => {
                if !c.alive[to] {
                    continue;
                }
                let r = &mut ranks[to];
                r.told.insert(run.members[dead]);
                match r.ag.as_mut() {
                    Some(ag) => ag.on_failure(run.members[dead]),
                    None => continue,
                }
                (to, 0)
            }
            Ev::Originate(..) => continue,
        };
        let r = &mut ranks[i];
        let Some(ag) = r.ag.as_mut() else { continue };
        if r.decided.is_none() {
            if let Some(d) = ag.decision() {
                r.decided = Some((d.clone(), c.now));
                if c.alive[i] {
                    c.figures.depth = c.figures.depth.max(depth);
                }
            }
        }
        while c.alive[i] {
            let Some((to, bytes)) = ag.poll_transmit() else {
                break;
            };
            c.send(i, to, bytes, depth);
        }
    }
    check_agreement(run, &mut c, &ranks);
    (c.figures, c.violations)
}

fn check_agreement(run: &AgreeRun, c: &mut Core, ranks: &[AgreeRank]) {
    let n = run.members.len();
    let killed: BTreeSet<u32> = (0..n)
        .filter(|&i| !c.alive[i])
        .map(|i| run.members[i])
        .collect();
    c.figures.decided_at = ranks
        .iter()
        .map(|r| r.decided.as_ref().map(|d| d.1))
        .collect();
    let mut first: Option<(u32, &Decision)> = None;
    for i in (0..n).filter(|&i| c.alive[i]) {
        c.figures.survivors += 1;
        let me = run.members[i];
        let Some((d, at)) = &ranks[i].decided else {
            let view = ranks[i].ag.as_ref().map(|a| a.known_failed().clone());
            c.violations.push(format!(
                "survivor {me} never decided (knows dead: {view:?})"
            ));
            continue;
        };
        c.figures.time = c.figures.time.max(*at);
        match first {
            None => first = Some((me, d)),
            Some((r, f)) if f != d => c.violations.push(format!(
                "survivors disagree: rank {r} decided {f:?}, rank {me} decided {d:?}"
            )),
            Some(_) => {}
        }
        if !ranks[i].initial.is_subset(&d.failed) {
            c.violations.push(format!(
                "rank {me} knew {:?} dead at the start, the decision says {:?}",
                ranks[i].initial, d.failed
            ));
        }
    }
    if let Some((r, d)) = first {
        if !d.failed.is_subset(&killed) {
            c.violations.push(format!(
                "rank {r} decided a live rank failed: {:?}",
                d.failed
            ));
        }
        let want = (0..n)
            .filter(|&i| !d.failed.contains(&run.members[i]))
            .fold(!0u64, |acc, i| acc & run.values[i]);
        if d.value != want {
            c.violations.push(format!(
                "decided value {:#x}, the AND over the members outside {:?} is {want:#x}",
                d.value, d.failed
            ));
        }
    }
    // Each view change costs each rank at most one report, one query per child and one decision
    // per tree edge; views change at most once per failure.
    let bound = 4 * n as u64 * (run.kills.len() as u64 + 1);
    if c.figures.messages > bound {
        c.violations.push(format!(
            "{} messages for {n} ranks and {} failures (bound {bound})",
            c.figures.messages,
            run.kills.len()
        ));
    }
    if run.check_rounds && run.kills.is_empty() {
        let bound = 2 * ceil_log2(n) + 1;
        if c.figures.time > bound {
            c.violations.push(format!(
                "decided after {} rounds at {n} ranks (bound {bound})",
                c.figures.time
            ));
        }
    }
}

pub fn ceil_log2(n: usize) -> u64 {
    u64::from(usize::BITS - n.saturating_sub(1).leading_zeros())
}

/// Broadcasts among `members` while ranks die.
#[derive(Clone, Debug)]
pub struct FloodRun {
    pub members: Vec<u32>,
    /// (time, member index, payload) broadcasts.
    pub originate: Vec<(u64, usize, Vec<u8>)>,
    /// Kills: when, member index.
    pub kills: Vec<(When, usize)>,
    pub net: Net,
    pub mutations: FloodMutations,
    /// Tell survivors about deaths; without notices the overlay's redundancy alone must do.
    pub notices: bool,
    /// Check that without failures every broadcast arrives within ⌈log2 N⌉ rounds (unit delays).
    pub check_rounds: bool,
}

/// Runs `run`; returns the figures and the violations.
pub fn flood(run: &FloodRun, seed: u64) -> (Figures, Vec<String>) {
    let n = run.members.len();
    let mut c = Core::new(&run.members, run.net.clone(), seed, &run.kills);
    let mut fl: Vec<Flood> = run
        .members
        .iter()
        .map(|&r| {
            let mut f = Flood::new_shared(r, c.members.clone());
            f.mutations = run.mutations;
            f
        })
        .collect();
    // Per rank: (origin, payload) -> times delivered; per broadcast: when originated.
    let mut got: Vec<BTreeMap<(u32, Vec<u8>), u32>> = vec![BTreeMap::new(); n];
    for (t, i, p) in &run.originate {
        c.at(*t, Ev::Originate(*i, p.clone()));
    }
    let mut sent_at: BTreeMap<(u32, Vec<u8>), u64> = BTreeMap::new();
    while let Some(ev) = c.pop() {
        let (i, depth) = match ev {
            Ev::Originate(i, p) => {
                if !c.alive[i] {
                    continue;
                }
                sent_at.insert((run.members[i], p.clone()), c.now);
                fl[i].originate(&p);
                (i, 0)
            }
            Ev::Deliver {
                from,
                to,
                bytes,
                depth,
            } => {
                if !c.arrives(from, to) {
                    continue;
                }
                match fl[to].on_message(run.members[from], &bytes) {
                    Ok(Some(b)) => {
                        let t = sent_at.get(&b).copied().unwrap_or(0);
                        c.figures.time = c.figures.time.max(c.now - t);
                        c.figures.depth = c.figures.depth.max(depth);
                        *got[to].entry(b).or_default() += 1;
                    }
                    Ok(None) => {}
                    Err(e) => c.violations.push(format!(
                        "rank {} refused a flood message of rank {}: {e}",
                        run.members[to], run.members[from]
                    )),
                }
                (to, depth)
            }
            Ev::Kill(k) => {
                c.kill(k);
                continue;
            }
            Ev::Notice { to, dead } => {
                if !c.alive[to] || !run.notices {
                    continue;
                }
                fl[to].on_failure(run.members[dead]);
                (to, 0)
            }
            Ev::Start(_) => continue,
        };
        while c.alive[i] {
            let Some((to, bytes)) = fl[i].poll_transmit() else {
                break;
            };
            c.send(i, to, bytes, depth);
        }
    }
    // A broadcast whose origin survived, or that some survivor delivered, reaches every other
    // survivor exactly once.
    let survivors: Vec<usize> = (0..n).filter(|&i| c.alive[i]).collect();
    c.figures.survivors = survivors.len();
    for (b, _) in sent_at.iter() {
        let origin = c.idx(b.0);
        let must = c.alive[origin] || survivors.iter().any(|&i| got[i].contains_key(b));
        for &i in &survivors {
            let times = got[i].get(b).copied().unwrap_or(0);
            let want = u32::from(must && i != origin);
            if times != want {
                c.violations.push(format!(
                    "rank {} delivered the broadcast of rank {} {times} times",
                    run.members[i], b.0
                ));
            }
        }
    }
    for (i, g) in got.iter().enumerate() {
        for (b, &times) in g {
            if times > 1 || !sent_at.contains_key(b) {
                c.violations.push(format!(
                    "rank {} delivered {b:?} {times} times",
                    run.members[i]
                ));
            }
        }
    }
    let l = ceil_log2(n).max(1);
    let bound = run.originate.len() as u64 * n as u64 * l * (run.kills.len() as u64 + 1);
    if c.figures.messages > bound {
        c.violations.push(format!(
            "{} flood messages (bound {bound})",
            c.figures.messages
        ));
    }
    if run.check_rounds && run.kills.is_empty() && c.figures.time > l {
        c.violations.push(format!(
            "a broadcast took {} rounds at {n} ranks (bound {l})",
            c.figures.time
        ));
    }
    (c.figures, c.violations)
}

/// The scale scenario with `failures` (0 to 3) among `n` ranks 0..n, unit message delays and
/// notices `notice` rounds after a death: 1 kills the root (rank 0) at `root_dies` (just before
/// it would decide); 2 adds rank n/2, dead before the agreement and known to all at the start
/// (starts are delayed by `notice` for that); 3 adds the next root (rank 1), killed at
/// `next_root_dies`.
pub fn scale_run(
    n: usize,
    failures: usize,
    notice: u64,
    root_dies: u64,
    next_root_dies: u64,
) -> AgreeRun {
    let start = if failures >= 2 { notice + 1 } else { 0 };
    let mut kills = Vec::new();
    if failures >= 1 {
        kills.push((When::At(start + root_dies), 0));
    }
    if failures >= 2 {
        kills.push((When::At(0), n / 2));
    }
    if failures >= 3 {
        kills.push((When::At(start + next_root_dies), 1));
    }
    AgreeRun {
        members: (0..n as u32).collect(),
        values: (0..n).map(|i| !(1u64 << (i % 64))).collect(),
        starts: vec![start; n],
        kills,
        net: Net::rounds(notice),
        mutations: AgreeMutations::default(),
        check_rounds: true,
    }
}

/// The four scale scenarios (0 to 3 failures) of [`scale_run`] with each kill timed just before
/// its victim would decide, found by first running the scenario without that kill.
pub fn scale_runs(n: usize, notice: u64) -> Vec<AgreeRun> {
    // A kill time no run reaches before it is quiescent.
    const NEVER: u64 = u64::MAX / 4;
    let decides_at =
        |run: &AgreeRun, rank: usize| agree(run, 1).0.decided_at[rank].unwrap_or(0) - run.starts[0];
    let root_alone = decides_at(&scale_run(n, 0, notice, NEVER, NEVER), 0);
    let root_at = decides_at(&scale_run(n, 2, notice, NEVER, NEVER), 0);
    let next_at = decides_at(&scale_run(n, 3, notice, root_at, NEVER), 1);
    (0..=3)
        .map(|f| {
            let root = if f == 1 { root_alone } else { root_at };
            scale_run(n, f, notice, root, next_at)
        })
        .collect()
}

/// A broadcast from rank 0 among `n` ranks 0..n with unit delays; with `failures` 1, rank 1
/// (its nearest neighbour) dies as the broadcast starts, noticed `notice` rounds later; with 2,
/// rank 2 as well.
pub fn scale_flood(n: usize, failures: usize, notice: u64) -> FloodRun {
    FloodRun {
        members: (0..n as u32).collect(),
        originate: vec![(0, 0, b"revoke".to_vec())],
        kills: (1..=failures).map(|k| (When::At(0), k)).collect(),
        net: Net::rounds(notice),
        mutations: FloodMutations::default(),
        notices: true,
        check_rounds: true,
    }
}
