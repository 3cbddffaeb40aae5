//! Bounded resources (T1, T2): a tiny connection cache and a one-message inbox still finish
//! correctly, without deadlock or loss.

mod common;

use ferry_core::{Exchange, MsgKey, Transport};

#[test]
fn connection_cap_two_with_eight_ranks_all_to_all() {
    let n = 8;
    let mut cfg = common::config();
    cfg.tcp.connection_cap = 2;
    let stats = common::run(n, cfg, |mut t| {
        let me = t.rank();
        for round in 0..3u8 {
            let data: Vec<Vec<u8>> = (0..n)
                .map(|p| vec![me as u8 ^ p as u8 ^ round; 1 + p * 1000 + round as usize * 40_000])
                .collect();
            let mut got: Vec<Vec<u8>> = vec![Vec::new(); n];
            let mut ex = Exchange::new();
            for (p, d) in data.iter().enumerate() {
                ex.send(p, MsgKey::user(round as u32), d);
            }
            for (p, g) in got.iter_mut().enumerate() {
                ex.recv(p, MsgKey::user(round as u32), g);
            }
            t.exchange(&mut ex).unwrap();
            drop(ex);
            for (p, g) in got.iter().enumerate() {
                assert_eq!(
                    g,
                    &vec![me as u8 ^ p as u8 ^ round; 1 + me * 1000 + round as usize * 40_000]
                );
            }
        }
        t.finish().unwrap();
        t.stats()
    });
    let evictions: u64 = stats
        .iter()
        .flat_map(|s| s.extra.iter())
        .filter(|(n, _)| *n == "tcp evictions")
        .map(|(_, v)| v)
        .sum();
    assert!(evictions > 0, "cap 2 with 8 ranks must evict");
}

#[test]
fn one_message_inbox_sixteen_to_one_gather() {
    let n = 16;
    let mut cfg = common::config();
    cfg.tcp.inbox_messages = 1;
    cfg.tcp.inbox_bytes = 1 << 20;
    let stats = common::run(n, cfg, |mut t| {
        let me = t.rank();
        let per_rank = 4;
        if me == 0 {
            // Receive in reverse rank order, one message at a time: nearly every message
            // arrives before its receive and must be refused, then pulled with GET.
            for p in (1..n).rev() {
                for k in 0..per_rank {
                    let mut got = Vec::new();
                    t.recv(p, MsgKey::user(5), &mut got).unwrap();
                    assert_eq!(got, vec![(p * per_rank + k) as u8; 100 + k * 3000]);
                }
            }
        } else {
            for k in 0..per_rank {
                t.send(
                    0,
                    MsgKey::user(5),
                    &vec![(me * per_rank + k) as u8; 100 + k * 3000],
                )
                .unwrap();
            }
        }
        t.finish().unwrap();
        t.stats()
    });
    let refusals: u64 = stats[0]
        .extra
        .iter()
        .filter(|(n, _)| *n == "tcp refusals sent")
        .map(|(_, v)| v)
        .sum();
    assert!(refusals > 0, "a one-message inbox must refuse");
    assert_eq!(stats[0].total_received().messages, 60);
}

#[test]
fn full_outbox_blocks_sender_without_deadlock() {
    // Both ranks send more than their outbox holds before receiving anything: each send
    // waits for room while the exchange keeps serving the other side's GETs and ACCEPTs.
    let mut cfg = common::config();
    cfg.tcp.outbox_bytes = 64 << 10;
    cfg.tcp.inbox_messages = 2;
    common::run(2, cfg, |mut t| {
        let other = 1 - t.rank();
        let msgs: Vec<Vec<u8>> = (0..20).map(|i| vec![i as u8; 30_000]).collect();
        let mut got: Vec<Vec<u8>> = vec![Vec::new(); 20];
        let mut ex = Exchange::new();
        for m in &msgs {
            ex.send(other, MsgKey::user(0), m);
        }
        for g in got.iter_mut() {
            ex.recv(other, MsgKey::user(0), g);
        }
        t.exchange(&mut ex).unwrap();
        drop(ex);
        assert_eq!(got, msgs);
        t.finish().unwrap();
    });
}

#[test]
fn a_flooding_connection_does_not_starve_a_newcomer() {
    // Rank 1 floods rank 0 with messages rank 0 does not want yet (they fill the inbox and
    // are refused); rank 2 connects later with the one message rank 0 waits for. Fair service
    // of the listener and every connection (T3) lets it through.
    let mut cfg = common::config();
    cfg.tcp.inbox_messages = 8;
    common::run(3, cfg, |mut t| {
        match t.rank() {
            0 => {
                let mut got = Vec::new();
                let start = std::time::Instant::now();
                t.recv(2, MsgKey::user(1), &mut got).unwrap();
                assert_eq!(got, b"newcomer");
                assert!(start.elapsed() < std::time::Duration::from_secs(10));
                for i in 0..400u32 {
                    t.recv(1, MsgKey::user(0), &mut got).unwrap();
                    assert_eq!(got, vec![i as u8; 1000 + i as usize * 100]);
                }
            }
            1 => {
                let msgs: Vec<Vec<u8>> = (0..400u32)
                    .map(|i| vec![i as u8; 1000 + i as usize * 100])
                    .collect();
                let mut ex = Exchange::new();
                for m in &msgs {
                    ex.send(0, MsgKey::user(0), m);
                }
                t.exchange(&mut ex).unwrap();
            }
            _ => {
                std::thread::sleep(std::time::Duration::from_millis(50));
                t.send(0, MsgKey::user(1), b"newcomer").unwrap();
            }
        }
        t.finish().unwrap();
    });
}

/// A peer that announces a message larger than memory (2^60 bytes, under a cap raised to
/// `u64::MAX`) for a posted receive: the receive fails with an error naming the peer and the
/// cause; the process does not abort.
#[test]
fn frame_announcing_more_than_memory_is_an_error_not_an_abort() {
    use ferry_core::store::MemStore;
    use ferry_core::Store;
    use ferry_proto::frame::{FrameType, Header};
    use ferry_proto::handshake;
    use ferry_tcp::TcpTransport;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    common::init_log();
    let store = MemStore::new();
    // The forger poses as rank 1; its listener only gives rank 0 an address to publish.
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    store
        .set(
            "tcp/addr/1",
            fake.local_addr().unwrap().to_string().as_bytes(),
        )
        .unwrap();
    let mut cfg = common::config();
    cfg.tcp.max_message_bytes = u64::MAX;
    let mut t = TcpTransport::from_store(0, 2, &store, &cfg, common::SECRET).unwrap();
    let addr = t.local_addr();
    let forger = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        let secret = common::SECRET.as_bytes();
        s.write_all(&handshake::hello(1, 0, secret).encode())
            .unwrap();
        s.write_all(secret).unwrap();
        let forged = Header {
            ty: FrameType::Try,
            key: MsgKey::user(5),
            source: 1,
            dest: 0,
            serial: 0,
            len: 1 << 60,
        };
        s.write_all(&forged.encode()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = [0u8; 256];
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    let mut got = Vec::new();
    let e = t.recv(1, MsgKey::user(5), &mut got).unwrap_err();
    assert_eq!(e.peer(), Some(1), "{e}");
    assert_eq!(e.rank(), Some(0), "{e}");
    assert!(e.to_string().contains("cannot allocate"), "{e}");
    drop(t);
    forger.join().unwrap();
}

/// Flow tables stay bounded when groups come and go: 2,000 generations of a ping-pong, each
/// retired once it ended, leave no flow counters behind.
#[test]
fn retired_generations_leave_no_flows() {
    common::run(2, common::config(), |mut t| {
        let me = t.rank();
        let peer = 1 - me;
        let mut got = Vec::new();
        for g in 0..2000u32 {
            let key = ferry_core::MsgKey::new(g, ferry_proto::MsgKind::COLLECTIVE, 0);
            if me == 0 {
                t.send(peer, key, &g.to_le_bytes()).unwrap();
                t.recv(peer, key, &mut got).unwrap();
            } else {
                t.recv(peer, key, &mut got).unwrap();
                t.send(peer, key, &got).unwrap();
            }
            t.retire_generations_before(g + 1);
            assert!(
                t.flow_count().unwrap_or(usize::MAX) <= 2,
                "generation {g}: {} flows",
                t.flow_count().unwrap_or(usize::MAX)
            );
        }
        t.finish().unwrap();
    });
}
