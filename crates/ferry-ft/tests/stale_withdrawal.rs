//! A withdrawal that arrives after its receive was abandoned (tcp answers the fetch of an
//! announced message whose sender gave up on it with a `Revoked` error naming the sender, and
//! may do so while the receiver is already in a recovery's agreement) concerns no operation
//! any more: the agreement must go on, not fail, and the sender must not be taken for dead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_core::mem::MemTransport;
use ferry_core::{Error, ErrorKind, Exchange, MsgKey, MsgKind, Transport};
use ferry_ft::{Communicator, FailureMode, MessageMode, Options};

mod support;

use support::Hooked;

/// Set by rank 0 to have its transport report one late withdrawal by rank 1.
static ARMED: AtomicBool = AtomicBool::new(false);

/// A transport that reports the withdrawal once [`ARMED`] is set (rank 0 only).
fn late_withdrawal(t: MemTransport) -> impl Transport {
    Hooked::new(t, "mem", |t: &MemTransport, _: &Exchange<'_>| {
        (t.rank() == 0 && ARMED.swap(false, Ordering::AcqRel)).then(|| {
            Error::new(ErrorKind::Revoked, "recv")
                .on_rank(0)
                .with_peer(1)
                .with_detail("rank 1 no longer holds message serial 3 it announced")
        })
    })
}

#[test]
fn a_late_withdrawal_neither_fails_an_agreement_nor_kills_its_sender() {
    let res = MemTransport::run(3, |t| {
        let me = t.rank();
        let opts = Options::new(FailureMode::Shrink, MessageMode::Cont);
        let comm = Communicator::new(Box::new(late_withdrawal(t)), opts).unwrap();
        if me == 0 {
            ARMED.store(true, Ordering::Release);
        }
        let agreed = comm.agree(1);
        let failed = comm.failed_members();
        // The sender still talks to rank 0 afterwards.
        let mut v = [1u32];
        let sum = comm
            .allreduce(&mut v, &ferry_coll::ReduceOp::Sum)
            .map(|()| v[0]);
        comm.finish().unwrap();
        (agreed, failed, sum)
    });
    for (r, (agreed, failed, sum)) in res.into_iter().enumerate() {
        assert_eq!(agreed.unwrap(), (1, vec![]), "rank {r}");
        assert!(failed.is_empty(), "rank {r}: {failed:?}");
        assert_eq!(sum.unwrap(), 3, "rank {r}");
    }
}

/// Rank 0's transport reports, once armed, that rank 1 withdrew the message with the key it
/// holds (what tcp's MISS and shm's aborted descriptor say, key included).
fn keyed_withdrawal(t: MemTransport, key: Arc<Mutex<Option<MsgKey>>>) -> impl Transport {
    Hooked::new(t, "mem", move |t: &MemTransport, _: &Exchange<'_>| {
        let armed = key.lock().ok().and_then(|mut k| k.take());
        armed.map(|key| {
            Error::new(ErrorKind::Revoked, "recv")
                .on_rank(t.rank())
                .with_peer(1)
                .with_key(key)
                .with_detail("rank 1 no longer holds a message it announced")
        })
    })
}

/// A withdrawal names the message it took back: it fails the receive of that message and no
/// other. Rank 0 waits for a message from rank 1 (which comes late) while its transport
/// reports a withdrawal by rank 1 of another message (one of a communicator whose receive
/// rank 0 abandoned): the receive goes on and gets its message. Before, any withdrawal by a
/// sender failed every pending receive from it. A withdrawal of the very message the receive
/// waits for still fails it.
#[test]
fn a_withdrawal_fails_only_the_receive_of_the_message_it_names() {
    let res = MemTransport::run(2, |t| {
        let me = t.rank();
        let key = Arc::new(Mutex::new(None));
        let comm = Communicator::new(
            Box::new(keyed_withdrawal(t, key.clone())),
            Options::new(FailureMode::Shrink, MessageMode::Cont),
        )
        .unwrap();
        let other = comm.dup().unwrap();
        let mut results = Vec::new();
        for (round, stale) in [(0u32, true), (1, false)] {
            if me == 0 {
                // The key of this communicator's message with tag 7 (generation 0).
                let wanted = MsgKey::new(ferry_ft::FT_GENERATION_BASE + 1, MsgKind::USER, 7);
                let withdrawn = if stale {
                    MsgKey::new(wanted.generation + 4096, MsgKind::USER, 7)
                } else {
                    wanted
                };
                *key.lock().unwrap() = Some(withdrawn);
                let mut buf = Vec::new();
                results.push(
                    comm.recv(1, 7, &mut buf)
                        .map(|()| buf)
                        .map_err(|e| e.kind()),
                );
            } else {
                std::thread::sleep(Duration::from_millis(50));
                if round == 0 {
                    comm.send(0, 7, b"late").unwrap();
                }
            }
            other.barrier().unwrap();
        }
        drop(other);
        comm.finish().unwrap();
        results
    });
    assert_eq!(
        res[0],
        vec![Ok(b"late".to_vec()), Err(ErrorKind::Revoked)],
        "rank 0"
    );
}
