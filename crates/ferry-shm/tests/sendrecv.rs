//! The lean `sendrecv` of the shm backend (one-peer collective steps): it may only skip the
//! exchange when the send fits into the ring at once, so two ranks sending to each other must
//! never deadlock, whatever the message size or ring fill (T1, M3).

use ferry_core::config::{Pipeline, SingleCopy};
use ferry_core::{Config, ErrorKind, MsgKey, RecvBuf, Transport};
use ferry_shm::ShmTransport;

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
    // A tiny ring, so that inline sends find it full and big ones fragment.
    c.shm.ring_slots = 4;
    c.shm.slot_bytes = 256;
    c.shm.single_copy_threshold = 4096;
    c.general.operation_timeout_ms = 20_000;
    c
}

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 13 + seed * 5) as u8).collect()
}

fn symmetric_steps(cfg: &Config) {
    let sizes = [0usize, 1, 8, 100, 200, 216, 300, 1000, 5000, 70_000];
    ShmTransport::run_threads(2, cfg, |mut t| {
        let me = t.rank();
        let peer = 1 - me;
        let mut got = Vec::new();
        for round in 0..3 {
            for (i, &n) in sizes.iter().enumerate() {
                // Unrelated traffic first, so the peer's ring is partly or wholly occupied
                // when the step's send tries the lean path.
                for k in 0..3 {
                    t.send(peer, MsgKey::user(9), &pattern(8, k)).unwrap();
                }
                let mine = pattern(n, 2 * i + me + round);
                let theirs = pattern(n, 2 * i + peer + round);
                t.sendrecv(
                    peer,
                    MsgKey::user(1),
                    &mine,
                    peer,
                    MsgKey::user(1),
                    RecvBuf::Vec(&mut got),
                )
                .unwrap();
                assert_eq!(got, theirs, "size {n}, round {round}, vec");
                let mut fixed = vec![0u8; n];
                t.sendrecv(
                    peer,
                    MsgKey::user(2),
                    &mine,
                    peer,
                    MsgKey::user(2),
                    RecvBuf::Slice(&mut fixed),
                )
                .unwrap();
                assert_eq!(fixed, theirs, "size {n}, round {round}, slice");
                for k in 0..3 {
                    t.recv(peer, MsgKey::user(9), &mut got).unwrap();
                    assert_eq!(got, pattern(8, k));
                }
            }
        }
        t.finish().unwrap();
    })
    .unwrap();
}

#[test]
fn symmetric_steps_complete_with_single_copy() {
    symmetric_steps(&config(SingleCopy::Auto));
}

#[test]
fn symmetric_steps_complete_without_single_copy() {
    symmetric_steps(&config(SingleCopy::Off));
}

#[test]
fn shifted_ring_of_three_completes() {
    // Send to the next rank, receive from the previous one: the ring-allgather step.
    ShmTransport::run_threads(3, &config(SingleCopy::Off), |mut t| {
        let me = t.rank();
        let (next, prev) = ((me + 1) % 3, (me + 2) % 3);
        let mut got = Vec::new();
        for n in [4usize, 250, 3000] {
            t.sendrecv(
                next,
                MsgKey::user(3),
                &pattern(n, me),
                prev,
                MsgKey::user(3),
                RecvBuf::Vec(&mut got),
            )
            .unwrap();
            assert_eq!(got, pattern(n, prev));
        }
        t.finish().unwrap();
    })
    .unwrap();
}

#[test]
fn wrong_length_is_an_error_naming_the_peer() {
    let out = ShmTransport::run_threads(2, &config(SingleCopy::Off), |mut t| {
        let peer = 1 - t.rank();
        // Rank 0 expects 4 bytes, rank 1 sends 8.
        let data = vec![7u8; if t.rank() == 1 { 8 } else { 4 }];
        let mut fixed = [0u8; 4];
        let r = t.sendrecv(
            peer,
            MsgKey::user(4),
            &data,
            peer,
            MsgKey::user(4),
            RecvBuf::Slice(&mut fixed),
        );
        (t.rank(), r.map_err(|e| (e.kind(), e.peer())))
    })
    .unwrap();
    assert_eq!(out[0].1, Err((ErrorKind::InvalidArgument, Some(1))));
    assert_eq!(out[1].1, Ok(()));
}
