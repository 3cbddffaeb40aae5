//! Per-peer failure semantics (T5; the base of fault tolerance): when a peer dies, the
//! operations that involve it fail with an error naming it, new operations with it fail at
//! once, and the survivors go on exchanging with each other for as long as they like: a
//! survivor never ends its transport because another peer died.

mod common;

use std::time::{Duration, Instant};

use ferry_core::{ErrorKind, Exchange, MsgKey, Transport};

/// Checks that `e` is the failure of rank `dead`, reported by `me`.
fn names_dead_peer(e: &ferry_core::Error, me: usize, dead: usize) {
    assert_eq!(e.kind(), ErrorKind::PeerFailed, "rank {me}: {e}");
    assert_eq!(e.peer(), Some(dead), "rank {me}: {e}");
    assert_eq!(e.rank(), Some(me), "rank {me}: {e}");
}

#[test]
fn survivors_keep_exchanging_after_a_peer_dies() {
    let small = [7u8; 16];
    // Above the eager limit: announced and pulled straight from the sender's buffer.
    let large: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    common::run(3, common::config(), |mut t| {
        let me = t.rank();
        // Everybody talks to everybody once, so connections exist when rank 2 dies.
        let mut ex = Exchange::new();
        let mut got = vec![Vec::new(); 3];
        for p in (0..3).filter(|&p| p != me) {
            ex.send(p, MsgKey::user(1), &small);
        }
        for (p, g) in got.iter_mut().enumerate().filter(|(p, _)| *p != me) {
            ex.recv(p, MsgKey::user(1), g);
        }
        t.exchange(&mut ex).unwrap();
        drop(ex);
        if me == 2 {
            // Once 0 and 1 have its message (they only send this after receiving it), it dies:
            // its sockets close without a goodbye.
            let mut go = Vec::new();
            t.recv(0, MsgKey::user(1), &mut go).unwrap();
            t.recv(1, MsgKey::user(1), &mut go).unwrap();
            drop(t);
            return;
        }
        t.send(2, MsgKey::user(1), b"go").unwrap();
        // An operation with the dead rank fails, naming it.
        let mut buf = Vec::new();
        let e = t.recv(2, MsgKey::user(2), &mut buf).unwrap_err();
        names_dead_peer(&e, me, 2);
        // A new one fails at once.
        let start = Instant::now();
        let e = t.send(2, MsgKey::user(3), &large).unwrap_err();
        names_dead_peer(&e, me, 2);
        assert!(start.elapsed() < Duration::from_millis(500), "{e}");
        // An exchange with both a live and the dead peer fails because of the dead one; the
        // live peer still gets its message whole (the send's buffer is copied when the
        // exchange is abandoned, never read after it returned).
        let other = 1 - me;
        if me == 0 {
            let mut mixed = large.clone();
            let mut from_dead = Vec::new();
            let mut ex = Exchange::new();
            ex.send(other, MsgKey::user(4), &mixed);
            ex.recv(2, MsgKey::user(4), &mut from_dead);
            let e = t.exchange(&mut ex).unwrap_err();
            drop(ex);
            names_dead_peer(&e, me, 2);
            // The caller owns its buffer again: scribbling on it changes nothing sent.
            mixed.iter_mut().for_each(|b| *b = 0xee);
        } else {
            let mut got = Vec::new();
            t.recv(other, MsgKey::user(4), &mut got).unwrap();
            assert!(got == large, "rank 1 got a corrupted or foreign message");
        }
        // The survivors go on, small and large messages in both directions.
        for i in 0..300u32 {
            let msg: &[u8] = if i % 10 == 0 { &large } else { &small };
            let mut got = Vec::new();
            if me == 0 {
                t.send(other, MsgKey::user(5), msg).unwrap();
                t.recv(other, MsgKey::user(5), &mut got).unwrap();
            } else {
                t.recv(other, MsgKey::user(5), &mut got).unwrap();
                t.send(other, MsgKey::user(5), &got).unwrap();
            }
            assert_eq!(got, msg, "rank {me}, round {i}");
        }
        // Driven by hand (as a fault-tolerant layer does), an exchange's error fails only the
        // operation with the dead rank: the one with the live rank stays live and completes.
        if me == 0 {
            let (mut x, mut y) = (Vec::new(), Vec::new());
            let mut ex = Exchange::new();
            ex.recv(2, MsgKey::user(7), &mut x);
            ex.recv(other, MsgKey::user(7), &mut y);
            let e = t.progress_exchange(&mut ex).unwrap_err();
            names_dead_peer(&e, me, 2);
            let start = Instant::now();
            while ex.recvs[1].state != ferry_core::OpState::Done {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "live receive stalled"
                );
                if t.progress_exchange(&mut ex).is_err() {
                    continue;
                }
                t.wait_for_input(Duration::from_millis(1)).unwrap();
            }
            drop(ex);
            assert_eq!(y, b"still here");
        } else {
            t.send(other, MsgKey::user(7), b"still here").unwrap();
        }
        // Still failing at once for the dead rank, and still fine for the live one.
        names_dead_peer(&t.send(2, MsgKey::user(6), &small).unwrap_err(), me, 2);
        // The end reports, at most, that the dead rank never confirmed the "go".
        if let Err(e) = t.finish() {
            names_dead_peer(&e, me, 2);
        }
    });
}
