//! Retirement of idle point-to-point flows between two endpoints, stepped by hand: an idle
//! flow is forgotten on both sides and restarts at serial 0 when its tag is used again; a
//! flow whose receiver has a receive waiting is kept, and a send posted while the answer is
//! on its way is held and then goes out with the serial the answer implies.

use std::time::Duration;

use ferry_proto::endpoint::{
    Action, ConnId, Endpoint, EndpointConfig, Landed, RecvId, SendBuffers, SendId, SendStatus, Sink,
};
use ferry_proto::frame::FrameType;
use ferry_proto::MsgKey;

mod wire;
use wire::{actions, feed, Frame};

const SECRET: &[u8] = b"retire-test";

fn endpoint(rank: usize) -> Endpoint {
    let mut cfg = EndpointConfig::new(rank, 2, SECRET);
    // Look for idle flows on every progress call, from the first flow on.
    cfg.retire_p2p_above = 1;
    cfg.retire_every = Duration::ZERO;
    Endpoint::new(cfg)
}

/// Payloads of sends by id: send `i` carries `[i; 3]`.
struct Bufs;

const PAYLOADS: [[u8; 3]; 8] = [
    [0; 3], [1; 3], [2; 3], [3; 3], [4; 3], [5; 3], [6; 3], [7; 3],
];

impl SendBuffers for Bufs {
    fn bytes(&self, op: SendId) -> Option<&[u8]> {
        PAYLOADS.get(op.0 as usize).map(|p| &p[..])
    }
}

/// Rank 0 (`a`, dialling) and rank 1 (`b`) with their ends of one connection.
struct Pair {
    a: Endpoint,
    b: Endpoint,
    a_conn: ConnId,
    b_conn: ConnId,
    /// Completions seen on each side, in order.
    done: [Vec<Action>; 2],
    /// Payloads rank 1 read straight into a receive's buffer.
    direct: Vec<(RecvId, Vec<u8>)>,
    t: Duration,
}

impl Pair {
    /// Rank 0 sends the first message (send 0 on `key`), which sets up the connection.
    fn connect(key: MsgKey) -> Pair {
        let t = Duration::ZERO;
        let mut a = endpoint(0);
        a.post_send(SendId(0), 1, key, 3, t, &Bufs).unwrap();
        let (_, other) = actions(&mut a, &Bufs);
        let a_conn = match other.as_slice() {
            [Action::Dial { conn, peer: 1 }] => *conn,
            o => panic!("expected a dial of rank 1, got {o:?}"),
        };
        a.on_connected(a_conn, t);
        let mut b = endpoint(1);
        let b_conn = b.on_accepted(t);
        Pair {
            a,
            b,
            a_conn,
            b_conn,
            done: [Vec::new(), Vec::new()],
            direct: Vec::new(),
            t,
        }
    }

    /// Moves frames both ways (with progress calls, which run the retirement sweep) until
    /// neither side has anything to say; returns the frame types rank 0 sent, then rank 1.
    fn pump(&mut self) -> (Vec<FrameType>, Vec<FrameType>) {
        let (mut sent_a, mut sent_b) = (Vec::new(), Vec::new());
        for _ in 0..100 {
            self.t += Duration::from_micros(10);
            self.a.progress(self.t, &Bufs);
            self.b.progress(self.t, &Bufs);
            let (fa, oa) = actions(&mut self.a, &Bufs);
            let (fb, ob) = actions(&mut self.b, &Bufs);
            self.done[0].extend(oa);
            self.done[1].extend(ob);
            if fa.is_empty() && fb.is_empty() {
                return (sent_a, sent_b);
            }
            sent_a.extend(fa.iter().map(|f| f.header.ty));
            sent_b.extend(fb.iter().map(|f| f.header.ty));
            self.deliver(&fa, &fb);
        }
        panic!("the endpoints keep talking: rank 0 sent {sent_a:?}, rank 1 {sent_b:?}");
    }

    fn deliver(&mut self, to_b: &[Frame], to_a: &[Frame]) {
        for f in to_b {
            // Like `wire::feed`, keeping what goes straight into a receive's buffer.
            match self.b.on_header(self.b_conn, f.header, self.t) {
                Sink::Recv(op, _) => {
                    self.direct.push((op, f.payload.clone()));
                    self.b.on_payload(self.b_conn, Landed::Direct, self.t);
                }
                Sink::Owned(_) => {
                    self.b
                        .on_payload(self.b_conn, Landed::Owned(f.payload.clone()), self.t)
                }
                Sink::Discard(_) => self.b.on_payload(self.b_conn, Landed::Discarded, self.t),
                Sink::Done => {}
            }
        }
        for f in to_a {
            feed(&mut self.a, self.a_conn, f, self.t);
        }
    }

    /// The payload rank 1's receive `op` completed with.
    fn received(&self, op: RecvId) -> Option<Vec<u8>> {
        self.done[1].iter().find_map(|x| match x {
            Action::RecvDone { op: o, data, .. } if *o == op => data.clone().or_else(|| {
                self.direct
                    .iter()
                    .find(|(d, _)| *d == op)
                    .map(|(_, v)| v.clone())
            }),
            _ => None,
        })
    }
}

#[test]
fn an_idle_flow_is_forgotten_on_both_sides_and_restarts_at_zero() {
    let key = MsgKey::user(5);
    let mut p = Pair::connect(key);
    p.b.post_recv(RecvId(0), 0, key, p.t).unwrap();
    let (from_a, from_b) = p.pump();
    assert!(from_a.contains(&FrameType::Retire), "{from_a:?}");
    assert!(from_b.contains(&FrameType::RetireOk), "{from_b:?}");
    assert_eq!(p.received(RecvId(0)), Some(vec![0; 3]));
    assert_eq!(p.a.table_sizes().flows, 0, "the sender forgot the flow");
    assert_eq!(p.b.table_sizes().flows, 0, "the receiver forgot the flow");
    assert_eq!(p.a.counters().retired_flows, 1);

    // The tag again: serial 0 on both sides.
    let st = p.a.post_send(SendId(1), 1, key, 3, p.t, &Bufs).unwrap();
    assert_eq!(st, SendStatus::Done);
    let (frames, _) = actions(&mut p.a, &Bufs);
    assert_eq!(frames[0].header.ty, FrameType::Try);
    assert_eq!(frames[0].header.serial, 0);
    assert!(
        !frames[0].borrowed,
        "a 3-byte TRY is copied, not written from the buffer"
    );
    p.deliver(&frames, &[]);
    p.b.post_recv(RecvId(1), 0, key, p.t).unwrap();
    p.pump();
    assert_eq!(p.received(RecvId(1)), Some(vec![1; 3]));
}

#[test]
fn a_flow_with_a_receive_waiting_is_kept_and_a_held_send_takes_the_next_serial() {
    let key = MsgKey::user(6);
    let mut p = Pair::connect(key);
    p.b.post_recv(RecvId(0), 0, key, p.t).unwrap();
    // Rank 1 already waits for the flow's second message.
    p.b.post_recv(RecvId(1), 0, key, p.t).unwrap();
    // Only the handshake and the first message with its answer, then rank 0's sweep.
    let mut retire = None;
    for _ in 0..10 {
        p.t += Duration::from_micros(10);
        p.a.progress(p.t, &Bufs);
        let (fa, oa) = actions(&mut p.a, &Bufs);
        p.done[0].extend(oa);
        if let Some(f) = fa.iter().find(|f| f.header.ty == FrameType::Retire) {
            retire = Some(f.header);
            let rest: Vec<Frame> = fa
                .into_iter()
                .filter(|f| f.header.ty != FrameType::Retire)
                .collect();
            p.deliver(&rest, &[]);
            break;
        }
        p.b.progress(p.t, &Bufs);
        let (fb, ob) = actions(&mut p.b, &Bufs);
        p.done[1].extend(ob);
        p.deliver(&fa, &fb);
    }
    let retire = retire.expect("rank 0 proposed to retire the idle flow");
    assert_eq!(retire.serial, 1);
    // While the proposal travels, rank 0 sends the flow's second message: held.
    let st = p.a.post_send(SendId(2), 1, key, 3, p.t, &Bufs).unwrap();
    assert_eq!(st, SendStatus::Pending);
    let (frames, _) = actions(&mut p.a, &Bufs);
    assert!(frames.is_empty(), "a held send writes nothing");
    // Now the proposal arrives: rank 1 waits for serial 1, so it keeps the flow.
    let frame = wire::Frame {
        header: retire,
        payload: Vec::new(),
        borrowed: false,
    };
    p.deliver(&[frame], &[]);
    let (_, from_b) = p.pump();
    assert!(from_b.contains(&FrameType::RetireNo), "{from_b:?}");
    assert_eq!(p.received(RecvId(0)), Some(vec![0; 3]));
    assert_eq!(
        p.received(RecvId(1)),
        Some(vec![2; 3]),
        "the held send reached the receive that waited for it"
    );
    assert!(p.done[0]
        .iter()
        .any(|x| matches!(x, Action::SendDone(SendId(2)))));
}

/// `tcp.retire_flows_above` becomes the endpoint's bound: the configured value, or 8 per rank
/// of the job if that is more; 0 stays off whatever the size.
#[test]
fn the_configured_bound_grows_with_the_job_and_zero_stays_off() {
    assert_eq!(EndpointConfig::retire_bound(256, 4), 256);
    assert_eq!(EndpointConfig::retire_bound(256, 64), 512);
    assert_eq!(EndpointConfig::retire_bound(8, 4), 32);
    assert_eq!(EndpointConfig::retire_bound(0, 1000), 0);
}
