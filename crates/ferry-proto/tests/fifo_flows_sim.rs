//! Seeded simulation of receive-side flow numbering over FIFO channels (`FifoFlows`, used by
//! the in-memory and single-rank backends): N ranks, one FIFO channel per ordered pair,
//! messages on a handful of tags (so flows are forgotten and reused over and over), sends
//! and receives posted in random orders, and deliveries delayed at random (each channel stays
//! in order, channels overtake each other).
//!
//! Checked for every schedule:
//! - the k-th receive posted on a flow takes the k-th message sent on it (MPI's
//!   non-overtaking rule), each message exactly once, with its contents;
//! - a flow has state only while something of it is outstanding: every rank's table holds at
//!   most as many flows as it has messages waiting plus receives posted and not yet served,
//!   and is empty at the end.
//!
//! `FERRY_SIM_SEEDS` sets the number of schedules (default 2000), `FERRY_SIM_SEED` replays one.

use std::collections::{HashMap, VecDeque};

use ferry_proto::{FifoFlows, MsgKey};

mod seeded;

use seeded::{seeds, Rng};

/// A message: its id is its place in the program, so a receive can tell which one it got.
#[derive(Clone, Copy, Debug)]
struct Msg {
    source: usize,
    dest: usize,
    key: MsgKey,
    id: usize,
}

struct Rank {
    flows: FifoFlows,
    /// Messages that arrived before their receive: (source, key, serial) -> id.
    inbox: HashMap<(usize, MsgKey, u64), usize>,
    /// Receives waiting for their message: (source, key, serial) -> the id they must get.
    posted: HashMap<(usize, MsgKey, u64), usize>,
    /// This rank's sends and receives, in the order the program issues each kind.
    sends: VecDeque<Msg>,
    recvs: VecDeque<(usize, MsgKey, usize)>,
}

fn run(seed: u64) {
    let mut rng = Rng(seed);
    let n = 2 + rng.index(3);
    let tags = 1 + rng.index(4) as u32;
    let count = 50 + rng.index(400);
    let msgs: Vec<Msg> = (0..count)
        .map(|id| {
            let source = rng.index(n);
            let dest = rng.index(n);
            Msg {
                source,
                dest,
                key: MsgKey::user(rng.index(tags as usize) as u32),
                id,
            }
        })
        .collect();
    let mut ranks: Vec<Rank> = (0..n)
        .map(|_| Rank {
            flows: FifoFlows::new(),
            inbox: HashMap::new(),
            posted: HashMap::new(),
            sends: VecDeque::new(),
            recvs: VecDeque::new(),
        })
        .collect();
    for m in &msgs {
        ranks[m.source].sends.push_back(*m);
    }
    // Each receiver posts its receives in an order of its own: random across flows, but within
    // a flow in send order (the k-th receive of a flow must get its k-th message).
    let mut per_flow: HashMap<(usize, usize, MsgKey), VecDeque<usize>> = HashMap::new();
    for m in &msgs {
        per_flow
            .entry((m.source, m.dest, m.key))
            .or_default()
            .push_back(m.id);
    }
    let mut flows: Vec<_> = per_flow.into_iter().collect();
    flows.sort_by_key(|(k, _)| *k);
    loop {
        let live: Vec<usize> = (0..flows.len())
            .filter(|&i| !flows[i].1.is_empty())
            .collect();
        if live.is_empty() {
            break;
        }
        let i = live[rng.index(live.len())];
        let ((source, dest, key), ids) = &mut flows[i];
        let id = ids.pop_front().expect("live flow");
        ranks[*dest].recvs.push_back((*source, *key, id));
    }

    let mut channels: HashMap<(usize, usize), VecDeque<Msg>> = HashMap::new();
    let mut delivered = vec![false; count];
    loop {
        let mut moves = Vec::new();
        for (r, rank) in ranks.iter().enumerate() {
            if !rank.sends.is_empty() {
                moves.push((0, r, 0));
            }
            if !rank.recvs.is_empty() {
                moves.push((1, r, 0));
            }
        }
        for (&(s, d), q) in &channels {
            if !q.is_empty() {
                moves.push((2, s, d));
            }
        }
        if moves.is_empty() {
            break;
        }
        moves.sort_unstable();
        let (what, a, b) = moves[rng.index(moves.len())];
        match what {
            0 => {
                let m = ranks[a].sends.pop_front().expect("send");
                if m.dest == a {
                    // To self: "arrives" at once, in send order.
                    deliver(seed, &mut ranks[a], m, &mut delivered);
                } else {
                    channels.entry((a, m.dest)).or_default().push_back(m);
                }
            }
            1 => {
                let rank = &mut ranks[a];
                let (source, key, want) = rank.recvs.pop_front().expect("recv");
                let serial = rank.flows.post(source, key);
                if let Some(m) = rank.inbox.remove(&(source, key, serial)) {
                    rank.flows.taken(source, key);
                    got(seed, m, want, &mut delivered);
                } else {
                    rank.posted.insert((source, key, serial), want);
                }
            }
            _ => {
                let m = channels
                    .get_mut(&(a, b))
                    .and_then(|q| q.pop_front())
                    .expect("message in channel");
                deliver(seed, &mut ranks[b], m, &mut delivered);
            }
        }
        for (r, rank) in ranks.iter().enumerate() {
            let outstanding = rank.inbox.len() + rank.posted.len();
            assert!(
                rank.flows.len() <= outstanding,
                "seed {seed} (replay with FERRY_SIM_SEED={seed}): rank {r} keeps {} flows \
                 with {outstanding} messages and receives outstanding",
                rank.flows.len()
            );
        }
    }
    assert!(
        delivered.iter().all(|&d| d),
        "seed {seed}: undelivered messages"
    );
    for (r, rank) in ranks.iter().enumerate() {
        assert!(
            rank.flows.is_empty() && rank.inbox.is_empty() && rank.posted.is_empty(),
            "seed {seed}: rank {r} ends with {} flows",
            rank.flows.len()
        );
    }
}

/// A message reaches its receiver: numbered in its flow, then given to the receive waiting
/// for that serial or kept until one is posted.
fn deliver(seed: u64, rank: &mut Rank, m: Msg, delivered: &mut [bool]) {
    let serial = rank.flows.arrive(m.source, m.key);
    if let Some(want) = rank.posted.remove(&(m.source, m.key, serial)) {
        rank.flows.taken(m.source, m.key);
        got(seed, m.id, want, delivered);
    } else {
        rank.inbox.insert((m.source, m.key, serial), m.id);
    }
}

/// A receive that must get message `want` got message `m`.
fn got(seed: u64, m: usize, want: usize, delivered: &mut [bool]) {
    assert_eq!(
        m, want,
        "seed {seed} (replay with FERRY_SIM_SEED={seed}): a receive got message {m} instead \
         of {want}"
    );
    assert!(!delivered[m], "seed {seed}: message {m} delivered twice");
    delivered[m] = true;
}

#[test]
fn fifo_flows_deliver_in_flow_order_and_forget_idle_flows() {
    for seed in seeds(2000) {
        run(seed);
    }
}
