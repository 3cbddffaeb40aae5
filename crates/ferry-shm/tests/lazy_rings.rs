//! Rings opened on first use (X5), ranks as threads: a rank that waits for one peer still
//! takes in what a peer it never received from sends (found through its sender map, also
//! while it sleeps), every message path works over a ring opened late, and ranks that never
//! talk open no ring to each other.

use std::time::Duration;

use ferry_core::{Config, MsgKey, Transport};
use ferry_shm::ShmTransport;

fn config() -> Config {
    let mut c = Config::default();
    c.shm.ring_slots = 8;
    c.shm.slot_bytes = 1024;
    c.shm.single_copy_threshold = 4096;
    c.general.operation_timeout_ms = 5_000;
    c
}

#[test]
fn a_first_time_sender_is_found_while_the_receiver_waits_for_another_peer() {
    let peers = ShmTransport::run_threads(4, &config(), |mut t| {
        let key = MsgKey::user(5);
        match t.rank() {
            // Rank 1 waits for rank 2 first; rank 0's messages (inline, fragmented and
            // single copy) arrive meanwhile on a ring rank 1 has never looked at, and rank 2
            // sends only once they are all taken in: without the sender map this deadlocks
            // (the single-copy send would wait for a receiver that waits for rank 2).
            0 => {
                for len in [10usize, 3000, 100_000] {
                    t.send(1, key, &vec![len as u8; len]).unwrap();
                }
                t.send(2, key, b"done").unwrap();
            }
            1 => {
                let mut b = Vec::new();
                t.recv(2, key, &mut b).unwrap();
                assert_eq!(b, b"late");
                for len in [10usize, 3000, 100_000] {
                    t.recv(0, key, &mut b).unwrap();
                    assert_eq!(b, vec![len as u8; len], "{len} bytes from rank 0");
                }
            }
            2 => {
                let mut b = Vec::new();
                t.recv(0, key, &mut b).unwrap();
                // Long enough for rank 1 to fall asleep on its doorbell.
                std::thread::sleep(Duration::from_millis(200));
                t.send(1, key, b"late").unwrap();
            }
            _ => {}
        }
        t.finish().unwrap();
        (t.rank(), t.peers_with_rings(), t.stats().to_string())
    })
    .unwrap();
    for (rank, n, stats) in peers {
        let want = match rank {
            0..=2 => 2,
            _ => 0,
        };
        assert_eq!(n, want, "rank {rank} opened rings to {n} peers");
        if want > 0 {
            assert!(
                stats.contains(&format!("shm peers with rings: {want}")),
                "rank {rank}: {stats}"
            );
        }
    }
}
