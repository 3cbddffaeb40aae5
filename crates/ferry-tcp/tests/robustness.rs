//! Strangers and broken peers (T5, T8): a wrong secret, garbage or a truncated frame costs the
//! offending connection only; a peer that disappears fails the operations that need it with an
//! error naming rank, operation and peer, well within the configured timeout.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ferry_core::{ErrorKind, MsgKey, Transport};
use ferry_proto::frame::{FrameType, Header};
use ferry_proto::handshake;

/// Rank 0 publishes its address; the closure gets it and attacks it while ranks 0 and 1
/// ping-pong, which must stay correct.
fn attack_during_ping_pong(attack: impl Fn(std::net::SocketAddr) + Sync) -> u64 {
    let addr = std::sync::Mutex::new(None);
    let stats = common::run(2, common::config(), |mut t| {
        let me = t.rank();
        if me == 0 {
            *addr.lock().unwrap() = Some(t.local_addr());
        }
        let mut got = Vec::new();
        for i in 0..200u32 {
            if i == 20 && me == 1 {
                let a = addr.lock().unwrap().expect("rank 0 published");
                attack(a);
            }
            let msg = i.to_le_bytes();
            if me == 0 {
                t.send(1, MsgKey::user(0), &msg).unwrap();
                t.recv(1, MsgKey::user(0), &mut got).unwrap();
            } else {
                t.recv(0, MsgKey::user(0), &mut got).unwrap();
                t.send(0, MsgKey::user(0), &got).unwrap();
            }
            assert_eq!(got, msg);
        }
        t.finish().unwrap();
        t.stats()
    });
    stats[0]
        .extra
        .iter()
        .filter(|(n, _)| *n == "tcp strangers rejected")
        .map(|(_, v)| *v)
        .sum()
}

/// Waits until the server closes the stranger's connection (EOF or reset).
fn expect_closed(mut s: TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => continue,
        }
    }
}

#[test]
fn stranger_with_wrong_secret_is_rejected() {
    let rejected = attack_during_ping_pong(|a| {
        let mut s = TcpStream::connect(a).unwrap();
        let h = handshake::hello(1, 0, b"not-the-secret");
        s.write_all(&h.encode()).unwrap();
        s.write_all(b"not-the-secret").unwrap();
        // Even a well-formed message after the bad hello must not be delivered.
        let m = Header {
            ty: FrameType::Try,
            key: MsgKey::user(0),
            source: 1,
            dest: 0,
            serial: 9999,
            len: 4,
        };
        let _ = s.write_all(&m.encode());
        let _ = s.write_all(&[1, 2, 3, 4]);
        expect_closed(s);
    });
    assert!(rejected >= 1);
}

#[test]
fn garbage_and_truncated_frames_are_dropped() {
    attack_during_ping_pong(|a| {
        // Plain garbage instead of a handshake.
        let mut s = TcpStream::connect(a).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789012345678901234")
            .unwrap();
        expect_closed(s);
        // A valid handshake, then a header announcing more than the length cap.
        let mut s = TcpStream::connect(a).unwrap();
        let secret = common::SECRET.as_bytes();
        s.write_all(&handshake::hello(1, 0, secret).encode())
            .unwrap();
        s.write_all(secret).unwrap();
        let mut huge = Header {
            ty: FrameType::Try,
            key: MsgKey::user(77),
            source: 1,
            dest: 0,
            serial: 0,
            len: u64::MAX,
        }
        .encode();
        s.write_all(&huge).unwrap();
        expect_closed(s);
        // A valid handshake, then a frame whose reserved bytes are set.
        let mut s = TcpStream::connect(a).unwrap();
        s.write_all(&handshake::hello(1, 0, secret).encode())
            .unwrap();
        s.write_all(secret).unwrap();
        huge[32..40].copy_from_slice(&4u64.to_le_bytes());
        huge[6] = 0xff;
        s.write_all(&huge).unwrap();
        expect_closed(s);
        // A truncated header, then silence and close.
        let s2 = TcpStream::connect(a).unwrap();
        (&s2).write_all(&[b'F', b'R', 1]).unwrap();
        drop(s2);
        // A stranger claiming an impossible rank.
        let mut s = TcpStream::connect(a).unwrap();
        s.write_all(&handshake::hello(57, 0, secret).encode())
            .unwrap();
        s.write_all(secret).unwrap();
        expect_closed(s);
    });
}

#[test]
fn silent_stranger_is_dropped_after_the_handshake_timeout() {
    let mut cfg = common::config();
    cfg.tcp.connect_timeout_ms = 300;
    let addr = std::sync::Mutex::new(None);
    common::run(2, cfg, |mut t| {
        if t.rank() == 0 {
            *addr.lock().unwrap() = Some(t.local_addr());
            let mut got = Vec::new();
            // Keep serving until the stranger (connected by rank 1) got closed.
            t.recv(1, MsgKey::user(1), &mut got).unwrap();
        } else {
            while addr.lock().unwrap().is_none() {
                std::thread::sleep(Duration::from_millis(1));
            }
            let a = addr.lock().unwrap().unwrap();
            let s = TcpStream::connect(a).unwrap();
            let start = Instant::now();
            // Rank 0 polls for our message meanwhile; send it only after the check.
            let h = std::thread::spawn(move || {
                expect_closed(s);
                start.elapsed()
            });
            let waited = h.join().unwrap();
            assert!(waited < Duration::from_secs(9), "closed after {waited:?}");
            t.send(0, MsgKey::user(1), b"done").unwrap();
        }
        t.finish().unwrap();
    });
}

#[test]
fn peer_that_disappears_mid_exchange_fails_the_receive() {
    let mut cfg = common::config();
    cfg.general.operation_timeout_ms = 10_000;
    let errs = common::run(3, cfg, |mut t| {
        let me = t.rank();
        match me {
            0 => {
                // Talk to rank 1 once so a connection exists, then wait for a message that
                // never comes: rank 1 drops its transport without finishing.
                let mut got = Vec::new();
                t.recv(1, MsgKey::user(0), &mut got).unwrap();
                t.send(1, MsgKey::user(0), b"ack").unwrap();
                let start = Instant::now();
                let e = t.recv(1, MsgKey::user(0), &mut got).unwrap_err();
                Some((e, start.elapsed()))
            }
            1 => {
                t.send(0, MsgKey::user(0), b"first").unwrap();
                let mut got = Vec::new();
                t.recv(0, MsgKey::user(0), &mut got).unwrap();
                std::thread::sleep(Duration::from_millis(100));
                drop(t);
                None
            }
            _ => {
                // Never talked to rank 1: finds out by connecting (refused) or by timeout.
                std::thread::sleep(Duration::from_millis(300));
                let start = Instant::now();
                let e = t.send(1, MsgKey::user(3), b"x").and_then(|_| t.finish());
                e.err().map(|e| (e, start.elapsed()))
            }
        }
    });
    let (e, took) = errs[0].as_ref().expect("rank 0 fails");
    assert_eq!(e.kind(), ErrorKind::PeerFailed, "{e}");
    assert_eq!(e.rank(), Some(0));
    assert_eq!(e.peer(), Some(1));
    assert_eq!(e.op(), "recv");
    assert!(*took < Duration::from_secs(10), "{took:?}");
    let text = e.to_string();
    assert!(text.contains("rank 0") && text.contains("rank 1"), "{text}");
    let (e2, took2) = errs[2].as_ref().expect("rank 2 fails");
    assert!(e2.is_peer_failure(), "{e2}");
    assert_eq!(e2.rank(), Some(2));
    assert!(*took2 < Duration::from_secs(25), "{took2:?}");
}

/// Issue 06 item 7: with `general.operation_timeout_ms` = T, a peer that does not take part
/// (stopped, or computing without calling the library) is reported once, after T: finish then
/// skips it at once instead of waiting T again and lingering for it to close.
#[test]
fn finish_after_an_operation_timeout_does_not_wait_again() {
    let mut cfg = common::config();
    cfg.general.operation_timeout_ms = 1000;
    let out = common::run(2, cfg, |mut t| {
        if t.rank() == 1 {
            // "Stopped": the process is alive (its kernel acknowledges data) but does not
            // take part until rank 0 is long done.
            std::thread::sleep(Duration::from_millis(4000));
            let _ = t.finish();
            return None;
        }
        // An eager message rank 1 never accepts, then a receive that times out.
        t.send(1, MsgKey::user(0), b"unanswered").unwrap();
        let mut got = Vec::new();
        let start = Instant::now();
        let e = t.recv(1, MsgKey::user(1), &mut got).unwrap_err();
        let reported = start.elapsed();
        let start = Instant::now();
        let f = t.finish();
        Some((e, reported, f, start.elapsed()))
    });
    let (e, reported, f, finish_took) = out[0].as_ref().expect("rank 0 result");
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(*reported < Duration::from_millis(2500), "{reported:?}");
    assert!(f.is_err(), "the message rank 1 never took is reported");
    assert!(
        *finish_took < Duration::from_millis(600),
        "finish waited {finish_took:?} for a peer already reported"
    );
}
