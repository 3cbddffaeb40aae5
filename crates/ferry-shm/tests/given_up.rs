//! Receives given up by an abandoned operation (`Transport::abandon_exchange`, what the
//! fault-tolerance layer does after a revoke or a failure elsewhere) while their message is
//! on its way from a live sender.
//!
//! The receive has spent its flow serial, so its message can never match a later receive;
//! what is still to come of it must be dropped deterministically and the next message between
//! the same two ranks must arrive intact. Before, the remaining fragments of a message that
//! was streaming in met the next exchange and failed it ("fragmented message lost its
//! receive", then "fragment of another message interleaved"), and a message that arrived after
//! its receive was given up sat in the early-arrival buffer for good.

use std::sync::Barrier;

use ferry_core::config::{Pipeline, SingleCopy};
use ferry_core::{Config, Error, ErrorKind, Exchange, MsgKey, Transport};
use ferry_shm::ShmTransport;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

fn config(single_copy: SingleCopy) -> Config {
    let mut c = Config::default();
    c.shm.single_copy = single_copy;
    // Single copy where it is on, deterministically (not only when the host's cores are
    // oversubscribed); without it, large messages stream pipelined through the ring.
    c.shm.pipeline = if single_copy == SingleCopy::Off {
        Pipeline::On
    } else {
        Pipeline::Off
    };
    // 4 slots of 1 KiB: a large message streams in hundreds of fragments.
    c.shm.ring_slots = 4;
    c.shm.slot_bytes = 1024;
    c.shm.single_copy_threshold = 4096;
    // Early arrivals are capped below the given-up message: kept instead of dropped, it would
    // block the ring (and the next message behind it) for good.
    c.shm.inbox_bytes = 16 << 10;
    // Only a guard against hanging the suite: everything here finishes in milliseconds.
    c.general.operation_timeout_ms = 5_000;
    c
}

fn revoked() -> Error {
    Error::new(ErrorKind::Revoked, "test").with_detail("the test abandons the receive")
}

fn check(out: Vec<Result<(), String>>) {
    for (r, o) in out.into_iter().enumerate() {
        o.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
}

/// Rank 0 takes part of a 1 MiB fragmented message, gives the receive up, then receives the
/// next message of the same sender.
#[test]
fn receive_given_up_while_fragments_stream_in() {
    let a = pattern(1 << 20, 1);
    let b = pattern(64 << 10, 2);
    let ring_full = Barrier::new(2);
    let out = ShmTransport::run_threads(2, &config(SingleCopy::Off), |mut t| {
        match t.rank() {
            0 => {
                let mut first = Vec::new();
                let mut ex = Exchange::new();
                ex.recv(1, MsgKey::user(1), &mut first);
                ring_full.wait();
                // The ring holds the message's first fragments; a pass takes at most 256
                // entries, a quarter of the message.
                let done = t
                    .progress_exchange(&mut ex)
                    .map_err(|e| format!("first pass: {e}"))?;
                if done {
                    return Err("the 1 MiB message arrived in one pass".into());
                }
                t.abandon_exchange(&mut ex, &revoked());
                drop(ex);
                let mut got = Vec::new();
                t.recv(1, MsgKey::user(2), &mut got)
                    .map_err(|e| format!("next message: {e}"))?;
                if got != b {
                    return Err("next message: wrong bytes".into());
                }
            }
            _ => {
                let mut ex = Exchange::new();
                ex.send(0, MsgKey::user(1), &a);
                // Fills the ring with the first fragments before rank 0 looks.
                t.progress_exchange(&mut ex)
                    .map_err(|e| format!("first fragments: {e}"))?;
                ring_full.wait();
                t.exchange(&mut ex)
                    .map_err(|e| format!("given-up message: {e}"))?;
                drop(ex);
                t.send(0, MsgKey::user(2), &b)
                    .map_err(|e| format!("next message: {e}"))?;
            }
        }
        t.finish().map_err(|e| e.to_string())
    })
    .expect("threads");
    check(out);
}

/// Rank 0 gives a receive up before any of its message came; the message (fragments, or a
/// single-copy descriptor) arrives afterwards and must not stay in the way of the next one.
fn given_up_before_arrival(single_copy: SingleCopy) {
    let a = pattern(256 << 10, 3);
    let b = pattern(8 << 10, 4);
    let started = Barrier::new(2);
    let out = ShmTransport::run_threads(2, &config(single_copy), |mut t| {
        match t.rank() {
            0 => {
                let mut first = Vec::new();
                let mut ex = Exchange::new();
                ex.recv(1, MsgKey::user(1), &mut first);
                let done = t
                    .progress_exchange(&mut ex)
                    .map_err(|e| format!("first pass: {e}"))?;
                if done {
                    return Err("the message came before it was sent".into());
                }
                t.abandon_exchange(&mut ex, &revoked());
                drop(ex);
                started.wait();
                let mut got = Vec::new();
                t.recv(1, MsgKey::user(2), &mut got)
                    .map_err(|e| format!("next message: {e}"))?;
                if got != b {
                    return Err("next message: wrong bytes".into());
                }
            }
            _ => {
                started.wait();
                t.send(0, MsgKey::user(1), &a)
                    .map_err(|e| format!("given-up message: {e}"))?;
                t.send(0, MsgKey::user(2), &b)
                    .map_err(|e| format!("next message: {e}"))?;
            }
        }
        t.finish().map_err(|e| e.to_string())
    })
    .expect("threads");
    check(out);
}

#[test]
fn fragments_of_a_receive_given_up_earlier_are_dropped() {
    given_up_before_arrival(SingleCopy::Off);
}

/// The descriptor is completed unread: the sender gets its buffer back at once instead of
/// withdrawing it for fragments nobody takes.
#[test]
fn descriptor_of_a_receive_given_up_earlier_is_dropped() {
    given_up_before_arrival(SingleCopy::Auto);
}

/// In a job that survives failures (a fault-tolerant communicator: `tolerate_failures`), a
/// live sender that abandons a message interrupts its receive as revoked; it is not named as
/// failed (the fault-tolerance layer would exclude a live rank).
#[test]
fn message_abandoned_by_a_live_sender_is_revoked_not_a_failure() {
    let a = pattern(64 << 10, 5);
    let b = pattern(64 << 10, 6);
    let out = ShmTransport::run_threads(3, &config(SingleCopy::Off), |mut t| {
        t.tolerate_failures();
        match t.rank() {
            0 => {
                // Rank 2 finishes without sending: the exchange fails with part of `a` sent.
                let mut sink = Vec::new();
                let mut ex = Exchange::new();
                ex.send(1, MsgKey::user(1), &a);
                ex.recv(2, MsgKey::user(9), &mut sink);
                let e = t
                    .exchange(&mut ex)
                    .expect_err("rank 2 finished without sending");
                if e.peer() != Some(2) {
                    return Err(format!("the failed exchange names {e}"));
                }
                drop(ex);
                // The abort entry goes out before this message's fragments.
                t.send(1, MsgKey::user(2), &b)
                    .map_err(|e| format!("next message: {e}"))?;
            }
            1 => {
                std::thread::sleep(std::time::Duration::from_millis(300));
                let mut got = Vec::new();
                match t.recv(0, MsgKey::user(1), &mut got) {
                    // The error names the message, so a fault-tolerant caller fails only its
                    // receive.
                    Err(e)
                        if e.kind() == ErrorKind::Revoked
                            && e.peer() == Some(0)
                            && e.key() == Some(MsgKey::user(1)) => {}
                    Err(e) => return Err(format!("abandoned message: {e}")),
                    Ok(()) => return Err("abandoned message arrived whole".into()),
                }
                t.recv(0, MsgKey::user(2), &mut got)
                    .map_err(|e| format!("next message: {e}"))?;
                if got != b {
                    return Err("next message: wrong bytes".into());
                }
            }
            _ => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
        t.finish().map_err(|e| e.to_string())
    })
    .expect("threads");
    check(out);
}
