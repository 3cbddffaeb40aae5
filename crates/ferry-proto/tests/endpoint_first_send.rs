//! A large first send to a peer that is not connected yet, stepped by hand: the message stays
//! in the program's buffer while the connection is set up (no outbox copy of its size), is
//! announced once the handshake is under way, and goes out zero-copy when the receiver pulls
//! it. If the program abandons the send before that, the endpoint copies it then and never
//! reads the program's buffer again.

use std::time::Duration;

use ferry_proto::endpoint::{
    Action, ConnId, Endpoint, EndpointConfig, RecvId, SendBuffers, SendId, SendStatus,
};
use ferry_proto::frame::FrameType;
use ferry_proto::MsgKey;

mod wire;
use wire::{actions, feed, Frame};

const SECRET: &[u8] = b"first-send-test";
const LEN: usize = 4 << 20;

fn endpoint(rank: usize) -> Endpoint {
    Endpoint::new(EndpointConfig::new(rank, 2, SECRET))
}

/// The payload of send 1, while the program still holds it.
struct Held(Option<Vec<u8>>);

impl SendBuffers for Held {
    fn bytes(&self, op: SendId) -> Option<&[u8]> {
        (op == SendId(1)).then_some(self.0.as_deref()).flatten()
    }
}

fn pattern() -> Vec<u8> {
    (0..LEN).map(|i| (i * 7 + i / 4093) as u8).collect()
}

/// Rank 0 posts a 4 MiB send to rank 1 before any connection exists; returns both endpoints,
/// rank 0's dialled connection and the frames of its handshake.
fn first_send(bufs: &Held) -> (Endpoint, Endpoint, ConnId, Vec<Frame>) {
    let t = Duration::ZERO;
    let mut a = endpoint(0);
    let st = a
        .post_send(SendId(1), 1, MsgKey::user(3), LEN, t, bufs)
        .unwrap();
    assert_eq!(
        st,
        SendStatus::Pending,
        "a large send waits for its receiver"
    );
    let sizes = a.table_sizes();
    assert_eq!(
        sizes.outbox_bytes, 0,
        "the message was copied into the outbox while the connection was dialled: {sizes:?}"
    );
    let (frames, other) = actions(&mut a, bufs);
    assert!(frames.is_empty());
    let dialled = match other.as_slice() {
        [Action::Dial { conn, peer: 1 }] => *conn,
        o => panic!("expected a dial of rank 1, got {o:?}"),
    };
    a.on_connected(dialled, t);
    let (hello, _) = actions(&mut a, bufs);
    let b = endpoint(1);
    (a, b, dialled, hello)
}

#[test]
fn a_large_first_send_stays_in_place_until_it_is_pulled() {
    let t = Duration::ZERO;
    let bufs = Held(Some(pattern()));
    let (mut a, mut b, dialled, hello) = first_send(&bufs);
    let types: Vec<FrameType> = hello.iter().map(|f| f.header.ty).collect();
    assert_eq!(types, [FrameType::Hello, FrameType::Announce]);

    let accepted = b.on_accepted(t);
    b.post_recv(RecvId(1), 0, MsgKey::user(3), t).unwrap();
    for f in &hello {
        feed(&mut b, accepted, f, t);
    }
    let (to_a, _) = actions(&mut b, &Held(None));
    let types: Vec<FrameType> = to_a.iter().map(|f| f.header.ty).collect();
    assert_eq!(types, [FrameType::HelloAck, FrameType::Get]);
    for f in &to_a {
        feed(&mut a, dialled, f, t);
    }
    let (data, _) = actions(&mut a, &bufs);
    assert_eq!(data.len(), 1);
    assert_eq!(data[0].header.ty, FrameType::Data);
    assert!(
        data[0].borrowed,
        "DATA is written from the program's buffer"
    );
    assert_eq!(a.table_sizes().outbox_bytes, 0);
    a.on_op_written(SendId(1), t);
    let (_, done) = actions(&mut a, &bufs);
    assert!(done
        .iter()
        .any(|x| matches!(x, Action::SendDone(SendId(1)))));

    feed(&mut b, accepted, &data[0], t);
    let (_, got) = actions(&mut b, &Held(None));
    assert!(got.iter().any(|x| matches!(
        x,
        Action::RecvDone {
            op: RecvId(1),
            len: LEN,
            ..
        }
    )));
    assert_eq!(data[0].payload, pattern());
}

#[test]
fn an_abandoned_first_send_is_copied_then_and_its_buffer_never_read_again() {
    let t = Duration::ZERO;
    let bufs = Held(Some(pattern()));
    let (mut a, mut b, dialled, hello) = first_send(&bufs);
    // The program gives the send up (its exchange failed elsewhere) and reuses its buffer.
    a.abandon_send(SendId(1), &bufs);
    assert_eq!(a.table_sizes().outbox_bytes, LEN);
    let gone = Held(None);

    let accepted = b.on_accepted(t);
    b.post_recv(RecvId(1), 0, MsgKey::user(3), t).unwrap();
    for f in &hello {
        feed(&mut b, accepted, f, t);
    }
    let (to_a, _) = actions(&mut b, &gone);
    for f in &to_a {
        feed(&mut a, dialled, f, t);
    }
    // `gone` holds no buffer: a zero-copy payload would fail `actions`.
    let (data, other) = actions(&mut a, &gone);
    assert!(other.iter().all(|x| !matches!(x, Action::SendDone(_))));
    assert_eq!(data.len(), 1);
    assert!(!data[0].borrowed);
    feed(&mut b, accepted, &data[0], t);
    let (_, got) = actions(&mut b, &gone);
    assert!(got.iter().any(|x| matches!(
        x,
        Action::RecvDone {
            op: RecvId(1),
            len: LEN,
            ..
        }
    )));
    assert_eq!(data[0].payload, pattern());
}
