//! Self-test and micro-benchmark of the MPI backend, run under `mpirun` (used by
//! `tests/mpirun.rs`).
//!
//! `mpirun -n N mpi_selftest check`    exchanges of many shapes; prints `ok <name>` lines and
//!                                     exits 1 on the first failure.
//! `mpirun -n N mpi_selftest timeout`  rank 0 waits for a message that never comes and must get a
//!                                     timeout error (set `FERRY_GENERAL_OPERATION_TIMEOUT_MS`).
//! `mpirun -n 2 mpi_selftest bench`    ping-pong latency (8 B) and bandwidth (1 MiB) figures.
//! `mpirun -n N mpi_selftest stress [ROUNDS]`  random all-to-all rounds (sizes, keys incl.
//!                                     colliding hashed ones, receive order), every byte checked.
//! `mpirun -n N mpi_selftest threads`  the MPI thread level, and a send from a second thread
//!                                     (refused below `FERRY_MPI_THREAD_LEVEL=serialized`).

use std::process::ExitCode;
use std::time::Instant;

use ferry_core::{Config, ErrorKind, Exchange, MsgKey, MsgKind, Transport};
use ferry_mpi::MpiTransport;

fn fail(rank: usize, what: &str) -> ExitCode {
    eprintln!("rank {rank}: FAILED {what}");
    ExitCode::from(1)
}

fn pattern(from: usize, to: usize, len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ (from as u8) ^ ((to as u8) << 4) ^ salt)
        .collect()
}

fn check(t: &mut MpiTransport) -> Result<(), String> {
    let (rank, size) = (t.rank(), t.size());
    let right = (rank + 1) % size;
    let left = (rank + size - 1) % size;
    let e = |e: ferry_core::Error| e.to_string();

    // Ring exchanges of several sizes, both receive flavours, in one batched exchange each.
    for (round, len) in [0usize, 1, 8, 8192, 1 << 20, 3 << 20]
        .into_iter()
        .enumerate()
    {
        let out = pattern(rank, right, len, round as u8);
        let mut got_vec = Vec::new();
        let mut got_slice = vec![0u8; len];
        let out2 = pattern(rank, left, len, round as u8 ^ 0x55);
        {
            let mut ex = Exchange::new();
            ex.send(right, MsgKey::user(1), &out);
            ex.send(left, MsgKey::user(2), &out2);
            ex.recv(left, MsgKey::user(1), &mut got_vec);
            ex.recv_into(right, MsgKey::user(2), &mut got_slice);
            t.exchange(&mut ex).map_err(e)?;
        }
        if got_vec != pattern(left, rank, len, round as u8) {
            return Err(format!("ring vec receive of {len} bytes"));
        }
        if got_slice != pattern(right, rank, len, round as u8 ^ 0x55) {
            return Err(format!("ring slice receive of {len} bytes"));
        }
    }
    println!("ok ring");

    // Several messages of one flow in one exchange arrive in send order (M2), also for keys that
    // do not fit an MPI tag (hashed mode, with a key header).
    for key in [
        MsgKey::user(7),
        MsgKey::new(100_000, MsgKind::DATA, u32::MAX),
        MsgKey::new(0, MsgKind(77), 5),
    ] {
        let msgs: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 100 + i as usize]).collect();
        let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); 5];
        {
            let mut ex = Exchange::new();
            for m in &msgs {
                ex.send(right, key, m);
            }
            for b in bufs.iter_mut() {
                ex.recv(left, key, b);
            }
            t.exchange(&mut ex).map_err(e)?;
        }
        if bufs != msgs {
            return Err(format!("flow order for {key:?}"));
        }
    }
    println!("ok flow-order");

    // Two hashed keys whose messages come in the opposite order of the receives: the one that
    // arrives first for the other key is kept aside.
    // Search two keys that share one hashed MPI tag (a birthday search over 2^30 tags needs a
    // few ten thousand keys).
    let (ka, kb) = {
        let map = t.tag_map();
        let mut seen = std::collections::HashMap::new();
        let mut found = None;
        for i in 0..1_000_000u32 {
            let k = MsgKey::new(5000, MsgKind::USER, i);
            if let Some(&other) = seen.get(&map.wire(k).tag) {
                found = Some((other, k));
                break;
            }
            seen.insert(map.wire(k).tag, k);
        }
        found.ok_or("no colliding hashed keys found")?
    };
    {
        let (a, b) = (vec![0xaa; 10], vec![0xbb; 20]);
        t.send(right, kb, &b).map_err(e)?;
        t.send(right, ka, &a).map_err(e)?;
        let (mut ra, mut rb) = (Vec::new(), Vec::new());
        t.recv(left, ka, &mut ra).map_err(e)?;
        t.recv(left, kb, &mut rb).map_err(e)?;
        if ra != a || rb != b {
            return Err("hashed keys received out of order".into());
        }
    }
    println!("ok hashed-reorder {ka:?} {kb:?}");

    // The same inside an exchange that also waits for a late message: after the probe found
    // the other key's message (kept aside), the next pass must probe again at once, not wait
    // for a completion or for the draining of unasked-for messages (which would take ka).
    if size >= 2 && rank <= 1 {
        let drained = |t: &MpiTransport| {
            t.stats()
                .extra
                .iter()
                .find(|(n, _)| *n == "mpi_drained_total")
                .map_or(u64::MAX, |e| e.1)
        };
        let (a, b, late) = (vec![0xa1; 10], vec![0xb1; 20], [7u8; 8]);
        if rank == 0 {
            t.send(1, kb, &b).map_err(e)?;
            t.send(1, ka, &a).map_err(e)?;
            // After kb and ka (MPI keeps their order): both are in rank 1's queue by the
            // time it has this one.
            t.send(1, MsgKey::user(80), b"go").map_err(e)?;
            std::thread::sleep(std::time::Duration::from_millis(300));
            t.send(1, MsgKey::user(81), &late).map_err(e)?;
            // Nothing else goes to rank 1 until its exchange is over (it would be drained).
            let mut done = Vec::new();
            t.recv(1, MsgKey::user(82), &mut done).map_err(e)?;
            println!("ok hashed-reprobe: sent");
        } else {
            let mut go = Vec::new();
            t.recv(0, MsgKey::user(80), &mut go).map_err(e)?;
            let before = drained(t);
            let (mut ra, mut got_late) = (Vec::new(), [0u8; 8]);
            {
                let mut ex = Exchange::new();
                ex.recv(0, ka, &mut ra);
                ex.recv_into(0, MsgKey::user(81), &mut got_late);
                t.exchange(&mut ex).map_err(e)?;
            }
            let took = drained(t) - before;
            t.send(0, MsgKey::user(82), b"done").map_err(e)?;
            let mut rb = Vec::new();
            t.recv(0, kb, &mut rb).map_err(e)?;
            if ra != a || rb != b || got_late != late {
                return Err("hashed-reprobe: data differs".into());
            }
            if took != 0 {
                return Err(format!(
                    "hashed-reprobe: {took} messages drained: ka was not probed again after \
                     kb was kept aside"
                ));
            }
            println!("ok hashed-reprobe: received");
        }
    } else {
        println!("ok hashed-reprobe: not run on this rank");
    }

    // Message to self.
    {
        let mut got = Vec::new();
        let mut ex = Exchange::new();
        let data = b"self".to_vec();
        ex.send(rank, MsgKey::user(3), &data);
        ex.recv(rank, MsgKey::user(3), &mut got);
        t.exchange(&mut ex).map_err(e)?;
        if got != b"self" {
            return Err("self message".into());
        }
    }
    println!("ok self");

    // A receive of the wrong fixed length is a protocol error, not a crash.
    {
        t.send(right, MsgKey::user(4), &[1, 2, 3]).map_err(e)?;
        let mut small = [0u8; 2];
        let mut ex = Exchange::new();
        ex.recv_into(left, MsgKey::user(4), &mut small);
        match t.exchange(&mut ex) {
            Err(err) if err.kind() == ErrorKind::Protocol => {}
            other => return Err(format!("length mismatch gave {other:?}")),
        }
    }
    // ... also when the message is shorter than the fixed-length receive (a posted MPI_Irecv
    // accepts it; the backend must compare the lengths), and the flow stays usable.
    {
        t.send(right, MsgKey::user(5), &[9]).map_err(e)?;
        let mut two = [0u8; 2];
        let mut ex = Exchange::new();
        ex.recv_into(left, MsgKey::user(5), &mut two);
        match t.exchange(&mut ex) {
            Err(err) if err.kind() == ErrorKind::Protocol => {}
            other => return Err(format!("short message gave {other:?}")),
        }
        t.send(right, MsgKey::user(5), &[7, 8]).map_err(e)?;
        let mut ex = Exchange::new();
        ex.recv_into(left, MsgKey::user(5), &mut two);
        t.exchange(&mut ex).map_err(e)?;
        if two != [7, 8] {
            return Err(format!("flow after a short message gave {two:?}"));
        }
    }
    println!("ok length-mismatch");

    // Messages around the split length (ferry_mpi::EAGER_BYTES: shorter ones travel in one
    // piece, longer ones as a first part and a rest), through `send`/`recv` and through
    // exchanges with both receive flavours, several per flow.
    let eager = ferry_mpi::EAGER_BYTES;
    let sizes = [
        eager - 9,
        eager - 8,
        eager - 1,
        eager,
        eager + 1,
        2 * eager + 3,
        65536,
    ];
    for (j, &len) in sizes.iter().enumerate() {
        let out = pattern(rank, right, len, 0x30 + j as u8);
        let mut got = Vec::new();
        t.send(right, MsgKey::user(30), &out).map_err(e)?;
        t.recv(left, MsgKey::user(30), &mut got).map_err(e)?;
        if got != pattern(left, rank, len, 0x30 + j as u8) {
            return Err(format!("split: send/recv of {len} bytes"));
        }
    }
    {
        let outs: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(j, &len)| pattern(rank, right, len, j as u8))
            .collect();
        let mut vecs: Vec<Vec<u8>> = vec![Vec::new(); sizes.len()];
        let mut slices: Vec<Vec<u8>> = sizes.iter().map(|&len| vec![0u8; len]).collect();
        let mut ex = Exchange::new();
        for o in &outs {
            ex.send(right, MsgKey::user(31), o);
        }
        for o in &outs {
            ex.send(right, MsgKey::user(32), o);
        }
        for v in vecs.iter_mut() {
            ex.recv(left, MsgKey::user(31), v);
        }
        for s in slices.iter_mut() {
            ex.recv_into(left, MsgKey::user(32), s);
        }
        t.exchange(&mut ex).map_err(e)?;
        drop(ex);
        for (j, &len) in sizes.iter().enumerate() {
            let want = pattern(left, rank, len, j as u8);
            if vecs[j] != want || slices[j] != want {
                return Err(format!(
                    "split: exchange of {len} bytes (message {j} of its flow)"
                ));
            }
        }
    }
    // A wrong-length receive names both lengths, also when the message is split (the longer
    // one) or the receive is (the shorter one), and the flow stays usable afterwards: the rest
    // of a refused split message must not be taken for the next message's.
    for (sent, expected) in [(5000usize, 4000usize), (5000, 10), (10, 5000), (5000, 6000)] {
        t.send(right, MsgKey::user(33), &pattern(rank, right, sent, 1))
            .map_err(e)?;
        let mut fixed = vec![0u8; expected];
        let mut ex = Exchange::new();
        ex.recv_into(left, MsgKey::user(33), &mut fixed);
        match t.exchange(&mut ex) {
            Err(err)
                if err.kind() == ErrorKind::Protocol
                    && err.to_string().contains(&format!("has {sent} bytes"))
                    && err.to_string().contains(&format!("expects {expected}")) => {}
            other => return Err(format!("{sent} bytes into {expected} gave {other:?}")),
        }
        let next = pattern(rank, right, 7000, 2);
        t.send(right, MsgKey::user(33), &next).map_err(e)?;
        let mut got = vec![0u8; 7000];
        let mut ex = Exchange::new();
        ex.recv_into(left, MsgKey::user(33), &mut got);
        t.exchange(&mut ex).map_err(e)?;
        if got != pattern(left, rank, 7000, 2) {
            return Err(format!("flow after {sent} bytes into {expected} differs"));
        }
    }
    println!("ok split");

    // Exact-tag receives inside `exchange`, `send` and `recv` are matched by MPI as their
    // message arrives, never through a probe (MPI_Improbe answers from the unexpected queue
    // only, at several times the cost of a posted receive for short messages).
    let probed = |t: &MpiTransport| {
        t.stats()
            .extra
            .iter()
            .find(|(n, _)| *n == "mpi_probed_receives")
            .map_or(u64::MAX, |e| e.1)
    };
    let before = probed(t);
    for len in [8usize, 64 << 10] {
        let out = pattern(rank, right, len, 3);
        for _ in 0..10 {
            let mut got = Vec::new();
            t.send(right, MsgKey::user(34), &out).map_err(e)?;
            t.recv(left, MsgKey::user(34), &mut got).map_err(e)?;
            let mut fixed = vec![0u8; len];
            let mut ex = Exchange::new();
            ex.send(right, MsgKey::user(35), &out);
            ex.recv_into(left, MsgKey::user(35), &mut fixed);
            t.exchange(&mut ex).map_err(e)?;
            if got != pattern(left, rank, len, 3) || fixed != got {
                return Err(format!("no-probe round of {len} bytes"));
            }
        }
    }
    let after = probed(t);
    if after != before {
        return Err(format!(
            "{} receives were matched through a probe",
            after.wrapping_sub(before)
        ));
    }
    println!("ok no-probe");

    // Without an operation timeout a message of at most 256 bytes to another rank is one
    // blocking MPI_Send (no MPI_Isend + MPI_Test); a longer one, and every send under a
    // timeout, is not.
    let short_sends = |t: &MpiTransport| {
        t.stats()
            .extra
            .iter()
            .find(|(n, _)| *n == "mpi_short_sends")
            .map_or(u64::MAX, |e| e.1)
    };
    let before = short_sends(t);
    let (small, large) = (pattern(rank, right, 100, 4), pattern(rank, right, 4096, 5));
    t.send(right, MsgKey::user(54), &small).map_err(e)?;
    t.send(right, MsgKey::user(54), &large).map_err(e)?;
    let (mut got_small, mut got_large) = (Vec::new(), Vec::new());
    t.recv(left, MsgKey::user(54), &mut got_small).map_err(e)?;
    t.recv(left, MsgKey::user(54), &mut got_large).map_err(e)?;
    if got_small != pattern(left, rank, 100, 4) || got_large != pattern(left, rank, 4096, 5) {
        return Err("short-send round: data differs".into());
    }
    let timeout = t.wait_policy().timeout.is_some();
    let made = short_sends(t).wrapping_sub(before);
    // Never to oneself (Open MPI's `btl self` has the smallest eager limit).
    if made != u64::from(!timeout && right != rank) {
        return Err(format!(
            "{made} blocking short sends for one short and one split send (timeout set: {timeout})"
        ));
    }
    println!("ok short-sends: {made}");

    // A progress pass tests all its requests with one MPI call (each MPI_Test of an
    // unfinished request runs MPI's progress engine once): an exchange of 16 receives that
    // waits for its messages (16 flows) makes about one test call per pass, not 16. Rank 0
    // sends its 16 messages 200 ms after rank 1 is ready; the others receive theirs before
    // sending on.
    let (passes, tests, _, full) = chain(t, |j| MsgKey::user(36 + j as u32))?;
    // One batched test per pass, plus direct tests of the receives the first pass posted
    // (and some slack), never one per waiting receive and pass. Rank 1 waited for rank 0's
    // pause, so its exchange certainly made many passes.
    if (rank == 1 && passes < 20) || tests > passes + 2 * CHAIN as u64 {
        return Err(format!(
            "{tests} request tests in {passes} progress passes over {CHAIN} waiting receives"
        ));
    }
    println!("ok batched-tests: {tests} tests in {passes} passes");

    // While every receive of that exchange waited on a posted first part, a pass whose
    // batched test found nothing complete ended there: only passes after a completion (and
    // the first) walked the 16 receives, at most two per message.
    if full > 2 * CHAIN as u64 + 2 {
        return Err(format!(
            "{full} of {passes} progress passes walked the {CHAIN} waiting receives"
        ));
    }
    println!("ok quiet-passes: {full} of {passes} passes walked the receives");

    // A window of sends that MPI cannot complete at once (64 KiB: a rendezvous) is tested
    // with one call after it is started, not one MPI_Test per send.
    window(t)?;

    // The same on one flow: the receives behind the first post their first parts before
    // their messages arrive (so MPI matches them in place), and still get them in order.
    let (_, _, ahead, _) = chain(t, |_| MsgKey::user(52))?;
    if rank == 1 && ahead < CHAIN as u64 - 1 {
        return Err(format!(
            "only {ahead} of {} receives behind the first of their flow were posted early",
            CHAIN - 1
        ));
    }
    println!("ok posted-ahead: {ahead}");

    // A peer out of range is an invalid argument.
    match t.send(size, MsgKey::user(0), b"x") {
        Err(err) if err.kind() == ErrorKind::InvalidArgument => {}
        other => return Err(format!("bad peer gave {other:?}")),
    }
    println!("ok bad-peer");

    let nodes: Vec<usize> = (0..size).map(|r| t.node_of(r)).collect();
    println!("ok nodes {nodes:?}");
    Ok(())
}

/// Receives in the `batched-tests` and `posted-ahead` checks.
const CHAIN: usize = 16;

/// Passes a batch of [`CHAIN`] 8-byte messages (message `j` with key `key(j)`) around the ring:
/// rank 0 sends 200 ms after rank 1 is ready to receive, every other rank receives its batch
/// in one exchange before sending on. Returns the receiving exchange's progress passes, request tests and first
/// parts posted ahead (differences of the transport's counters).
fn chain(
    t: &mut MpiTransport,
    key: impl Fn(usize) -> MsgKey,
) -> Result<(u64, u64, u64, u64), String> {
    let (rank, size) = (t.rank(), t.size());
    let right = (rank + 1) % size;
    let left = (rank + size - 1) % size;
    let e = |e: ferry_core::Error| e.to_string();
    let counter = |t: &MpiTransport, name: &str| {
        t.stats()
            .extra
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |e| e.1)
    };
    let out: Vec<Vec<u8>> = (0..CHAIN)
        .map(|j| pattern(rank, right, 8, j as u8))
        .collect();
    let send_batch = |t: &mut MpiTransport| {
        let mut ex = Exchange::new();
        for (j, o) in out.iter().enumerate() {
            ex.send(right, key(j), o);
        }
        t.exchange(&mut ex).map_err(e)
    };
    // Rank 1 says when it is about to wait, and rank 0 sends only well after that: however
    // late a loaded machine lets rank 1 get here, its exchange then waits ~200 ms.
    if rank == 1 {
        t.send(0, MsgKey::user(53), b"r").map_err(e)?;
    }
    if rank == 0 {
        if size > 1 {
            let mut ready = Vec::new();
            t.recv(1, MsgKey::user(53), &mut ready).map_err(e)?;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        send_batch(t)?;
    }
    let names = [
        "mpi_progress_passes",
        "mpi_request_tests",
        "mpi_posted_ahead",
        "mpi_full_passes",
    ];
    let before: Vec<u64> = names.iter().map(|n| counter(t, n)).collect();
    let mut got = [[0u8; 8]; CHAIN];
    {
        let mut ex = Exchange::new();
        for (j, g) in got.iter_mut().enumerate() {
            ex.recv_into(left, key(j), g);
        }
        t.exchange(&mut ex).map_err(e)?;
    }
    let d: Vec<u64> = names
        .iter()
        .zip(&before)
        .map(|(n, b)| counter(t, n) - b)
        .collect();
    for (j, g) in got.iter().enumerate() {
        if g[..] != pattern(left, rank, 8, j as u8)[..] {
            return Err(format!("chain message {j} differs (out of order?)"));
        }
    }
    if rank != 0 {
        send_batch(t)?;
    }
    Ok((d[0], d[1], d[2], d[3]))
}

/// Rank 0 sends [`CHAIN`] messages of 64 KiB to rank 1 in one exchange, which rank 1 receives
/// only ~200 ms later (it says when it starts waiting, then sleeps outside ferry), so none of
/// the sends completes at once: rank 0's exchange must test them with one call per pass
/// (and one right after starting them), never one `MPI_Test` per send.
fn window(t: &mut MpiTransport) -> Result<(), String> {
    let (rank, size) = (t.rank(), t.size());
    if size < 2 || rank > 1 {
        println!("ok batched-sends: not run on this rank");
        return Ok(());
    }
    let e = |e: ferry_core::Error| e.to_string();
    let counter = |t: &MpiTransport, name: &str| {
        t.stats()
            .extra
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |e| e.1)
    };
    const LEN: usize = 64 << 10;
    let key = |j: usize| MsgKey::user(70 + j as u32);
    if rank == 1 {
        t.send(0, MsgKey::user(69), b"r").map_err(e)?;
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut got = vec![vec![0u8; LEN]; CHAIN];
        let mut ex = Exchange::new();
        for (j, g) in got.iter_mut().enumerate() {
            ex.recv_into(0, key(j), g);
        }
        t.exchange(&mut ex).map_err(e)?;
        drop(ex);
        for (j, g) in got.iter().enumerate() {
            if *g != pattern(0, 1, LEN, j as u8) {
                return Err(format!("window message {j} differs"));
            }
        }
        println!("ok batched-sends: received");
        return Ok(());
    }
    let mut ready = Vec::new();
    t.recv(1, MsgKey::user(69), &mut ready).map_err(e)?;
    let out: Vec<Vec<u8>> = (0..CHAIN).map(|j| pattern(0, 1, LEN, j as u8)).collect();
    let (passes, tests) = (
        counter(t, "mpi_progress_passes"),
        counter(t, "mpi_request_tests"),
    );
    let mut ex = Exchange::new();
    for (j, o) in out.iter().enumerate() {
        ex.send(1, key(j), o);
    }
    t.exchange(&mut ex).map_err(e)?;
    drop(ex);
    let passes = counter(t, "mpi_progress_passes") - passes;
    let tests = counter(t, "mpi_request_tests") - tests;
    // One batched test per pass plus the one after starting the sends (slack for the
    // drain's own tests: none expected, nothing else is sent to rank 0 meanwhile).
    if tests > passes + 4 {
        return Err(format!(
            "{tests} request tests in {passes} progress passes over {CHAIN} unfinished sends"
        ));
    }
    println!("ok batched-sends: {tests} tests in {passes} passes");
    Ok(())
}

/// The messages still to be received on one flow (source, key index), in order.
type FlowQueue = ((usize, usize), std::collections::VecDeque<Vec<u8>>);

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
fn stress(t: &mut MpiTransport, rounds: u64) -> Result<(), String> {
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
fn crossing(t: &mut MpiTransport) -> Result<(), String> {
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

/// The software cost of one message without any waiting: `send` to self then `recv` from self,
/// 8 B, best of 7 trials of 200,000 (or `selfbench ITERS`) (compare with the same loop of MPI_Send + MPI_Recv to
/// self). Being one process, it needs no second core and is little disturbed by a loaded
/// machine.
fn selfbench(t: &mut MpiTransport, iters: u32) -> Result<(), String> {
    let me = t.rank();
    let data = [1u8; 8];
    let mut buf = Vec::with_capacity(8);
    let mut best = f64::MAX;
    for _ in 0..7 {
        let start = Instant::now();
        for _ in 0..iters {
            t.send(me, MsgKey::user(8), &data)
                .map_err(|e| e.to_string())?;
            t.recv(me, MsgKey::user(8), &mut buf)
                .map_err(|e| e.to_string())?;
        }
        best = best.min(start.elapsed().as_secs_f64() / f64::from(iters) * 1e9);
    }
    if buf != data {
        return Err("selfbench: message differs".into());
    }
    println!("selfbench rank {me}: send + recv to self, 8 B: {best:.0} ns");
    // The same with a fixed-length receive (an exchange of one `recv_into`: MPI_Irecv).
    let mut fixed = [0u8; 8];
    let mut best = f64::MAX;
    for _ in 0..7 {
        let start = Instant::now();
        for _ in 0..iters {
            t.send(me, MsgKey::user(8), &data)
                .map_err(|e| e.to_string())?;
            let mut ex = Exchange::new();
            ex.recv_into(me, MsgKey::user(8), &mut fixed);
            t.exchange(&mut ex).map_err(|e| e.to_string())?;
        }
        best = best.min(start.elapsed().as_secs_f64() / f64::from(iters) * 1e9);
    }
    if fixed != data {
        return Err("selfbench: fixed-length message differs".into());
    }
    println!("selfbench rank {me}: send + fixed-length recv to self, 8 B: {best:.0} ns");
    Ok(())
}

fn bench(t: &mut MpiTransport) -> Result<(), String> {
    if t.size() < 2 || t.rank() > 1 {
        return Ok(());
    }
    let peer = 1 - t.rank();
    for (len, iters) in [(8usize, 20_000u32), (1 << 20, 500)] {
        let data = vec![1u8; len];
        let mut buf = vec![0u8; len];
        let mut run = |t: &mut MpiTransport, n: u32| -> Result<f64, String> {
            let start = Instant::now();
            for _ in 0..n {
                if t.rank() == 0 {
                    t.send(peer, MsgKey::user(9), &data)
                        .map_err(|e| e.to_string())?;
                    let mut ex = Exchange::new();
                    ex.recv_into(peer, MsgKey::user(9), &mut buf);
                    t.exchange(&mut ex).map_err(|e| e.to_string())?;
                } else {
                    let mut ex = Exchange::new();
                    ex.recv_into(peer, MsgKey::user(9), &mut buf);
                    t.exchange(&mut ex).map_err(|e| e.to_string())?;
                    t.send(peer, MsgKey::user(9), &data)
                        .map_err(|e| e.to_string())?;
                }
            }
            Ok(start.elapsed().as_secs_f64())
        };
        run(t, iters / 10)?;
        let secs = run(t, iters)?;
        if t.rank() == 0 {
            let half_rtt_us = secs / f64::from(iters) / 2.0 * 1e6;
            let mbs = len as f64 / (half_rtt_us * 1e-6) / 1e6;
            println!("pingpong {len} B: {half_rtt_us:.2} us one-way, {mbs:.1} MB/s");
        }
    }
    Ok(())
}

/// `threads`: prints the MPI thread level, then sends to itself from a second thread. Below
/// `MPI_THREAD_SERIALIZED` that must be refused (MPI allows calls from the initialising thread
/// only) and leave the transport usable; at `serialized` it must work.
fn threads(t: &mut MpiTransport) -> Result<(), String> {
    let me = t.rank();
    let level = t.thread_level();
    println!("thread-level {level}");
    let key = MsgKey::user(77);
    let sent = std::thread::scope(|s| {
        s.spawn(|| t.send(me, key, b"from another thread"))
            .join()
            .map_err(|_| "the sending thread panicked".to_string())
    })?;
    let mut got = Vec::new();
    match (level, sent) {
        ("single" | "funneled", Err(e)) if e.kind() == ErrorKind::Unsupported => {
            if !e.to_string().contains("FERRY_MPI_THREAD_LEVEL") {
                return Err(format!("the refusal does not name the setting: {e}"));
            }
            println!("ok wrong-thread refused: {e}");
        }
        ("serialized" | "multiple", Ok(())) => {
            t.recv(me, key, &mut got).map_err(|e| e.to_string())?;
            if got != b"from another thread" {
                return Err("the message sent from another thread differs".into());
            }
            println!("ok other-thread send");
        }
        (level, other) => {
            return Err(format!(
                "a send from another thread at level {level} gave {other:?}"
            ))
        }
    }
    // The initialising thread goes on as before.
    t.send(me, key, b"home").map_err(|e| e.to_string())?;
    t.recv(me, key, &mut got).map_err(|e| e.to_string())?;
    if got != b"home" {
        return Err("the message after the refusal differs".into());
    }
    println!("ok threads");
    Ok(())
}

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "check".into());
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut t = match MpiTransport::init(&config) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let rank = t.rank();
    let result = match mode.as_str() {
        "check" => check(&mut t),
        "bench" => bench(&mut t),
        // `selfbench [ITERS]`: a smaller count suits instruction-counting profilers.
        "selfbench" => {
            let iters = std::env::args()
                .nth(2)
                .and_then(|a| a.parse().ok())
                .unwrap_or(200_000);
            selfbench(&mut t, iters)
        }
        "crossing" => crossing(&mut t),
        "threads" => threads(&mut t),
        "stress" => {
            let rounds = std::env::args()
                .nth(2)
                .and_then(|a| a.parse().ok())
                .unwrap_or(200);
            stress(&mut t, rounds)
        }
        // With FERRY_MPI_ZERO_COPY_SENDS=1 and a short timeout: rank 0's exchange times out
        // while MPI still reads its buffer, and must not return before rank 1 took it.
        "settle" => {
            let data = pattern(0, 1, 1 << 20, 7);
            if rank == 0 {
                let start = Instant::now();
                let mut ex = Exchange::new();
                ex.send(1, MsgKey::user(42), &data);
                match t.exchange(&mut ex) {
                    Err(err) if err.kind() == ErrorKind::Timeout => {
                        println!("ok settle: timed out, returned after {:?}", start.elapsed());
                        Ok(())
                    }
                    Ok(()) => {
                        println!(
                            "ok settle: completed (buffered) after {:?}",
                            start.elapsed()
                        );
                        Ok(())
                    }
                    Err(other) => Err(format!("settle gave {other}")),
                }
            } else if rank == 1 {
                std::thread::sleep(std::time::Duration::from_millis(1500));
                let mut got = Vec::new();
                match t.recv(0, MsgKey::user(42), &mut got) {
                    Ok(()) if got == data => {
                        println!("ok settle: received intact");
                        Ok(())
                    }
                    Ok(()) => Err("settle: received data differs".into()),
                    Err(e) => Err(format!("settle receive: {e}")),
                }
            } else {
                Ok(())
            }
        }
        "timeout" => {
            if rank == 0 {
                let mut buf = Vec::new();
                let start = Instant::now();
                match t.recv(t.size() - 1, MsgKey::user(99), &mut buf) {
                    Err(err) if err.kind() == ErrorKind::Timeout => {
                        println!("ok timeout after {:?}: {err}", start.elapsed());
                        Ok(())
                    }
                    other => Err(format!("waiting for a missing message gave {other:?}")),
                }
            } else {
                Ok(())
            }
        }
        other => Err(format!("unknown mode `{other}`")),
    };
    if let Err(what) = result {
        return fail(rank, &what);
    }
    if let Err(e) = t.finish() {
        return fail(rank, &format!("finish: {e}"));
    }
    ExitCode::SUCCESS
}
