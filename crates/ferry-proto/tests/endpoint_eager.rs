//! TRY messages written straight from the program's buffer, stepped by hand: while the send's
//! call is active the frame's payload is the program's buffer (no outbox copy); an answer
//! completes the send without any copy, and a call that ends first gets the copy then
//! (`release_eager`), after which nothing reads the program's buffer again. A call that waits
//! only for such sends waits for their answers until one gap between answers passed without
//! any (`eager_release_at`), and not at all for refused ones.

use std::collections::HashMap;
use std::time::Duration;

use ferry_proto::endpoint::{
    Action, ConnId, Endpoint, EndpointConfig, RecvId, SendBuffers, SendId, SendStatus,
};
use ferry_proto::frame::{FrameType, Header};
use ferry_proto::MsgKey;

mod wire;
use wire::{actions, feed, Frame};

const SECRET: &[u8] = b"eager-test";
const LEN: usize = 32 << 10;

fn endpoint(rank: usize) -> Endpoint {
    Endpoint::new(EndpointConfig::new(rank, 2, SECRET))
}

#[derive(Default)]
struct Bufs(HashMap<SendId, Vec<u8>>);

impl SendBuffers for Bufs {
    fn bytes(&self, op: SendId) -> Option<&[u8]> {
        self.0.get(&op).map(|v| v.as_slice())
    }
}

fn pattern() -> Vec<u8> {
    (0..LEN).map(|i| (i * 13 + i / 251) as u8).collect()
}

/// Rank 0 and rank 1 connected by a first small message; returns both endpoints and their
/// ends of the connection.
fn connected() -> (Endpoint, Endpoint, ConnId, ConnId) {
    connected_with(EndpointConfig::new(0, 2, SECRET))
}

/// [`connected`], with rank 0's settings `cfg`.
fn connected_with(cfg: EndpointConfig) -> (Endpoint, Endpoint, ConnId, ConnId) {
    let t = Duration::ZERO;
    let mut a = Endpoint::new(cfg);
    let mut b = endpoint(1);
    let mut bufs = Bufs::default();
    bufs.0.insert(SendId(9), vec![1, 2, 3]);
    a.post_send(SendId(9), 1, MsgKey::user(1), 3, t, &bufs)
        .unwrap();
    let (_, other) = actions(&mut a, &bufs);
    let dialled = match other.as_slice() {
        [Action::Dial { conn, peer: 1 }] => *conn,
        o => panic!("expected a dial of rank 1, got {o:?}"),
    };
    a.on_connected(dialled, t);
    let (to_b, _) = actions(&mut a, &bufs);
    let accepted = b.on_accepted(t);
    b.post_recv(RecvId(9), 0, MsgKey::user(1), t).unwrap();
    for f in &to_b {
        feed(&mut b, accepted, f, t);
    }
    let (to_a, _) = actions(&mut b, &Bufs::default());
    for f in &to_a {
        feed(&mut a, dialled, f, t);
    }
    let _ = actions(&mut a, &bufs);
    assert_eq!(a.table_sizes().outbox, 0, "the first message was answered");
    (a, b, dialled, accepted)
}

/// Posts the eager send 1 on `a`; returns its TRY frame.
fn post(a: &mut Endpoint, bufs: &Bufs) -> Frame {
    let st = a
        .post_send(SendId(1), 1, MsgKey::user(2), LEN, Duration::ZERO, bufs)
        .unwrap();
    assert_eq!(
        st,
        SendStatus::Pending,
        "complete once answered or released"
    );
    assert_eq!(
        a.table_sizes().outbox_bytes,
        0,
        "no copy while the call is active"
    );
    let (mut frames, _) = actions(a, bufs);
    assert_eq!(frames.len(), 1);
    let f = frames.remove(0);
    assert_eq!(f.header.ty, FrameType::Try);
    assert!(f.borrowed, "the TRY is written from the program's buffer");
    f
}

#[test]
fn an_answered_try_is_never_copied() {
    let t = Duration::ZERO;
    let (mut a, mut b, dialled, accepted) = connected();
    let mut bufs = Bufs::default();
    bufs.0.insert(SendId(1), pattern());
    let f = post(&mut a, &bufs);
    b.post_recv(RecvId(1), 0, MsgKey::user(2), t).unwrap();
    feed(&mut b, accepted, &f, t);
    let (to_a, got) = actions(&mut b, &Bufs::default());
    assert!(got.iter().any(|x| matches!(
        x,
        Action::RecvDone {
            op: RecvId(1),
            len: LEN,
            ..
        }
    )));
    assert_eq!(f.payload, pattern());
    for f in &to_a {
        feed(&mut a, dialled, f, t);
    }
    let (_, done) = actions(&mut a, &bufs);
    assert!(done
        .iter()
        .any(|x| matches!(x, Action::SendDone(SendId(1)))));
    assert!(!a.has_eager_borrowed());
    assert_eq!(a.table_sizes().outbox_bytes, 0);
    assert_eq!(a.table_sizes().outbox, 0);
}

#[test]
fn a_call_that_ends_first_gets_the_copy_and_lets_go_of_the_buffer() {
    let t = Duration::ZERO;
    let (mut a, mut b, dialled, accepted) = connected();
    let mut bufs = Bufs::default();
    bufs.0.insert(SendId(1), pattern());
    let f = post(&mut a, &bufs);
    // The call returns before the receiver answers.
    let copies = a.release_eager(&bufs);
    assert_eq!(copies.len(), 1);
    assert_eq!(copies[0].0, SendId(1));
    assert_eq!(*copies[0].1, pattern());
    let (_, done) = actions(&mut a, &bufs);
    assert!(done
        .iter()
        .any(|x| matches!(x, Action::SendDone(SendId(1)))));
    assert_eq!(a.table_sizes().outbox_bytes, LEN);
    // The program reuses its buffer; the receiver stores the message and takes it later.
    let gone = Bufs::default();
    feed(&mut b, accepted, &f, t);
    let (to_a, _) = actions(&mut b, &gone);
    for f in &to_a {
        feed(&mut a, dialled, f, t);
    }
    let (frames, _) = actions(&mut a, &gone);
    assert!(frames.iter().all(|f| !f.borrowed));
    let mut got = Vec::new();
    b.post_recv(RecvId(1), 0, MsgKey::user(2), t).unwrap();
    let (_, done) = actions(&mut b, &gone);
    for x in done {
        if let Action::RecvDone {
            op: RecvId(1),
            data: Some(d),
            ..
        } = x
        {
            got = d;
        }
    }
    assert_eq!(got, pattern());
    assert_eq!(
        a.table_sizes().outbox_bytes,
        0,
        "answered: the copy is gone"
    );
}

#[test]
fn an_abandoned_try_is_copied_and_its_buffer_never_read_again() {
    let t = Duration::ZERO;
    let (mut a, _b, dialled, _) = connected();
    let mut bufs = Bufs::default();
    bufs.0.insert(SendId(1), pattern());
    let f = post(&mut a, &bufs);
    a.abandon_send(SendId(1), &bufs);
    assert!(!a.has_eager_borrowed());
    assert_eq!(a.table_sizes().outbox_bytes, LEN);
    // Refused by the receiver, then pulled: served from the copy (no buffer any more).
    // Answers name the message: its source and destination stay.
    let refuse = Header {
        ty: FrameType::Refuse,
        len: 0,
        ..f.header
    };
    feed(
        &mut a,
        dialled,
        &Frame {
            header: refuse,
            payload: Vec::new(),
            borrowed: false,
        },
        t,
    );
    let get = Header {
        ty: FrameType::Get,
        ..refuse
    };
    feed(
        &mut a,
        dialled,
        &Frame {
            header: get,
            payload: Vec::new(),
            borrowed: false,
        },
        t,
    );
    let (frames, other) = actions(&mut a, &Bufs::default());
    assert!(other.iter().all(|x| !matches!(x, Action::SendDone(_))));
    let data: Vec<&Frame> = frames
        .iter()
        .filter(|f| f.header.ty == FrameType::Data)
        .collect();
    assert_eq!(data.len(), 1);
    assert!(!data[0].borrowed);
    assert_eq!(data[0].payload, pattern());
}

const HOLD: Duration = Duration::from_micros(100);
const RATE: u64 = 1_000_000_000;

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

/// The gap between answers the hold allows with [`HOLD`] and [`RATE`] while `n` messages of
/// LEN are unanswered.
fn gap(n: u64) -> Duration {
    HOLD + Duration::from_nanos(n * LEN as u64 * 1_000_000_000 / RATE)
}

/// Rank 0 (holding with [`HOLD`] and [`RATE`]) connected to rank 1, with sends 1 and 2 of
/// flow user(2) posted at `at`; returns rank 0, the buffers, its connection and the TRYs.
fn two_held(at: Duration) -> (Endpoint, Bufs, ConnId, Vec<Frame>) {
    let mut cfg = EndpointConfig::new(0, 2, SECRET);
    cfg.eager_hold = HOLD;
    cfg.eager_hold_rate = RATE;
    cfg.eager_hold_min = LEN;
    let (mut a, _b, dialled, _) = connected_with(cfg);
    let mut bufs = Bufs::default();
    bufs.0.insert(SendId(1), pattern());
    bufs.0.insert(SendId(2), pattern());
    for op in [SendId(1), SendId(2)] {
        let st = a.post_send(op, 1, MsgKey::user(2), LEN, at, &bufs).unwrap();
        assert_eq!(st, SendStatus::Pending);
    }
    let (frames, _) = actions(&mut a, &bufs);
    assert_eq!(frames.len(), 2);
    assert!(frames.iter().all(|f| f.borrowed));
    (a, bufs, dialled, frames)
}

/// Hands `a` the answer `ty` to TRY frame `f` at `now`.
fn answer(a: &mut Endpoint, conn: ConnId, f: &Frame, ty: FrameType, now: Duration) {
    let h = Header {
        ty,
        len: 0,
        ..f.header
    };
    let answer = Frame {
        header: h,
        payload: Vec::new(),
        borrowed: false,
    };
    feed(a, conn, &answer, now);
}

#[test]
fn the_hold_counts_from_the_last_post_write_or_answer() {
    let (mut a, bufs, conn, frames) = two_held(us(1000));
    assert_eq!(a.eager_release_at(), Some(us(1000) + gap(2)));
    // Writing the window took a while: the receiver could not answer before it was out.
    a.on_written(us(1500));
    assert_eq!(a.eager_release_at(), Some(us(1500) + gap(2)));
    // An answer: the receiver is reading, the next one is waited for one more gap.
    answer(&mut a, conn, &frames[0], FrameType::Accept, us(1600));
    let (_, done) = actions(&mut a, &bufs);
    assert!(done
        .iter()
        .any(|x| matches!(x, Action::SendDone(SendId(1)))));
    assert_eq!(a.eager_release_at(), Some(us(1600) + gap(1)));
    assert_eq!(a.counters().eager_copies, 0);
    // Nothing more by then: the call copies the rest and ends.
    let copies = a.release_eager(&bufs);
    assert_eq!(copies.len(), 1);
    assert_eq!(copies[0].0, SendId(2));
    assert_eq!(a.counters().eager_copies, 1);
    assert_eq!(a.eager_release_at(), None);
}

#[test]
fn a_window_answered_in_time_is_never_copied() {
    let (mut a, bufs, conn, frames) = two_held(us(1000));
    answer(&mut a, conn, &frames[0], FrameType::Accept, us(1100));
    answer(&mut a, conn, &frames[1], FrameType::Accept, us(1200));
    let (_, done) = actions(&mut a, &bufs);
    assert_eq!(
        done.iter()
            .filter(|x| matches!(x, Action::SendDone(_)))
            .count(),
        2
    );
    assert_eq!(a.eager_release_at(), None, "nothing left to hold");
    assert_eq!(a.counters().eager_copies, 0);
    assert_eq!(a.table_sizes().outbox_bytes, 0);
}

#[test]
fn refused_sends_are_not_waited_for() {
    let (mut a, bufs, conn, frames) = two_held(us(1000));
    answer(&mut a, conn, &frames[0], FrameType::Refuse, us(1100));
    // One still unanswered: its answer may come.
    assert_eq!(a.eager_release_at(), Some(us(1100) + gap(1)));
    answer(&mut a, conn, &frames[1], FrameType::Refuse, us(1200));
    // Both refused: they wait for their receives, which may be posted only after this call.
    assert!(a.eager_release_at().is_some_and(|t| t <= us(1200)));
    assert_eq!(a.release_eager(&bufs).len(), 2);
}

#[test]
fn without_a_hold_the_call_copies_when_it_could_end() {
    let t = us(1000);
    let (mut a, _b, _, _) = connected();
    let mut bufs = Bufs::default();
    bufs.0.insert(SendId(1), pattern());
    a.post_send(SendId(1), 1, MsgKey::user(2), LEN, t, &bufs)
        .unwrap();
    // The defaults hold from 256 KiB unanswered: one message of 32 KiB is copied at once.
    assert!(a.eager_release_at().is_some_and(|r| r <= t));
    let mut cfg = a.config().clone();
    cfg.eager_hold_min = 0;
    cfg.eager_hold = us(10);
    let (mut h, _, _, _) = connected_with(cfg.clone());
    h.post_send(SendId(1), 1, MsgKey::user(2), LEN, t, &bufs)
        .unwrap();
    assert!(h.eager_release_at().is_some_and(|r| r > t));
    cfg.eager_hold = Duration::ZERO;
    cfg.eager_hold_rate = 0;
    let (mut c, _d, _, _) = connected_with(cfg);
    c.post_send(SendId(1), 1, MsgKey::user(2), LEN, t, &bufs)
        .unwrap();
    assert_eq!(c.eager_release_at(), Some(t));
}
