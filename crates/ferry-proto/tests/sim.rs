//! Deterministic simulation of the TCP protocol endpoint (`ferry_proto::endpoint`): N endpoints
//! over a simulated network in virtual time, driven by a seeded scheduler: random delays and
//! interleavings across connections (each connection stays in order, like TCP), dials that are
//! refused and retried, simultaneous dials, a connection cap that forces the close handshake
//! and re-dials, tiny inboxes and outboxes (refuse, then pull with GET), rendezvous and
//! zero-copy payloads, and a kill of one endpoint at a random step. Like the driver, a node
//! writes the frames its endpoint queued only after it has carried out the actions (sometimes
//! after reading more input first): a connection it drops meanwhile loses them.
//!
//! Checked for every schedule:
//! - every message to a live receiver is delivered exactly once, in flow order, with its bytes;
//! - nothing deadlocks: every operation between live ranks completes, every rank finishes;
//! - every operation waiting on the killed endpoint fails with an error naming it;
//! - nothing is left in the tables once everything is delivered (outbox, inbox, pulls,
//!   receives, connections; flow counters bounded and retired);
//! - an operation the program abandons (its exchange failed) is never reported and its buffer
//!   never read again, yet an abandoned send's message is still delivered, and an abandoned
//!   receive's message is consumed so that the flow's later messages arrive in order;
//! - a dial refused by a dead peer's host declares it dead at once where refusals mean that
//!   (launcher mode), and a stranger claiming a rank served by another transport is dropped;
//! - a rank whose operation times out gives up on peers and ends early: its finish neither
//!   waits for them nor lingers for them, and reports only a timeout; its peers' operations
//!   with it fail naming it, and nothing hangs. Idle connections closed at random times (the
//!   driver short of descriptors) change nothing but the connection count.
//!
//! `FERRY_SIM_SEEDS` sets the number of schedules (default 20000), `FERRY_SIM_SEED` replays one.

#[path = "sim_harness/mod.rs"]
mod sim_harness;

use std::collections::{BinaryHeap, HashMap, VecDeque};

use ferry_proto::endpoint::{Endpoint, EndpointConfig};
use ferry_proto::{MsgKey, MsgKind};
use sim_harness::*;
/// Runs schedule `seed` with `mutate` applied to every endpoint; returns the violations.
fn run_schedule(seed: u64, mutate: &dyn Fn(&mut Endpoint)) -> Vec<String> {
    let mut rng = Rng(seed);
    let n = 2 + rng.below(3) as usize;
    let eager = 16 + rng.below(48) as usize;
    let secret = b"sim-secret".to_vec();
    let cap = 1 + rng.below(n as u64) as usize;
    let refused_is_dead = rng.chance(50);
    // Sometimes the job has one more rank, served by another transport (hybrid): it never
    // takes part, and a stranger claiming to be it is turned away.
    let ghost = rng.chance(20);
    let size = n + usize::from(ghost);
    let mut nodes = Vec::new();
    for r in 0..n {
        let mut cfg = EndpointConfig::new(r, size, &secret);
        cfg.refused_is_dead = refused_is_dead;
        if ghost {
            cfg.excluded = (0..size).map(|p| p == n).collect();
        }
        cfg.eager_bytes = eager;
        cfg.inbox_messages = 1 + rng.below(3) as usize;
        cfg.inbox_bytes = eager * (1 + rng.below(3) as usize);
        cfg.outbox_bytes = eager * (1 + rng.below(4) as usize);
        cfg.max_message_bytes = 1 << 20;
        cfg.connection_cap = cap;
        cfg.connect_timeout = d(300_000);
        cfg.rndv_grace = d(50);
        cfg.rndv_grace_idle = d(500);
        cfg.probe_after = d(2_000);
        cfg.linger = d(5_000);
        let mut ep = Endpoint::new(cfg);
        mutate(&mut ep);
        nodes.push(Node {
            ep,
            alive: true,
            script: VecDeque::new(),
            sends: HashMap::new(),
            recvs: HashMap::new(),
            direct: HashMap::new(),
            blamed: None,
            finish_called: false,
            next_op: 0,
            quits: rng.chance(50),
            quit: false,
            tolerant: false,
            lost_to_time_out: false,
            gave_up_on: Vec::new(),
            said_bye: false,
        });
    }
    // Workload: a few flows, each a few messages; every rank's script interleaves its sends and
    // receives at random while keeping each flow's order.
    let mut per_node: Vec<Vec<VecDeque<Op>>> = (0..n).map(|_| Vec::new()).collect();
    let flows = 1 + rng.below(2 * n as u64) as usize;
    for _ in 0..flows {
        let src = rng.below(n as u64) as usize;
        let dst = if rng.chance(10) {
            src
        } else {
            (src + 1 + rng.below(n as u64 - 1) as usize) % n
        };
        let kind = if rng.chance(20) {
            MsgKind::CONTROL
        } else {
            MsgKind::USER
        };
        let key = MsgKey::new(0, kind, rng.below(3) as u32);
        let flow = Flow { src, dst, key };
        if per_node[src]
            .iter()
            .any(|q| matches!(q.front(), Some(Op::Send(f, _)) if *f == flow))
        {
            continue;
        }
        let count = 1 + rng.below(6);
        per_node[src].push((0..count).map(|s| Op::Send(flow, s)).collect());
        per_node[dst].push((0..count).map(|s| Op::Recv(flow, s)).collect());
    }
    for node in nodes.iter_mut() {
        if !node.quits && rng.chance(30) {
            node.tolerant = true;
            node.ep.tolerate_failures();
        }
    }
    for (r, mut queues) in per_node.into_iter().enumerate() {
        while queues.iter().any(|q| !q.is_empty()) {
            let live: Vec<usize> = (0..queues.len())
                .filter(|&i| !queues[i].is_empty())
                .collect();
            let i = live[rng.below(live.len() as u64) as usize];
            if let Some(op) = queues[i].pop_front() {
                nodes[r].script.push_back(op);
            }
        }
    }
    let mut sim = Sim {
        rng: Rng(rng.next()),
        now: 0,
        seq: 0,
        queue: BinaryHeap::new(),
        events: HashMap::new(),
        timers: vec![None; n],
        nodes,
        pipes: Vec::new(),
        out: HashMap::new(),
        queued: Vec::new(),
        eager,
        killed: None,
        abandoned_recv: Default::default(),
        timed_out: Default::default(),
        refused_is_dead,
        violations: Vec::new(),
        trace: std::env::var_os("FERRY_SIM_TRACE").is_some(),
    };
    for r in 0..n {
        let at = sim.rng.below(300);
        sim.schedule(at, Ev::Step(r));
    }
    if ghost {
        let node = sim.rng.below(n as u64) as usize;
        let at = sim.rng.below(3_000);
        sim.schedule(at, Ev::Ghost { node, claims: n });
    }
    if sim.rng.chance(40) {
        let k = sim.rng.below(n as u64) as usize;
        let at = sim.rng.below(3_000);
        sim.schedule(at, Ev::Kill(k));
    }
    if sim.rng.chance(10) {
        let r = sim.rng.below(n as u64) as usize;
        let at = sim.rng.below(3_000);
        sim.schedule(at, Ev::TimeOut(r));
    }
    if sim.rng.chance(30) {
        for _ in 0..1 + sim.rng.below(3) {
            let r = sim.rng.below(n as u64) as usize;
            let at = sim.rng.below(4_000);
            sim.schedule(at, Ev::Evict(r));
        }
    }
    sim.run(600_000_000);
    check_end(&mut sim);
    sim.violations
}

/// Whether rank `r`'s finish may fail with `e`: it names the killed rank, a peer that gave a
/// receive up or timed out, or `r` timed out itself and reports that.
fn finish_error_expected(sim: &Sim, r: usize, e: &ferry_proto::endpoint::EndpointError) -> bool {
    sim.killed.is_some_and(|k| e.origin == k || e.peer == k)
        || sim.abandoned_recv.contains(&e.peer)
        || sim.timed_out.contains(&e.peer)
        || (sim.timed_out.contains(&r) && e.kind == ferry_proto::endpoint::ErrorKind::Timeout)
}

fn check_end(sim: &mut Sim) {
    let killed = sim.killed;
    if sim.trace {
        for (r, node) in sim.nodes.iter().enumerate() {
            let peers: Vec<_> = (0..sim.nodes.len())
                .map(|p| node.ep.peer_status(p))
                .collect();
            eprintln!(
                "rank {r} alive {}: {:?} {peers:?}",
                node.alive,
                node.ep.table_sizes()
            );
            eprintln!("    {}", node.ep.debug_state());
        }
    }
    for r in 0..sim.nodes.len() {
        if !sim.nodes[r].alive {
            continue;
        }
        let node = &sim.nodes[r];
        let mut v = Vec::new();
        if !node.script.is_empty() {
            v.push(format!("rank {r}: {} ops never posted", node.script.len()));
        }
        for (op, s) in &node.sends {
            if s.1 == OpStatus::Pending {
                v.push(format!(
                    "rank {r}: send {op:?} (message {}) never completed",
                    s.2
                ));
            }
        }
        for (op, (flow, seq, st)) in &node.recvs {
            if *st == OpStatus::Pending {
                v.push(format!(
                    "rank {r}: recv {op:?} ({seq} of {flow:?}) never completed"
                ));
            }
        }
        match node.ep.finished() {
            None => v.push(format!("rank {r}: finish never completed")),
            Some(Err(e)) if !finish_error_expected(sim, r, &e) => {
                v.push(format!("rank {r}: finish failed: {e}"))
            }
            _ => {}
        }
        let t = node.ep.table_sizes();
        let owed_to_killed = killed.is_some();
        if t.outbox > 0
            || t.inbox > 0
            || t.overflow > 0
            || (t.remote > 0 && !owed_to_killed)
            || t.posted > 0
            || t.sends > 0
            || t.conns > 0
        {
            v.push(format!("rank {r}: tables not empty at the end: {t:?}"));
        }
        for s in v {
            sim.violation(s);
        }
    }
    for r in 0..sim.nodes.len() {
        if sim.nodes[r].alive {
            let ep = &mut sim.nodes[r].ep;
            ep.retire_generations_before(1);
            let t = ep.table_sizes();
            if t.flows != 0 {
                sim.violation(format!(
                    "rank {r}: {} flow counters after retiring generation 0",
                    t.flows
                ));
            }
        }
    }
}

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("FERRY_SIM_SEED") {
        return vec![s.trim().parse().expect("FERRY_SIM_SEED is a number")];
    }
    let count: u64 = std::env::var("FERRY_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    (0..count).collect()
}

#[test]
fn endpoints_survive_seeded_schedules() {
    let mut failed = Vec::new();
    for seed in seeds() {
        let v = run_schedule(seed, &|_| {});
        if !v.is_empty() {
            failed.push((seed, v));
        }
    }
    if let Some((seed, v)) = failed.first() {
        panic!(
            "{} of the schedules broke a property; first: seed {seed}:\n  {}\n\
             replay: FERRY_SIM_SEED={seed} cargo test --release -p ferry-proto --test sim",
            failed.len(),
            v.join("\n  ")
        );
    }
}

/// The checker catches a broken endpoint: GETs answered twice.
#[test]
fn a_get_answered_twice_is_caught() {
    let caught = (0..500u64)
        .any(|seed| !run_schedule(seed, &|ep| ep.mutations.get_answered_twice = true).is_empty());
    assert!(caught, "no schedule noticed GETs answered twice");
}

/// The checker catches a broken endpoint: a stored message delivered but left in the inbox.
#[test]
fn a_message_left_in_the_inbox_is_caught() {
    let caught = (0..500u64)
        .any(|seed| !run_schedule(seed, &|ep| ep.mutations.inbox_not_emptied = true).is_empty());
    assert!(caught, "no schedule noticed messages left in the inbox");
}

/// Schedules that once broke a property, replayed on every run whatever `FERRY_SIM_SEEDS` says.
const REGRESSION_SEEDS: &[u64] = &[51571];

/// Replays [`REGRESSION_SEEDS`]. 51571: two ranks that quit after a failure each still owe the other a large (announced)
/// message that no receive will take; each waited in its finish for the other to pull, so
/// neither ever said goodbye.
#[test]
fn regression_seeds_hold() {
    for &seed in REGRESSION_SEEDS {
        let v = run_schedule(seed, &|_| {});
        assert!(v.is_empty(), "seed {seed}:\n  {}", v.join("\n  "));
    }
}
