//! The goodbye of a rank that ends while a connection it dialled still waits for the peer's
//! handshake answer, stepped by hand (the seeded simulation in `sim/` reaches the same
//! interleaving only in a few schedules out of thousands).
//!
//! The case from elastic jobs: a spare waiting for its admission dials the master (liveness
//! probe) while the master sleeps; the master wakes, dials the spare itself and sends the
//! decision over its own connection; the spare takes it and ends before the master's answer
//! to the spare's dial arrives. The spare's goodbye must not turn that answer into a protocol
//! violation that fails the master and drops the connection carrying the goodbye and the
//! ACCEPT of the decision (the master then reported the spare as failed).

use std::collections::VecDeque;
use std::time::Duration;

use ferry_proto::endpoint::{
    Action, ConnId, Endpoint, EndpointConfig, Landed, NoBuffers, PeerStatus, RecvId, SendBuffers,
    SendId, SendStatus, Sink,
};
use ferry_proto::frame::{FrameType, Header};
use ferry_proto::MsgKey;

const SECRET: &[u8] = b"goodbye-test";

fn endpoint(rank: usize) -> Endpoint {
    let mut cfg = EndpointConfig::new(rank, 2, SECRET);
    cfg.refused_is_dead = true;
    Endpoint::new(cfg)
}

/// A frame an endpoint asked to write, with its payload bytes.
struct Frame {
    conn: ConnId,
    header: Header,
    payload: Vec<u8>,
}

/// Everything `ep` asked for, frames with their payloads resolved from `bufs`.
fn actions(ep: &mut Endpoint, bufs: &dyn SendBuffers) -> (Vec<Frame>, Vec<Action>) {
    let mut frames = Vec::new();
    let mut other = Vec::new();
    while let Some(a) = ep.poll_action() {
        match a {
            Action::Transmit {
                conn,
                header,
                payload,
            } => {
                let payload = match payload {
                    ferry_proto::endpoint::Payload::None => Vec::new(),
                    ferry_proto::endpoint::Payload::Shared(v) => v.as_ref().clone(),
                    ferry_proto::endpoint::Payload::Op(op, len) => {
                        let b = bufs.bytes(op).expect("zero-copy payload of a live send");
                        assert_eq!(b.len(), len);
                        b.to_vec()
                    }
                };
                frames.push(Frame {
                    conn,
                    header,
                    payload,
                });
            }
            a => other.push(a),
        }
    }
    (frames, other)
}

/// Hands `frame` to `ep` as read from its connection `conn`.
fn feed(ep: &mut Endpoint, conn: ConnId, frame: &Frame, now: Duration) {
    match ep.on_header(conn, frame.header, now) {
        Sink::Done => {}
        Sink::Owned(_) => ep.on_payload(conn, Landed::Owned(frame.payload.clone()), now),
        Sink::Recv(..) => ep.on_payload(conn, Landed::Direct, now),
        Sink::Discard(_) => ep.on_payload(conn, Landed::Discarded, now),
    }
}

struct Bytes(Vec<u8>);

impl SendBuffers for Bytes {
    fn bytes(&self, _: SendId) -> Option<&[u8]> {
        Some(&self.0)
    }
}

#[test]
fn a_goodbye_waits_for_the_handshake_of_a_dialled_connection() {
    let key = MsgKey::user(7);
    let t = |ms: u64| Duration::from_millis(ms);
    // Rank 1 (the spare) waits for a message from rank 0 and, after the probe delay, dials it.
    let mut spare = endpoint(1);
    spare.post_recv(RecvId(1), 0, key, t(0)).unwrap();
    spare.handle_timeout(t(200), &NoBuffers);
    let (frames, other) = actions(&mut spare, &NoBuffers);
    assert!(frames.is_empty());
    let probe = match other.as_slice() {
        [Action::Dial { conn, peer: 0 }] => *conn,
        a => panic!("expected a dial of rank 0, got {a:?}"),
    };
    spare.on_connected(probe, t(200));
    let (spare_hello, _) = actions(&mut spare, &NoBuffers);
    assert_eq!(spare_hello.len(), 1);
    assert_eq!(spare_hello[0].header.ty, FrameType::Hello);

    // Rank 0 (the master, which was asleep) sends the decision over a connection of its own.
    let mut master = endpoint(0);
    let decision = Bytes(vec![42; 20]);
    let st = master
        .post_send(SendId(1), 1, key, decision.0.len(), t(1000), &decision)
        .unwrap();
    assert_eq!(
        st,
        SendStatus::Done,
        "a small message is copied into the outbox"
    );
    let (_, other) = actions(&mut master, &decision);
    let dialled = match other.as_slice() {
        [Action::Dial { conn, peer: 1 }] => *conn,
        a => panic!("expected a dial of rank 1, got {a:?}"),
    };
    master.on_connected(dialled, t(1000));
    let (master_frames, _) = actions(&mut master, &decision);
    let on_spare = spare.on_accepted(t(1000));
    for f in &master_frames {
        feed(&mut spare, on_spare, f, t(1000));
    }
    let (to_master, other) = actions(&mut spare, &NoBuffers);
    assert!(
        other
            .iter()
            .any(|a| matches!(a, Action::RecvDone { op: RecvId(1), .. })),
        "the spare got the decision: {other:?}"
    );

    // The spare ends at once; its own dial still waits for the master's HelloAck.
    spare.finish(None, t(1001));
    let (goodbye, other) = actions(&mut spare, &NoBuffers);
    assert!(goodbye
        .iter()
        .any(|f| f.conn == on_spare && f.header.ty == FrameType::Bye));
    assert!(other.iter().all(|a| !matches!(a, Action::Drop(_))));

    // The master accepts the spare's old dial and answers its Hello.
    let on_master = master.on_accepted(t(1001));
    for f in &spare_hello {
        feed(&mut master, on_master, f, t(1001));
    }
    let (answers, _) = actions(&mut master, &decision);
    let ack: Vec<&Frame> = answers
        .iter()
        .filter(|f| f.conn == on_master && f.header.ty == FrameType::HelloAck)
        .collect();
    assert_eq!(ack.len(), 1);

    // The answer reaches the spare after its goodbye: the handshake completes, the goodbye
    // follows on that connection too, and the master is not taken for failed.
    feed(&mut spare, probe, ack[0], t(1002));
    let (after, other) = actions(&mut spare, &NoBuffers);
    assert_eq!(spare.peer_status(0), Some(&PeerStatus::Alive));
    assert!(
        other.iter().all(|a| !matches!(a, Action::Drop(_))),
        "the spare dropped a connection: {other:?}"
    );
    assert!(after
        .iter()
        .any(|f| f.conn == probe && f.header.ty == FrameType::Bye));

    // The master reads the ACCEPT and both goodbyes: its finish owes nothing and blames no one.
    let mut to_master: VecDeque<(ConnId, Frame)> = to_master
        .into_iter()
        .chain(goodbye)
        .map(|f| (dialled, f))
        .collect();
    to_master.extend(after.into_iter().map(|f| (on_master, f)));
    for (conn, f) in &to_master {
        feed(&mut master, *conn, f, t(1003));
    }
    assert!(matches!(
        master.peer_status(1),
        Some(PeerStatus::Finished {
            after_failure_of: None
        })
    ));
    master.finish(None, t(1003));
    let _ = actions(&mut master, &decision);
    assert_eq!(master.finished(), Some(Ok(())));
}
