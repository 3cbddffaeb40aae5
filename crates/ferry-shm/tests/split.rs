//! Split single copy (the default path for large messages on a host with a core per rank):
//! the receiver reads half of each message while the sender writes the other half straight
//! into the receive buffer. Real processes, so both halves cross address spaces.

mod common;

use std::time::Duration;

use common::{text, unique, wait_output, worker_cmd};

/// Messages of 64 KiB - 4 MiB (odd lengths too), one way and both ways at once in one
/// exchange (each rank serves its peer's offer while it waits for its own copy): every byte
/// arrives, and both halves were really copied by split single copy.
#[test]
fn split_copies_move_large_messages_both_ways() {
    assert!(
        ferry_core::config::available_cores() >= 2,
        "split single copy needs a core per rank: this check needs 2 cores"
    );
    let job = unique("split");
    let env = vec![("FERRY_JOB_ID", job.clone())];
    let kids: Vec<_> = (0..2)
        .map(|r| {
            worker_cmd(&env, Some(r), 2, &["split", "3"])
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    let outs: Vec<_> = kids
        .into_iter()
        .map(|k| wait_output(k, Duration::from_secs(60)))
        .collect();
    let mut totals = [0u64; 2];
    for (r, o) in outs.iter().enumerate() {
        let s = text(&o.stdout);
        assert!(o.status.success(), "rank {r}: {s} {}", text(&o.stderr));
        let counts: Vec<u64> = s
            .lines()
            .find_map(|l| l.strip_prefix("split ok "))
            .unwrap_or_else(|| panic!("rank {r}: {s}"))
            .split_whitespace()
            .map(|v| v.parse().expect("count"))
            .collect();
        totals[0] += counts[0];
        totals[1] += counts[1];
    }
    // 45 messages in all. An offer the peer has not taken within `eager_wait` is read whole
    // by the receiver instead (a loaded machine), so only "some" is certain; without split
    // single copy both counts are 0.
    assert!(
        totals[0] > 0 && totals[1] > 0,
        "no message went by split single copy: received {}, halves written {}",
        totals[0],
        totals[1]
    );
    assert!(common::leftovers(&job).is_empty());
}

/// A sender that does not take the receiver's write offer (it is not progressing) costs the
/// receiver `eager_wait`, after which it withdraws the offer and reads the whole message
/// itself; when the sender progresses again it finds the offer withdrawn and writes nothing,
/// so the buffer the receiver got back is never written behind its back. Ranks are threads
/// here, so the sender's stall is exact (it stops driving its exchange). A sender descheduled
/// for `eager_wait` right after offering its descriptor withdraws it and streams the message
/// through the ring instead (or, racing the receiver, serves the offer in its first pass):
/// such an attempt does not set the scene and is repeated.
#[test]
fn an_offer_not_taken_is_withdrawn_and_never_written_late() {
    use std::sync::mpsc::channel;
    use std::sync::Mutex;

    use ferry_core::config::SingleCopy;
    use ferry_core::{Config, Exchange, MsgKey, Transport};
    use ferry_shm::ShmTransport;

    assert!(
        ferry_core::config::available_cores() >= 2,
        "split single copy needs a core per rank: this check needs 2 cores"
    );
    let mut cfg = Config::default();
    cfg.shm.single_copy = SingleCopy::Cma;
    cfg.general.operation_timeout_ms = 20_000;
    let len = 1 << 20;
    let key = MsgKey::user(5);
    let limit = Duration::from_secs(30);
    let stat = |t: &ShmTransport, name: &str| {
        t.stats()
            .extra
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    };
    for attempt in 0..20 {
        let (back_tx, back_rx) = channel::<()>();
        let (done_tx, done_rx) = channel::<()>();
        let (back_tx, done_rx) = (Mutex::new(Some(back_tx)), Mutex::new(Some(done_rx)));
        let (back_rx, done_tx) = (Mutex::new(Some(back_rx)), Mutex::new(Some(done_tx)));
        let out = ShmTransport::run_threads(2, &cfg, |mut t| -> Result<u64, String> {
            if t.rank() == 0 {
                let data = vec![0xa5u8; len];
                let mut ex = Exchange::new();
                ex.send(1, key, &data);
                // One pass offers the descriptor; then this rank stops progressing.
                t.progress_exchange(&mut ex).map_err(|e| e.to_string())?;
                let staged = stat(&t, "shm single copies withdrawn") == 0
                    && stat(&t, "shm split writes") == 0;
                let back = back_rx.lock().unwrap().take().unwrap();
                if staged {
                    back.recv_timeout(limit).map_err(|e| e.to_string())?;
                }
                t.exchange(&mut ex).map_err(|e| e.to_string())?;
                drop(ex);
                done_tx.lock().unwrap().take().unwrap().send(()).unwrap();
                if !staged {
                    return Ok(u64::MAX);
                }
                Ok(stat(&t, "shm split writes"))
            } else {
                let mut got = Vec::new();
                let r = t.recv(0, key, &mut got).map_err(|e| e.to_string());
                let tx = back_tx.lock().unwrap().take().unwrap();
                r?;
                if got != vec![0xa5u8; len] {
                    return Err("wrong bytes".into());
                }
                // The buffer is the caller's again: reuse it, then let the sender go on (a
                // sender that did not stall has finished and dropped its end already).
                got.fill(0xee);
                let _ = tx.send(());
                let done = done_rx.lock().unwrap().take().unwrap();
                done.recv_timeout(limit).map_err(|e| e.to_string())?;
                if got.iter().any(|&b| b != 0xee) {
                    return Err(
                        "the sender wrote into the buffer after the receive returned".into(),
                    );
                }
                Ok(stat(&t, "shm split offers withdrawn"))
            }
        })
        .expect("threads");
        let (writes, withdrawn) = match (&out[0], &out[1]) {
            (Ok(w), Ok(n)) => (*w, *n),
            _ => panic!("attempt {attempt}: {out:?}"),
        };
        if writes == u64::MAX {
            continue;
        }
        assert_eq!((writes, withdrawn), (0, 1), "attempt {attempt}");
        return;
    }
    panic!("in 20 attempts the sender never stalled with its descriptor offered");
}

/// A 1 MiB pattern, different for each `salt`.
fn pattern(salt: u8) -> Vec<u8> {
    (0..1 << 20)
        .map(|i| ((i % 251) as u8).wrapping_add(salt))
        .collect()
}

/// Progresses `ex` until its only receive has a split under way (true) or is done (false).
fn until_split(
    t: &mut ferry_shm::ShmTransport,
    ex: &mut ferry_core::Exchange<'_>,
) -> Result<bool, String> {
    use ferry_core::{OpState, Transport};
    let start = std::time::Instant::now();
    loop {
        t.progress_exchange(ex).map_err(|e| e.to_string())?;
        match ex.recvs[0].state {
            OpState::Active { progress, .. } if progress != 0 => return Ok(true),
            OpState::Done => return Ok(false),
            _ if start.elapsed() > Duration::from_secs(20) => return Err("no progress".into()),
            _ => std::thread::yield_now(),
        }
    }
}

/// Two ranks as threads: rank 0 sends `pattern(salt)` on tag `first_tag` and `pattern(salt + 1)`
/// on the next tag in one exchange, then stays until rank 1 sends on the tag after them (a late
/// write would still land). Rank 1 runs `receiver`, which says whether the first message's split
/// was under way when it went on. Repeated until that was so 3 times; at most 20 attempts.
fn until_three_staged<F>(salt: u8, first_tag: u32, receiver: F)
where
    F: Fn(&mut ferry_shm::ShmTransport) -> Result<bool, String> + Sync,
{
    use ferry_core::{Config, Exchange, MsgKey, Transport};
    use ferry_shm::ShmTransport;

    assert!(
        ferry_core::config::available_cores() >= 2,
        "split single copy needs a core per rank: this check needs 2 cores"
    );
    let mut cfg = Config::default();
    cfg.general.operation_timeout_ms = 10_000;
    let mut staged = 0;
    for attempt in 0..20 {
        let out = ShmTransport::run_threads(2, &cfg, |mut t| -> Result<bool, String> {
            if t.rank() == 1 {
                return receiver(&mut t);
            }
            let (a, b) = (pattern(salt), pattern(salt + 1));
            let mut ex = Exchange::new();
            ex.send(1, MsgKey::user(first_tag), &a);
            ex.send(1, MsgKey::user(first_tag + 1), &b);
            t.exchange(&mut ex).map_err(|e| e.to_string())?;
            let mut end = Vec::new();
            t.recv(1, MsgKey::user(first_tag + 2), &mut end)
                .map_err(|e| e.to_string())?;
            Ok(true)
        })
        .expect("threads");
        match (&out[0], &out[1]) {
            (Ok(_), Ok(true)) => staged += 1,
            (Ok(_), Ok(false)) => {}
            _ => panic!("attempt {attempt}: {out:?}"),
        }
        if staged >= 3 {
            return;
        }
    }
    panic!("in 20 attempts the first exchange's split was under way only {staged} times");
}

/// A receiver that starts a split copy in one exchange and then drives another exchange that
/// receives from the same sender: each split finishes into the receive that started it. (Once,
/// a split was taken for whichever receive of the exchange being driven sat at the same index
/// with a split of its own under way: the later exchange could return with half of its message
/// not written yet, the sender writing it after the receive had returned, and the earlier
/// exchange's receive was never completed.) Ranks are threads, so that the receiver can hold
/// the first exchange open at the right moment.
#[test]
fn a_split_finishes_into_the_exchange_that_started_it() {
    use ferry_core::{Exchange, MsgKey, Transport};

    until_three_staged(1, 11, |t| {
        let mut a_buf = Vec::new();
        let mut ex1 = Exchange::new();
        ex1.recv(0, MsgKey::user(11), &mut a_buf);
        let split_under_way = until_split(t, &mut ex1)?;
        let mut b_buf = Vec::new();
        {
            let mut ex2 = Exchange::new();
            ex2.recv(0, MsgKey::user(12), &mut b_buf);
            t.exchange(&mut ex2)
                .map_err(|e| format!("second exchange: {e}"))?;
        }
        let b_returned = b_buf.clone();
        t.exchange(&mut ex1)
            .map_err(|e| format!("first exchange: {e}"))?;
        drop(ex1);
        t.send(0, MsgKey::user(13), &[1])
            .map_err(|e| e.to_string())?;
        if b_returned != pattern(2) {
            return Err("the second exchange returned before its message was whole".into());
        }
        if a_buf != pattern(1) || b_buf != pattern(2) {
            return Err("wrong bytes".into());
        }
        Ok(split_under_way)
    });
}

/// Abandoning one exchange settles the split copies of that exchange only: an earlier
/// exchange whose split is under way still completes with every byte, and the abandoned
/// receive's buffer is never written after the abandon returned. (Once, abandoning any
/// exchange settled every split of the rank, and the earlier exchange's receive then waited
/// until its operation timeout.)
#[test]
fn abandoning_an_exchange_leaves_another_exchanges_split_alone() {
    use ferry_core::{Error, ErrorKind, Exchange, MsgKey, Transport};

    until_three_staged(3, 21, |t| {
        let mut a_buf = Vec::new();
        let mut ex1 = Exchange::new();
        ex1.recv(0, MsgKey::user(21), &mut a_buf);
        let split_under_way = until_split(t, &mut ex1)?;
        let mut b_buf = Vec::new();
        {
            let mut ex2 = Exchange::new();
            ex2.recv(0, MsgKey::user(22), &mut b_buf);
            until_split(t, &mut ex2)?;
            let why = Error::new(ErrorKind::Revoked, "exchange");
            t.abandon_exchange(&mut ex2, &why);
        }
        // The abandoned receive's buffer is the program's again.
        b_buf.clear();
        b_buf.resize(1 << 20, 0xee);
        t.exchange(&mut ex1)
            .map_err(|e| format!("first exchange: {e}"))?;
        drop(ex1);
        t.send(0, MsgKey::user(23), &[1])
            .map_err(|e| e.to_string())?;
        if a_buf != pattern(3) {
            return Err("wrong bytes in the first exchange".into());
        }
        if b_buf.iter().any(|&x| x != 0xee) {
            return Err("the abandoned receive's buffer was written after the abandon".into());
        }
        Ok(split_under_way)
    });
}
