//! Self-test and micro-benchmark of the MPI backend, run under `mpirun` (used by
//! `tests/mpirun.rs`).
//!
//! `mpirun -n N mpi_selftest check`    exchanges of many shapes; prints `ok <name>` lines and
//!                                     exits 1 on the first failure.
//! `mpirun -n N mpi_selftest timeout`  rank 0 waits for a message that never comes and must get a
//!                                     timeout error (set `FERRY_GENERAL_TIMEOUT_MS`).
//! `mpirun -n 2 mpi_selftest bench`    ping-pong latency (8 B) and bandwidth (1 MiB) figures.

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
    println!("ok length-mismatch");

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
