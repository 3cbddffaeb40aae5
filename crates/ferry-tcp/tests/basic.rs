//! Point-to-point basics over real sockets: ping-pong, all-to-all, large messages, out-of-order
//! flows, self-sends (M1-M3, T4).

mod common;

use ferry_core::{Exchange, MsgKey, MsgKind, Transport};

#[test]
fn ping_pong_small_and_large() {
    let out = common::run(2, common::config(), |mut t| {
        let me = t.rank();
        let other = 1 - me;
        for &len in &[0usize, 1, 8, 1000, 64 << 10, (64 << 10) + 1, 3 << 20] {
            let msg: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let mut got = Vec::new();
            for _ in 0..3 {
                if me == 0 {
                    t.send(other, MsgKey::user(1), &msg).unwrap();
                    t.recv(other, MsgKey::user(1), &mut got).unwrap();
                } else {
                    t.recv(other, MsgKey::user(1), &mut got).unwrap();
                    t.send(other, MsgKey::user(1), &got).unwrap();
                }
                assert_eq!(got, msg, "len {len}");
            }
        }
        t.finish().unwrap();
        t.stats()
    });
    assert_eq!(out[0].total_sent().messages, 21);
    assert_eq!(out[1].total_received().messages, 21);
}

#[test]
fn all_to_all_exchange_with_self() {
    let n = 5;
    common::run(n, common::config(), |mut t| {
        let me = t.rank();
        let data: Vec<Vec<u8>> = (0..n).map(|p| vec![(me * 10 + p) as u8; 100 + p]).collect();
        let mut got: Vec<Vec<u8>> = vec![Vec::new(); n];
        let mut ex = Exchange::new();
        for (p, d) in data.iter().enumerate() {
            ex.send(p, MsgKey::new(3, MsgKind::DATA, 9), d);
        }
        for (p, g) in got.iter_mut().enumerate() {
            ex.recv(p, MsgKey::new(3, MsgKind::DATA, 9), g);
        }
        t.exchange(&mut ex).unwrap();
        drop(ex);
        for (p, g) in got.iter().enumerate() {
            assert_eq!(g, &vec![(p * 10 + me) as u8; 100 + me]);
        }
        t.finish().unwrap();
    });
}

#[test]
fn out_of_order_flows_match_by_serial_and_tag() {
    // Rank 0 sends tags 1,2,3 (two messages each, some large); rank 1 receives them in the
    // opposite tag order, in separate calls: every message lands in the right receive.
    common::run(2, common::config(), |mut t| {
        let sizes = [10usize, 200 << 10];
        if t.rank() == 0 {
            for tag in 1..=3u32 {
                for (i, &s) in sizes.iter().enumerate() {
                    t.send(1, MsgKey::user(tag), &vec![(tag * 10 + i as u32) as u8; s])
                        .unwrap();
                }
            }
        } else {
            for tag in (1..=3u32).rev() {
                for (i, &s) in sizes.iter().enumerate() {
                    let mut got = Vec::new();
                    t.recv(0, MsgKey::user(tag), &mut got).unwrap();
                    assert_eq!(got, vec![(tag * 10 + i as u32) as u8; s]);
                }
            }
        }
        t.finish().unwrap();
    });
}

#[test]
fn fixed_size_receive_of_wrong_length_is_an_error() {
    common::run(2, common::config(), |mut t| {
        if t.rank() == 0 {
            t.send(1, MsgKey::user(0), &[1, 2, 3]).unwrap();
        } else {
            let mut buf = [0u8; 5];
            let mut ex = Exchange::new();
            ex.recv_into(0, MsgKey::user(0), &mut buf);
            let e = t.exchange(&mut ex).unwrap_err();
            assert!(e.to_string().contains("3 bytes"), "{e}");
            assert_eq!(e.rank(), Some(1));
        }
        t.finish().unwrap();
    });
}

#[test]
fn large_blocking_sends_in_both_directions_do_not_deadlock() {
    // Both ranks send a large (rendezvous) message before receiving: the announced message
    // waits for the peer's GET only briefly, then is copied into the outbox so the blocking
    // send returns (buffered semantics, T1), instead of the classic rendezvous deadlock.
    common::run(2, common::config(), |mut t| {
        let other = 1 - t.rank();
        let msg = vec![t.rank() as u8 + 1; 2 << 20];
        for _ in 0..3 {
            t.send(other, MsgKey::user(2), &msg).unwrap();
            let mut got = vec![0u8; 2 << 20];
            let mut ex = Exchange::new();
            ex.recv_into(other, MsgKey::user(2), &mut got);
            t.exchange(&mut ex).unwrap();
            drop(ex);
            assert!(got.iter().all(|&b| b == other as u8 + 1));
        }
        t.finish().unwrap();
    });
}

#[test]
fn large_blocking_sends_around_a_ring_do_not_deadlock() {
    // Every rank sends a large message to the next before receiving from the previous: a
    // cycle of blocked senders in which each rank holds an announced message it cannot match
    // yet, so each copies its own after the short grace period.
    let start = std::time::Instant::now();
    common::run(3, common::config(), |mut t| {
        let (me, n) = (t.rank(), t.size());
        let msg = vec![me as u8 + 1; 1 << 20];
        for _ in 0..3 {
            t.send((me + 1) % n, MsgKey::user(2), &msg).unwrap();
            let prev = (me + n - 1) % n;
            let mut got = Vec::new();
            t.recv(prev, MsgKey::user(2), &mut got).unwrap();
            assert!(got.len() == 1 << 20 && got.iter().all(|&b| b == prev as u8 + 1));
        }
        t.finish().unwrap();
    });
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
}

#[test]
fn large_send_to_a_late_receiver_completes() {
    // The receiver posts its receive long after the announcement and nothing waits to be
    // pulled from the sender: the sender keeps the message borrowed through the longer grace
    // period, then copies it, and the receiver still gets it (from the outbox).
    common::run(2, common::config(), |mut t| {
        let msg = vec![7u8; 1 << 20];
        if t.rank() == 0 {
            t.send(1, MsgKey::user(5), &msg).unwrap();
            t.send(1, MsgKey::user(5), &msg).unwrap();
        } else {
            std::thread::sleep(std::time::Duration::from_millis(100));
            for _ in 0..2 {
                let mut got = Vec::new();
                t.recv(0, MsgKey::user(5), &mut got).unwrap();
                assert_eq!(got, msg);
            }
        }
        t.finish().unwrap();
    });
}

#[test]
fn thousands_of_tiny_messages_in_one_exchange() {
    // More frames arrive at once than one pass parses per socket: the rest must be parsed
    // from the buffer without waiting for new input.
    let n_msgs = 3000;
    common::run(2, common::config(), |mut t| {
        let me = t.rank();
        let other = 1 - me;
        let data: Vec<[u8; 4]> = (0..n_msgs as u32).map(|i| i.to_le_bytes()).collect();
        let mut got: Vec<Vec<u8>> = vec![Vec::new(); n_msgs];
        let mut ex = Exchange::new();
        for d in &data {
            ex.send(other, MsgKey::user(4), d);
        }
        for g in got.iter_mut() {
            ex.recv(other, MsgKey::user(4), g);
        }
        t.exchange(&mut ex).unwrap();
        drop(ex);
        for (i, g) in got.iter().enumerate() {
            assert_eq!(g[..], (i as u32).to_le_bytes());
        }
        t.finish().unwrap();
    });
}

#[test]
fn pending_operations_carried_into_a_rebuilt_exchange_complete() {
    // A layer above (fault tolerance) rebuilds its exchange each round and carries pending
    // operations over, with their state, at other positions: they must still complete, with
    // their payloads in the right buffers.
    let large: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    common::run(2, common::config(), |mut t| {
        let me = t.rank();
        let other = 1 - me;
        if me == 0 {
            // Rank 1 posts first and rebuilds before these arrive.
            std::thread::sleep(std::time::Duration::from_millis(200));
            t.send(other, MsgKey::user(8), b"small").unwrap();
            t.send(other, MsgKey::user(9), &large).unwrap();
        } else {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let mut states = {
                let mut ex = Exchange::new();
                ex.recv(other, MsgKey::user(8), &mut a);
                ex.recv(other, MsgKey::user(9), &mut b);
                assert!(!t.progress_exchange(&mut ex).unwrap());
                [ex.recvs[0].state, ex.recvs[1].state]
            };
            // Rebuilt in the other order.
            let mut ex = Exchange::new();
            ex.recv(other, MsgKey::user(9), &mut b);
            ex.recv(other, MsgKey::user(8), &mut a);
            ex.recvs[0].state = states[1];
            ex.recvs[1].state = states[0];
            t.exchange(&mut ex).unwrap();
            states = [ex.recvs[1].state, ex.recvs[0].state];
            drop(ex);
            assert!(states.iter().all(|s| *s == ferry_core::OpState::Done));
            assert_eq!(a, b"small");
            assert!(b == large, "large message corrupted");
        }
        t.finish().unwrap();
    });
}
