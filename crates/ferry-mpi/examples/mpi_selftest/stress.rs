//! `stress` (random all-to-all rounds, every byte checked) and `crossing`.

use ferry_core::{Exchange, MsgKey, MsgKind, Transport};
use ferry_mpi::MpiTransport;

use crate::pattern;

/// A small deterministic generator (SplitMix64), the same on every rank.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Messages rank `src` sends to `dst` in `round`: (key index, length) in send order.
fn schedule(round: u64, src: usize, dst: usize) -> Vec<(usize, usize)> {
    let h = mix(round << 32 ^ (src as u64) << 16 ^ dst as u64);
    let count = (h % 4) as usize; // 0..3 messages
    (0..count)
        .map(|j| {
            let g = mix(h ^ j as u64);
            let len = match g % 5 {
                0 => 0,
                1 => (g >> 8) as usize % 64,
                2 => (g >> 8) as usize % 4096,
                3 => (g >> 8) as usize % 65536,
                _ => (g >> 8) as usize % 300_000,
            };
            (((g >> 40) % 4) as usize, len)
        })
        .collect()
}

fn payload(round: u64, src: usize, dst: usize, j: usize, len: usize) -> Vec<u8> {
    let seed = mix(round ^ (src as u64) << 20 ^ (dst as u64) << 40 ^ j as u64);
    (0..len)
        .map(|i| (seed >> (8 * (i % 8))) as u8 ^ i as u8)
        .collect()
}

/// Random all-to-all rounds: 0-3 messages per ordered pair (self included), 0 B to 300 KB,
/// keys from a set with two exact and two hashed keys that share one MPI tag; receives are
/// posted in a random interleaving of the flows and half of them with a fixed length. Checks
/// every byte and the per-flow order (M2).
pub(crate) fn stress(t: &mut MpiTransport, rounds: u64) -> Result<(), String> {
    let (rank, size) = (t.rank(), t.size());
    let map = t.tag_map();
    let mut seen = std::collections::HashMap::new();
    let mut hashed = None;
    for i in 0..1_000_000u32 {
        let k = MsgKey::new(7000, MsgKind::COLLECTIVE, i);
        if let Some(&other) = seen.get(&map.wire(k).tag) {
            hashed = Some((other, k));
            break;
        }
        seen.insert(map.wire(k).tag, k);
    }
    let (h1, h2) = hashed.ok_or("no colliding hashed keys found")?;
    let keys = [MsgKey::user(11), MsgKey::new(3, MsgKind::DATA, 12), h1, h2];
    for round in 0..rounds {
        // What to send, and what to receive in which order.
        let outgoing: Vec<(usize, usize, Vec<u8>)> = (0..size)
            .flat_map(|dst| {
                schedule(round, rank, dst)
                    .into_iter()
                    .enumerate()
                    .map(move |(j, (k, len))| (dst, k, payload(round, rank, dst, j, len)))
            })
            .collect();
        // Per source: the messages of each flow in send order.
        let mut incoming: Vec<(usize, usize, Vec<u8>)> = Vec::new();
        for src in 0..size {
            for (j, (k, len)) in schedule(round, src, rank).into_iter().enumerate() {
                incoming.push((src, k, payload(round, src, rank, j, len)));
            }
        }
        // Interleave the flows randomly, keeping each flow's order: repeatedly pick a random
        // flow and take its next message.
        let mut queues: Vec<FlowQueue> = Vec::new();
        for (src, k, p) in incoming {
            match queues.iter_mut().find(|(f, _)| *f == (src, k)) {
                Some((_, q)) => q.push_back(p),
                None => queues.push(((src, k), std::collections::VecDeque::from([p]))),
            }
        }
        let mut order: Vec<(usize, usize, Vec<u8>)> = Vec::new();
        let mut pick = mix(round ^ (rank as u64) << 50);
        while !queues.is_empty() {
            pick = mix(pick);
            let i = (pick % queues.len() as u64) as usize;
            let (flow, q) = &mut queues[i];
            let flow = *flow;
            if let Some(p) = q.pop_front() {
                order.push((flow.0, flow.1, p));
            }
            if q.is_empty() {
                queues.swap_remove(i);
            }
        }
        let mut vec_bufs: Vec<Vec<u8>> = vec![Vec::new(); order.len()];
        let mut fixed_bufs: Vec<Vec<u8>> =
            order.iter().map(|(_, _, p)| vec![0u8; p.len()]).collect();
        {
            let mut ex = Exchange::new();
            for (dst, k, p) in &outgoing {
                ex.send(*dst, keys[*k], p);
            }
            for (i, ((src, k, _), (v, f))) in order
                .iter()
                .zip(vec_bufs.iter_mut().zip(fixed_bufs.iter_mut()))
                .enumerate()
            {
                if i % 2 == 0 {
                    ex.recv(*src, keys[*k], v);
                } else {
                    ex.recv_into(*src, keys[*k], f);
                }
            }
            t.exchange(&mut ex)
                .map_err(|e| format!("round {round}: {e}"))?;
        }
        for (i, (src, k, want)) in order.iter().enumerate() {
            let got = if i % 2 == 0 {
                &vec_bufs[i]
            } else {
                &fixed_bufs[i]
            };
            if got != want {
                return Err(format!(
                    "round {round}: receive {i} from rank {src} key {:?}: {} bytes differ \
                     (got {} bytes, want {})",
                    keys[*k],
                    got.iter().zip(want).filter(|(a, b)| a != b).count(),
                    got.len(),
                    want.len()
                ));
            }
        }
    }
    let st = t.stats();
    let received: u64 = st.received.iter().map(|r| r.messages).sum();
    let bytes: u64 = st.received.iter().map(|r| r.bytes).sum();
    let extra = |name: &str| st.extra.iter().find(|(n, _)| *n == name).map_or(0, |e| e.1);
    println!(
        "ok stress {rounds} rounds: {received} messages, {bytes} bytes received, {} sent with \
         a key header, {} kept aside for a later receive, {} moved without a copy",
        extra("mpi_hashed_tag_messages"),
        extra("mpi_kept_aside_total"),
        extra("mpi_zero_copy_messages")
    );
    Ok(())
}

/// Sends that leave from the caller's memory must not wait for a receive the receiver has not
/// reached yet. First every rank sends 4 MiB to every rank, itself included, with one `send`
/// each before it receives any (two ranks sending to each other first, T1). Then, with 3 ranks
/// or more, rank 0's send to rank 1 must complete while rank 1 waits for a message from rank
/// 2 that rank 2 sends only after rank 0's next send (M3: a send never waits for an unrelated
/// receive).
pub(crate) fn crossing(t: &mut MpiTransport) -> Result<(), String> {
    let (rank, size) = (t.rank(), t.size());
    let e = |e: ferry_core::Error| e.to_string();
    let len = 4 << 20;
    for peer in 0..size {
        t.send(peer, MsgKey::user(20), &pattern(rank, peer, len, 1))
            .map_err(e)?;
    }
    for peer in 0..size {
        let mut got = Vec::new();
        t.recv(peer, MsgKey::user(20), &mut got).map_err(e)?;
        if got != pattern(peer, rank, len, 1) {
            return Err(format!("crossing: 4 MiB from rank {peer} differs"));
        }
    }
    if size >= 3 {
        let big = pattern(0, 1, len, 2);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        match rank {
            0 => {
                t.send(1, MsgKey::user(21), &big).map_err(e)?;
                t.send(2, MsgKey::user(22), b"go").map_err(e)?;
            }
            1 => {
                t.recv(2, MsgKey::user(23), &mut a).map_err(e)?;
                t.recv(0, MsgKey::user(21), &mut b).map_err(e)?;
                if a != b"after" || b != big {
                    return Err("crossing: unrelated-receive messages differ".into());
                }
            }
            2 => {
                t.recv(0, MsgKey::user(22), &mut a).map_err(e)?;
                t.send(1, MsgKey::user(23), b"after").map_err(e)?;
            }
            _ => {}
        }
    }
    let st = t.stats();
    let extra = |name: &str| st.extra.iter().find(|(n, _)| *n == name).map_or(0, |e| e.1);
    println!(
        "ok crossing: rank {rank}, {} messages drained, {} moved without a copy",
        extra("mpi_drained_total"),
        extra("mpi_zero_copy_messages")
    );
    Ok(())
}

/// The messages still to be received on one flow (source, key index), in order.
type FlowQueue = ((usize, usize), std::collections::VecDeque<Vec<u8>>);
