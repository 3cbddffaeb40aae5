//! Start-up modes and composition: the config-file address list (R2a) and excluded peers for
//! the hybrid backend (S2).

mod common;

use std::net::TcpListener;
use std::sync::Arc;

use ferry_core::store::MemStore;
use ferry_core::{Config, Exchange, MsgKey, OpState, Transport};
use ferry_tcp::TcpTransport;

#[test]
fn address_list_ranks_are_taken_by_bind_order() {
    let n = 4;
    // Ports that were free a moment ago (the list a user would write by hand).
    let ports: Vec<u16> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect::<Vec<_>>()
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    let mut cfg = common::config();
    cfg.tcp.addresses = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    cfg.tcp.secret = Some("file-secret".into());
    let ranks = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..n {
            let cfg = cfg.clone();
            let ranks = &ranks;
            s.spawn(move || {
                let mut t = TcpTransport::from_address_list(&cfg).unwrap();
                assert_eq!(t.size(), n);
                let me = t.rank();
                ranks.lock().unwrap().push(me);
                // A ring shift proves every rank reaches every neighbour by its listed address.
                let msg = [me as u8];
                let mut got = Vec::new();
                let mut ex = Exchange::new();
                ex.send((me + 1) % n, MsgKey::user(0), &msg);
                ex.recv((me + n - 1) % n, MsgKey::user(0), &mut got);
                t.exchange(&mut ex).unwrap();
                drop(ex);
                assert_eq!(got, vec![((me + n - 1) % n) as u8]);
                t.finish().unwrap();
            });
        }
    });
    let mut r = ranks.into_inner().unwrap();
    r.sort_unstable();
    assert_eq!(r, (0..n).collect::<Vec<_>>());
    // A process that finds every address taken is told so.
    let taken: Vec<TcpListener> = ports
        .iter()
        .map(|p| TcpListener::bind(("127.0.0.1", *p)).unwrap())
        .collect();
    let e = TcpTransport::from_address_list(&cfg)
        .err()
        .expect("all taken");
    assert!(e.to_string().contains("can be bound"), "{e}");
    drop(taken);
}

#[test]
fn excluded_peers_are_left_to_the_other_transport() {
    // Ranks 0 and 1 talk over TCP; rank 2 is "node-local" to rank 0 and served elsewhere:
    // rank 0's TCP transport must complete its TCP part and leave the op with rank 2 alone.
    let store = Arc::new(MemStore::new());
    let cfg: Config = common::config();
    std::thread::scope(|s| {
        let st = store.clone();
        let c = cfg.clone();
        let h0 = s.spawn(move || {
            let mut t =
                TcpTransport::from_store_excluding(0, 3, &*st, &c, common::SECRET, &[2]).unwrap();
            let to_local = [9u8];
            let to_remote = [1u8];
            let mut from_remote = Vec::new();
            let mut ex = Exchange::new();
            ex.send(2, MsgKey::user(0), &to_local);
            ex.send(1, MsgKey::user(0), &to_remote);
            ex.recv(1, MsgKey::user(0), &mut from_remote);
            let mut rounds = 0;
            while !(ex.sends[1].state == OpState::Done && ex.recvs[0].state == OpState::Done) {
                assert!(
                    !t.progress_exchange(&mut ex).unwrap(),
                    "op with rank 2 pending"
                );
                t.wait_for_input(std::time::Duration::from_millis(5))
                    .unwrap();
                rounds += 1;
                assert!(rounds < 10_000);
            }
            assert_eq!(ex.sends[0].state, OpState::New, "excluded op untouched");
            // The other transport completes it.
            ex.sends[0].state = OpState::Done;
            assert!(t.progress_exchange(&mut ex).unwrap());
            drop(ex);
            assert_eq!(from_remote, vec![2u8]);
            t.finish().unwrap();
        });
        for rank in 1..3 {
            let st = store.clone();
            let c = cfg.clone();
            s.spawn(move || {
                let excluded: &[usize] = if rank == 2 { &[0] } else { &[] };
                let mut t =
                    TcpTransport::from_store_excluding(rank, 3, &*st, &c, common::SECRET, excluded)
                        .unwrap();
                if rank == 1 {
                    let mut got = Vec::new();
                    t.recv(0, MsgKey::user(0), &mut got).unwrap();
                    assert_eq!(got, vec![1u8]);
                    t.send(0, MsgKey::user(0), &[2u8]).unwrap();
                }
                t.finish().unwrap();
            });
        }
        h0.join().unwrap();
    });
}

#[test]
fn bound_to_every_interface_publishes_a_dialable_name() {
    let mut cfg = common::config();
    cfg.tcp.bind = "0.0.0.0".into();
    let out = common::run(2, cfg, |mut t| {
        let other = 1 - t.rank();
        let mut got = Vec::new();
        let mut ex = Exchange::new();
        let msg = [t.rank() as u8];
        ex.send(other, MsgKey::user(0), &msg);
        ex.recv(other, MsgKey::user(0), &mut got);
        t.exchange(&mut ex).unwrap();
        drop(ex);
        t.finish().unwrap();
        got
    });
    assert_eq!(out, vec![vec![1u8], vec![0u8]]);
}

#[test]
fn retention_is_refused_under_the_launcher() {
    // Retained messages serve ranks restarted by hand from the address file; a launcher job
    // ends (or respawns) on a failure, so asking for both is a configuration error.
    let store = MemStore::new();
    let mut cfg = common::config();
    cfg.tcp.retain = true;
    let e = TcpTransport::from_store(0, 1, &store, &cfg, common::SECRET)
        .err()
        .expect("tcp.retain under the launcher");
    assert!(e.to_string().contains("tcp.retain"), "{e}");
}
