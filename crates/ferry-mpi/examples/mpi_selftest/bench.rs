//! `bench`, `selfbench` and `threads`: figures and the MPI thread level.

use std::time::Instant;

use ferry_core::{ErrorKind, Exchange, MsgKey, Transport};
use ferry_mpi::MpiTransport;

/// The software cost of one message without any waiting: `send` to self then `recv` from self,
/// 8 B, best of 7 trials of 200,000 (or `selfbench ITERS`) (compare with the same loop of MPI_Send + MPI_Recv to
/// self). Being one process, it needs no second core and is little disturbed by a loaded
/// machine.
pub(crate) fn selfbench(t: &mut MpiTransport, iters: u32) -> Result<(), String> {
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

pub(crate) fn bench(t: &mut MpiTransport) -> Result<(), String> {
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
pub(crate) fn threads(t: &mut MpiTransport) -> Result<(), String> {
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
