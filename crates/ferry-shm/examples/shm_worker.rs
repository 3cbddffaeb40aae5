//! A small multi-process worker for the shm backend's tests and measurements. Start N copies
//! with launcher variables (`FERRY_JOB_ID`, `FERRY_RANK`, `FERRY_SIZE`) or by hand
//! (`FERRY_SIZE`, `FERRY_SHM_JOB`).
//!
//! Modes:
//! - `allreduce ITERS BYTES`: sums a vector over all ranks with a ring of exchanges, ITERS
//!   times, checks every element, prints `rank R of N ok TAG`;
//! - `alltoall SECONDS BYTES`: exchanges with every peer until an error or SECONDS pass;
//!   prints `running` after the first round (tests kill a rank meanwhile);
//! - `abandon BYTES`: the use-after-failure check. Rank 0 sends BYTES (a single-copy size) to
//!   rank 1 in an exchange that also waits for rank 2, which exits at once (or, with
//!   `FERRY_GENERAL_OPERATION_TIMEOUT_MS` set, sleeps past it); once the exchange has failed
//!   rank 0 overwrites its buffer and lingers. Rank 1 receives only after that: it prints
//!   `original` (exit 0), or `STALE` (exit 4) if it got the overwritten bytes, or fails;
//! - `pingpong [MAX_BYTES]`: ranks 0 and 1 measure latency (half round trip) and streaming
//!   bandwidth (window of 64 messages per exchange) for sizes 1 B .. MAX_BYTES (default 4 MiB).
//!
//! - `heap BYTES ITERS`: rank 0 sends ITERS messages of BYTES to rank 1, each with new
//!   contents, every third from a newly allocated buffer (a new shared-heap region, often at
//!   the address and descriptor number of the one just freed); rank 1 checks every byte and
//!   prints `heap ok COPIES` with the number of messages it copied from a mapping of rank 0's
//!   shared heap.
//!
//! - `split ROUNDS`: ranks 0 and 1 move messages of 64 KiB - 4 MiB (odd sizes too) with new
//!   contents each round: rank 0 to rank 1 with `send`, then both ways at once in one exchange
//!   each; every byte is checked, and each rank prints `split ok COPIES WRITES` with the
//!   number of messages it received by split single copy and of halves it wrote into its
//!   peer's buffer.
//!
//! With `SHM_WORKER_SHARED_HEAP=1`, large allocations come from [`ferry_shm::SharedHeap`].
//!
//! With `FERRY_TEST_SLEEP_RANK=R FERRY_TEST_SLEEP_MS=T`, rank R prints `sleeping pid P` and
//! sleeps T ms before it starts.
//!
//! Exits 0 on success, 3 after printing `error: ...` (and `error peer: P` when the error names
//! a peer) on stderr when ferry reports an error.

use std::io::Write;
use std::time::{Duration, Instant};

use ferry_core::{Config, Exchange, LaunchInfo, MsgKey, Transport};
use ferry_shm::{SharedHeap, ShmTransport};

#[global_allocator]
static HEAP: SharedHeap = SharedHeap::inactive();

fn main() {
    if std::env::var_os("SHM_WORKER_SHARED_HEAP").is_some_and(|v| v == "1") {
        HEAP.set_active(true);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match run(&args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            if let Some(p) = e.peer() {
                eprintln!("error peer: {p}");
            }
            3
        }
    };
    std::process::exit(code);
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> T {
    args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn run(args: &[String]) -> ferry_core::Result<()> {
    let config = Config::from_env()?;
    let launch = LaunchInfo::from_env()?;
    let mut s = ShmTransport::from_env(&config, &launch)?;
    if args.first().map(String::as_str) == Some("abandon") && s.rank() == 0 {
        println!("single copy {}", s.single_copy());
    }
    let t: &mut dyn Transport = &mut s;
    let sleeper: Option<usize> = std::env::var("FERRY_TEST_SLEEP_RANK")
        .ok()
        .and_then(|v| v.parse().ok());
    if sleeper == Some(t.rank()) {
        let ms: u64 = std::env::var("FERRY_TEST_SLEEP_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        println!("sleeping pid {}", std::process::id());
        let _ = std::io::stdout().flush();
        std::thread::sleep(Duration::from_millis(ms));
    }
    match args.first().map(String::as_str) {
        Some("allreduce") => allreduce(t, arg(args, 1, 100), arg(args, 2, 64)),
        Some("alltoall") => alltoall(t, arg(args, 1, 30), arg(args, 2, 64)),
        Some("pingpong") => pingpong(t, arg(args, 1, 4 << 20)),
        Some("abandon") => abandon(t, arg(args, 1, 1 << 20)),
        Some("heap") => heap(t, arg(args, 1, 1 << 20), arg(args, 2, 30)),
        Some("split") => split(t, arg(args, 1, 3)),
        other => Err(ferry_core::Error::invalid(
            "shm_worker",
            format!("unknown mode {other:?} (allreduce, alltoall, pingpong)"),
        )),
    }?;
    t.finish()
}

fn abandon(t: &mut dyn Transport, bytes: usize) -> ferry_core::Result<()> {
    const ORIGINAL: u8 = 0xa5;
    const REUSED: u8 = 0x5a;
    let key = MsgKey::user(7);
    match t.rank() {
        0 => {
            // Rank 2 is gone (or asleep past the operation timeout) by then.
            std::thread::sleep(Duration::from_millis(300));
            let mut buf = vec![ORIGINAL; bytes];
            let mut sink = Vec::new();
            let mut ex = Exchange::new();
            ex.send(1, key, &buf);
            ex.recv(2, key, &mut sink);
            let r = t.exchange(&mut ex);
            drop(ex);
            match r {
                Ok(()) => println!("exchange unexpectedly succeeded"),
                Err(e) => println!("exchange failed: {e}"),
            }
            // The caller owns its buffer again: reuse it, as a program would.
            buf.fill(REUSED);
            println!("overwritten");
            let _ = std::io::stdout().flush();
            std::thread::sleep(Duration::from_millis(2500));
            std::hint::black_box(&buf);
            std::process::exit(0);
        }
        1 => {
            std::thread::sleep(Duration::from_millis(1200));
            let mut got = Vec::new();
            t.recv(0, key, &mut got)?;
            if got.contains(&REUSED) {
                println!("STALE");
                let _ = std::io::stdout().flush();
                std::process::exit(4);
            }
            if got.len() != bytes || got.iter().any(|&b| b != ORIGINAL) {
                println!("WRONG");
                let _ = std::io::stdout().flush();
                std::process::exit(5);
            }
            println!("original");
            Ok(())
        }
        2 => {
            if std::env::var_os("FERRY_GENERAL_OPERATION_TIMEOUT_MS").is_some() {
                std::thread::sleep(Duration::from_millis(3000));
            }
            // Ends without finishing, like a crash.
            std::process::exit(0);
        }
        _ => Ok(()),
    }
}

fn split(t: &mut dyn Transport, rounds: usize) -> ferry_core::Result<()> {
    let me = t.rank();
    if me > 1 {
        return Ok(());
    }
    let other = 1 - me;
    let fill = |from: usize, round: usize, len: usize| -> Vec<u8> {
        (0..len)
            .map(|j| (from * 101 + round * 7 + j % 251) as u8)
            .collect()
    };
    let wrong = |what: String| {
        ferry_core::Error::new(ferry_core::ErrorKind::Protocol, "split")
            .on_rank(me)
            .with_detail(what)
    };
    let sizes = [64 << 10, (64 << 10) + 1, 1 << 20, (1 << 20) + 4095, 4 << 20];
    for round in 0..rounds {
        for (k, &len) in sizes.iter().enumerate() {
            let r = round * sizes.len() + k;
            if me == 0 {
                t.send(1, MsgKey::user(11), &fill(0, r, len))?;
            } else {
                let mut got = Vec::new();
                t.recv(0, MsgKey::user(11), &mut got)?;
                if got != fill(0, r, len) {
                    return Err(wrong(format!("send of {len} B, round {r}: wrong bytes")));
                }
            }
            // Both directions at once: each rank serves the other's offer while it waits for
            // its own copy.
            let out = fill(me, r, len);
            let mut got = vec![0u8; len];
            let mut ex = Exchange::new();
            ex.send(other, MsgKey::user(12), &out);
            ex.recv_into(other, MsgKey::user(12), &mut got);
            t.exchange(&mut ex)?;
            drop(ex);
            if got != fill(other, r, len) {
                return Err(wrong(format!(
                    "exchange of {len} B, round {r}: wrong bytes"
                )));
            }
        }
    }
    let stat = |name: &str| {
        t.stats()
            .extra
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    };
    println!(
        "split ok {} {}",
        stat("shm split copies"),
        stat("shm split writes")
    );
    Ok(())
}

fn heap(t: &mut dyn Transport, bytes: usize, iters: usize) -> ferry_core::Result<()> {
    let key = MsgKey::user(9);
    let fill = |i: usize, buf: &mut [u8]| {
        for (j, b) in buf.iter_mut().enumerate() {
            *b = (i * 31 + j % 253) as u8;
        }
    };
    match t.rank() {
        0 => {
            let mut buf = vec![0u8; bytes];
            for i in 0..iters {
                if i % 3 == 2 {
                    // Free first, so the new region tends to reuse the old one's address and
                    // descriptor number: only its generation tells them apart.
                    drop(buf);
                    buf = vec![0u8; bytes];
                }
                fill(i, &mut buf);
                t.send(1, key, &buf)?;
            }
            Ok(())
        }
        1 => {
            let mut got = Vec::new();
            let mut want = vec![0u8; bytes];
            for i in 0..iters {
                t.recv(0, key, &mut got)?;
                fill(i, &mut want);
                if got != want {
                    return Err(
                        ferry_core::Error::new(ferry_core::ErrorKind::Protocol, "heap")
                            .on_rank(1)
                            .with_peer(0)
                            .with_detail(format!("message {i} has wrong bytes")),
                    );
                }
            }
            let copies = t
                .stats()
                .extra
                .iter()
                .find(|(n, _)| *n == "shm shared-heap copies")
                .map_or(0, |(_, v)| *v);
            println!("heap ok {copies}");
            Ok(())
        }
        _ => Ok(()),
    }
}

fn to_bytes(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_bytes(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            u64::from_le_bytes(a)
        })
        .collect()
}

fn allreduce(t: &mut dyn Transport, iters: usize, bytes: usize) -> ferry_core::Result<()> {
    let (r, n) = (t.rank(), t.size());
    let elems = (bytes / 8).max(1);
    let right = (r + 1) % n;
    let left = (r + n - 1) % n;
    let tag = std::env::var("FERRY_SHM_JOB").unwrap_or_default();
    for it in 0..iters {
        let mine = vec![(r as u64 + 1) * (it as u64 + 1); elems];
        let mut acc = mine.clone();
        let mut pass = to_bytes(&mine);
        for _ in 1..n {
            let mut got = Vec::new();
            let mut ex = Exchange::new();
            ex.send(right, MsgKey::user(it as u32), &pass);
            ex.recv(left, MsgKey::user(it as u32), &mut got);
            t.exchange(&mut ex)?;
            drop(ex);
            for (a, b) in acc.iter_mut().zip(from_bytes(&got)) {
                *a += b;
            }
            pass = got;
        }
        let want = (n as u64 * (n as u64 + 1) / 2) * (it as u64 + 1);
        if acc.iter().any(|&a| a != want) {
            return Err(
                ferry_core::Error::new(ferry_core::ErrorKind::Protocol, "allreduce")
                    .on_rank(r)
                    .with_detail(format!("iteration {it}: got {} want {want}", acc[0])),
            );
        }
    }
    println!("rank {r} of {n} ok {tag}");
    Ok(())
}

fn alltoall(t: &mut dyn Transport, seconds: u64, bytes: usize) -> ferry_core::Result<()> {
    let (r, n) = (t.rank(), t.size());
    let start = Instant::now();
    let data = vec![r as u8; bytes];
    let mut round: u32 = 0;
    while start.elapsed() < Duration::from_secs(seconds) {
        let mut bufs = vec![Vec::new(); n];
        let mut ex = Exchange::new();
        for (p, b) in bufs.iter_mut().enumerate() {
            if p != r {
                ex.send(p, MsgKey::user(round), &data);
                ex.recv(p, MsgKey::user(round), b);
            }
        }
        t.exchange(&mut ex)?;
        drop(ex);
        if round == 0 {
            println!("running");
            let _ = std::io::stdout().flush();
        }
        round = round.wrapping_add(1);
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

fn pingpong(t: &mut dyn Transport, max: usize) -> ferry_core::Result<()> {
    if t.size() < 2 || t.rank() > 1 {
        return Ok(());
    }
    let me = t.rank();
    let peer = 1 - me;
    let key = MsgKey::user(1);
    if me == 0 {
        println!("# size  latency_us  bandwidth_MBps");
    }
    let mut size = 1usize;
    let mut buf = Vec::new();
    while size <= max {
        let data = vec![7u8; size];
        let iters = if size <= 8192 {
            20_000
        } else {
            (200 << 20) / size
        }
        .clamp(50, 20_000);
        let warm = iters / 10;
        let mut lat = f64::MAX;
        for _rep in 0..3 {
            let mut t0 = Instant::now();
            for i in 0..iters + warm {
                if i == warm {
                    t0 = Instant::now();
                }
                if me == 0 {
                    t.send(peer, key, &data)?;
                    t.recv(peer, key, &mut buf)?;
                } else {
                    t.recv(peer, key, &mut buf)?;
                    t.send(peer, key, &data)?;
                }
            }
            let us = t0.elapsed().as_secs_f64() * 1e6 / iters as f64 / 2.0;
            lat = lat.min(us);
        }
        // Streaming: a window of 64 messages in one exchange, then a 1-byte reply.
        let window = 64;
        let rounds = (iters / window).clamp(5, 200);
        let mut best_bw: f64 = 0.0;
        let mut sinks: Vec<Vec<u8>> = vec![Vec::new(); window];
        for _rep in 0..3 {
            let t0 = Instant::now();
            for _ in 0..rounds {
                let mut ex = Exchange::new();
                if me == 0 {
                    for _ in 0..window {
                        ex.send(peer, key, &data);
                    }
                    t.exchange(&mut ex)?;
                    drop(ex);
                    t.recv(peer, MsgKey::user(2), &mut buf)?;
                } else {
                    for s in sinks.iter_mut() {
                        ex.recv(peer, key, s);
                    }
                    t.exchange(&mut ex)?;
                    drop(ex);
                    t.send(peer, MsgKey::user(2), &[1])?;
                }
            }
            let secs = t0.elapsed().as_secs_f64();
            best_bw = best_bw.max((rounds * window * size) as f64 / secs / 1e6);
        }
        if me == 0 {
            println!("{size:>8}  {lat:>10.3}  {best_bw:>12.1}");
        }
        size *= 4;
    }
    Ok(())
}
