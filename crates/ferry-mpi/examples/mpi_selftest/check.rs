//! `check`: exchanges of many shapes, each reported as an `ok <name>` line.

use ferry_core::{ErrorKind, Exchange, MsgKey, MsgKind, Transport};
use ferry_mpi::MpiTransport;

use crate::pattern;

pub(crate) fn check(t: &mut MpiTransport) -> Result<(), String> {
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

    new_tags(t)?;

    let nodes: Vec<usize> = (0..size).map(|r| t.node_of(r)).collect();
    println!("ok nodes {nodes:?}");
    // Which communicator the transport chose (see `MpiTransport::init`).
    println!(
        "ok comm {}",
        if t.on_world() { "world" } else { "duplicate" }
    );
    Ok(())
}

/// Iterations of the `new-tags` check with new tags (as many again reuse them).
const NEW_TAGS: u32 = 20_000;

/// A new tag per iteration (issue 05, bounded state): a ring of one message on an exact key
/// and two on a hashed key (with a key header), then as many iterations again on the first
/// tags (a reused tag keeps its order; contents checked); then, for each of a few hundred
/// pairs of new hashed keys sharing an MPI tag, the second key's message received first, so
/// the first one's is kept aside until its receive. MPI orders each flow itself, so what
/// ferry keeps per flow is only what waits aside: `flow_count` must stay flat. Prints
/// `ok new-tags: <first> <max> <pairs>`.
fn new_tags(t: &mut MpiTransport) -> Result<(), String> {
    let (rank, size) = (t.rank(), t.size());
    let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
    let mut samples = Vec::new();
    for i in 0..2 * NEW_TAGS {
        let tag = i % NEW_TAGS;
        let exact = MsgKey::user(tag);
        // Beyond the exact tag field (2^20 with 31-bit MPI tags): hashed, with a key header.
        let hashed = MsgKey::new(0, MsgKind::USER, u32::MAX - tag);
        let out = [
            i.to_le_bytes(),
            (i ^ 0xa5a5).to_le_bytes(),
            (!i).to_le_bytes(),
        ];
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        {
            let mut ex = Exchange::new();
            ex.send(right, exact, &out[0]);
            ex.send(right, hashed, &out[1]);
            ex.send(right, hashed, &out[2]);
            ex.recv(left, exact, &mut a);
            ex.recv(left, hashed, &mut b);
            ex.recv(left, hashed, &mut c);
            t.exchange(&mut ex).map_err(|e| e.to_string())?;
        }
        if [a, b, c] != out.map(|o| o.to_vec()) {
            return Err(format!(
                "new-tags: iteration {i} (tag {tag}) received other contents"
            ));
        }
        if (i + 1) % (NEW_TAGS / 5) == 0 {
            samples.push(t.flow_count().unwrap_or(usize::MAX));
        }
    }
    // Pairs of keys of a generation of their own that share a hashed MPI tag (among a million
    // keys and 2^30 tags a few hundred pairs).
    let pairs: Vec<(MsgKey, MsgKey)> = {
        let map = t.tag_map();
        let mut seen = std::collections::HashMap::new();
        let mut pairs = Vec::new();
        for i in 0..1_000_000u32 {
            let k = MsgKey::new(6000, MsgKind::USER, i);
            match seen.remove(&map.wire(k).tag) {
                Some(other) => pairs.push((other, k)),
                None => {
                    seen.insert(map.wire(k).tag, k);
                }
            }
        }
        pairs
    };
    for (j, &(ka, kb)) in pairs.iter().enumerate() {
        let (a, b) = ((j as u32).to_le_bytes(), (!(j as u32)).to_le_bytes());
        let (mut ra, mut rb) = (Vec::new(), Vec::new());
        t.send(right, kb, &b).map_err(|e| e.to_string())?;
        t.send(right, ka, &a).map_err(|e| e.to_string())?;
        t.recv(left, ka, &mut ra).map_err(|e| e.to_string())?;
        t.recv(left, kb, &mut rb).map_err(|e| e.to_string())?;
        if ra != a || rb != b {
            return Err(format!(
                "new-tags: pair {j} ({ka:?}, {kb:?}) received other contents"
            ));
        }
        if (j + 1) % (pairs.len() / 5).max(1) == 0 {
            samples.push(t.flow_count().unwrap_or(usize::MAX));
        }
    }
    let (first, max) = (samples[0], samples.iter().copied().max().unwrap_or(0));
    if max > first + 8 {
        return Err(format!(
            "new-tags: flows grew from {first} to {max}: {samples:?}"
        ));
    }
    println!("ok new-tags: {first} {max} {}", pairs.len());
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
