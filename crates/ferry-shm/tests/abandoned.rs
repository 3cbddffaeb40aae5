//! A fragmented send cut off by a failed exchange is closed with an abort entry: the receiver
//! of that message gets an error instead of waiting for the rest, and later large messages
//! between the same two ranks still flow (before, the sender's stream slot stayed taken by
//! the dead message and the next fragmented send to that peer waited forever).

use std::time::Duration;

use ferry_core::config::{Pipeline, SingleCopy};
use ferry_core::{Config, ErrorKind, Exchange, MsgKey, Transport};
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
    // 4 slots of 1 KiB: a 64 KiB message is far from fitting, so the failed exchange leaves
    // it partly sent.
    c.shm.ring_slots = 4;
    c.shm.slot_bytes = 1024;
    c.shm.single_copy_threshold = 4096;
    // Only a guard against hanging the suite: everything here finishes in milliseconds.
    c.general.operation_timeout_ms = 5_000;
    c
}

fn cut_off_then_continue(single_copy: SingleCopy) {
    let a = pattern(64 << 10, 1);
    let b = pattern(64 << 10, 2);
    let out = ShmTransport::run_threads(3, &config(single_copy), |mut t| -> Result<(), String> {
        match t.rank() {
            0 => {
                // Rank 2 finishes without sending: the exchange fails (rank 2), with part of
                // `a` in the ring to rank 1.
                let mut sink = Vec::new();
                let mut ex = Exchange::new();
                ex.send(1, MsgKey::user(1), &a);
                ex.recv(2, MsgKey::user(9), &mut sink);
                let e = t
                    .exchange(&mut ex)
                    .expect_err("rank 2 finished without sending");
                assert_eq!(e.peer(), Some(2), "{e}");
                drop(ex);
                t.send(1, MsgKey::user(2), &b)
                    .map_err(|e| format!("second send: {e}"))?;
            }
            1 => {
                std::thread::sleep(Duration::from_millis(300));
                let mut got = Vec::new();
                match t.recv(0, MsgKey::user(1), &mut got) {
                    Err(e) if e.kind() == ErrorKind::PeerFailed => {}
                    Err(e) => return Err(format!("abandoned message: unexpected error {e}")),
                    Ok(()) if got == a => {}
                    Ok(()) => return Err("abandoned message: wrong bytes".into()),
                }
                t.recv(0, MsgKey::user(2), &mut got)
                    .map_err(|e| format!("next message: {e}"))?;
                if got != b {
                    return Err("next message: wrong bytes".into());
                }
            }
            _ => {
                // Late enough that rank 0 has started streaming `a` (and, with single copy,
                // withdrawn its descriptor for fragments: rank 1 does not take it).
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        t.finish().map_err(|e| e.to_string())
    })
    .expect("threads");
    for (r, o) in out.into_iter().enumerate() {
        o.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
}

#[test]
fn cut_off_fragment_stream_does_not_block_the_next_message() {
    cut_off_then_continue(SingleCopy::Off);
}

/// With single copy on, the descriptor is withdrawn for fragments before the failure (rank 1
/// is late), so the same holds for the fragments of a withdrawn descriptor.
#[test]
fn cut_off_withdrawn_descriptor_does_not_block_the_next_message() {
    cut_off_then_continue(SingleCopy::Auto);
}

/// The ring to rank 1 is full when rank 0's exchange fails (rank 1 is not receiving yet), so
/// the abort entry that closes the cut-off stream cannot be pushed then. Rank 0 sends nothing
/// more to rank 1 and waits for it instead: its waiting pushes the abort once rank 1 makes
/// room, and rank 1's receive fails instead of waiting for the rest of the message (before,
/// the abort went out only ahead of rank 0's next fragmented message to rank 1: both waited).
#[test]
fn abort_of_a_stream_cut_off_in_a_full_ring_is_pushed_while_the_sender_waits() {
    let a = pattern(64 << 10, 1);
    let out =
        ShmTransport::run_threads(3, &config(SingleCopy::Off), |mut t| -> Result<(), String> {
            match t.rank() {
                0 => {
                    let mut sink = Vec::new();
                    let mut ex = Exchange::new();
                    ex.send(1, MsgKey::user(1), &a);
                    ex.recv(2, MsgKey::user(9), &mut sink);
                    let e = t
                        .exchange(&mut ex)
                        .expect_err("rank 2 finished without sending");
                    assert_eq!(e.peer(), Some(2), "{e}");
                    drop(ex);
                    let mut done = Vec::new();
                    t.recv(1, MsgKey::user(3), &mut done)
                        .map_err(|e| format!("waiting for rank 1: {e}"))?;
                    if done != b"failed" {
                        return Err(format!("rank 1 says {:?}", String::from_utf8_lossy(&done)));
                    }
                }
                1 => {
                    std::thread::sleep(Duration::from_millis(300));
                    let mut got = Vec::new();
                    let said: &[u8] = match t.recv(0, MsgKey::user(1), &mut got) {
                        Err(e) if e.kind() == ErrorKind::PeerFailed => b"failed",
                        Err(e) => return Err(format!("abandoned message: unexpected error {e}")),
                        Ok(()) => return Err("a cut-off message was received".into()),
                    };
                    t.send(0, MsgKey::user(3), said)
                        .map_err(|e| format!("answer: {e}"))?;
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
            t.finish().map_err(|e| e.to_string())
        })
        .expect("threads");
    for (r, o) in out.into_iter().enumerate() {
        o.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
}
