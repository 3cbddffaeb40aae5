//! One seeded schedule: random ranks, flows, settings and faults, run to the end and checked.

use super::*;

/// Runs schedule `seed` with `mutate` applied to every endpoint; returns the violations.
pub(crate) fn run_schedule(seed: u64, mutate: &dyn Fn(&mut Endpoint)) -> Vec<String> {
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
    // TRYs written from the program's buffer: in two schedules of three, from a size drawn
    // apart from `rng` (the schedules with them off stay as they were).
    let mut hold_rng = Rng(seed ^ 0x7e57_d1ec_7e57_d1ec);
    let direct_min = match hold_rng.below(3) {
        0 => usize::MAX,
        _ => hold_rng.below(eager as u64) as usize,
    };
    // How long a call waits for the answers of its TRYs before copying them: off in a third
    // of the schedules (copied when the call ends, as before), else up to 300 us after the
    // last answer or write plus the message at 1-4 bytes per us; drawn apart from both
    // generators above, so that the schedules stay what they were.
    let mut wait_rng = Rng(seed ^ 0x0ea9_e4b0_1d0e_a9e4);
    let (eager_hold, eager_hold_rate) = match wait_rng.below(3) {
        0 => (Duration::ZERO, 0),
        _ => (
            d(wait_rng.below(300)),
            (1 + wait_rng.below(4)) * 1_000_000 * u64::from(wait_rng.chance(80)),
        ),
    };
    let eager_hold_min = match wait_rng.below(3) {
        0 => 0,
        _ => wait_rng.below(4 * eager as u64) as usize,
    };
    // Retirement of idle point-to-point flows after as few as one flow (drawn apart too).
    let mut retire_rng = Rng(seed ^ 0x2e71_2e00_f10e_5eed);
    let retire_above = match retire_rng.below(3) {
        0 => 256,
        _ => 1 + retire_rng.below(3) as usize,
    };
    let mut nodes = Vec::new();
    for r in 0..n {
        let mut cfg = EndpointConfig::new(r, size, &secret);
        cfg.refused_is_dead = refused_is_dead;
        if ghost {
            cfg.excluded = (0..size).map(|p| p == n).collect();
        }
        cfg.eager_bytes = eager;
        cfg.eager_direct_min = direct_min;
        cfg.eager_hold = eager_hold;
        cfg.eager_hold_rate = eager_hold_rate;
        cfg.eager_hold_min = eager_hold_min;
        cfg.retire_p2p_above = retire_above;
        cfg.retire_every = d(50 + retire_rng.below(200));
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
    // A third of the schedules that retire after a few flows use a new tag per message
    // instead (drawn apart, so the other schedules stay what they were): retirements are then
    // asked all the time, in both directions of a pair, also while the ranks say goodbye.
    let mut tags_rng = Rng(seed ^ 0x7a95_0e11_d0e5_a11e);
    let tags = retire_above < 256 && tags_rng.chance(33);
    let flows = if tags {
        tag_workload(&mut tags_rng, n, &mut per_node);
        0
    } else {
        1 + rng.below(2 * n as u64) as usize
    };
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
        held: Vec::new(),
        hold_rng,
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

/// A new tag per message between random pairs of ranks, then the first tags again (a
/// retired flow starts over at serial 0 on both sides): one queue per pair, so that each
/// flow's messages keep their order across its tags and rounds.
fn tag_workload(rng: &mut Rng, n: usize, per_node: &mut [Vec<VecDeque<Op>>]) {
    let pairs = 1 + rng.below((n * (n - 1)) as u64) as usize;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..pairs {
        let src = rng.below(n as u64) as usize;
        let dst = (src + 1 + rng.below(n as u64 - 1) as usize) % n;
        if !seen.insert((src, dst)) {
            continue;
        }
        let tags = 2 + rng.below(10) as u32;
        let reused = rng.below(u64::from(tags) + 1) as u32;
        let mut next: HashMap<u32, u64> = HashMap::new();
        let (mut sends, mut recvs) = (VecDeque::new(), VecDeque::new());
        for tag in (0..tags).chain(0..reused) {
            let flow = Flow {
                src,
                dst,
                key: MsgKey::new(0, MsgKind::USER, 100 + tag),
            };
            for _ in 0..1 + rng.below(2) {
                let seq = next.entry(tag).or_insert(0);
                sends.push_back(Op::Send(flow, *seq));
                recvs.push_back(Op::Recv(flow, *seq));
                *seq += 1;
            }
        }
        per_node[src].push(sends);
        per_node[dst].push(recvs);
    }
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
