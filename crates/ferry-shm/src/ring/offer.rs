//! The decisions of a split single copy (`transport/split.rs`) as single steps on completion
//! words: none of them blocks, copies or looks at a clock. The transport drives them around
//! its system calls; the seeded simulation (`sim/split.rs`) drives the same functions between
//! its simulated copies, so what it checks is the code that runs.
//!
//! Two descriptors take part. The sender's single-copy descriptor (in its ring to the
//! receiver) stays claimed by the receiver for the whole split, so the sender's buffer stays
//! lent out until the receiver completes it. The receiver's write offer (in its ring to the
//! sender) lends the first part of the receive buffer: the sender claims it before writing and
//! completes it after; the receiver withdraws it when it idles or when its exchange fails.
//! Exactly one of the sender's claim and the receiver's withdrawal wins each offer.

use std::sync::atomic::AtomicU64;

use super::{claim, complete, offer_state, unclaim, withdraw, Claim, Offer, WriteOffer};

/// Where a message of `len` bytes is split: the sender writes bytes `..split`, the receiver
/// reads `split..`. The sender's part ends on a `page` boundary of the message (a power of
/// two), so that neither side's pages are pinned by both. 0: too short to split.
pub(crate) fn split_point(len: usize, page: usize) -> usize {
    (len / 2) & !(page - 1)
}

/// What the receiver does with an offer once it has read its own part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Poll {
    /// The sender wrote its part: the message is whole.
    Written,
    /// Nobody else writes that part (the sender refused the offer or gave it back after a
    /// failed write, or it idled and this call withdrew it): the receiver reads it itself.
    ReadItYourself {
        /// Whether this call withdrew the idle offer.
        withdrawn_here: bool,
    },
    /// The sender is writing, or the offer has not idled long enough: poll again.
    Wait,
    /// The sender died holding the claim (its part may be half written): the receive fails,
    /// naming it.
    WriterDied,
}

/// One poll of offer `seq` (completion word `word`) by the receiver that made it. `idle`: the
/// offer has waited `eager_wait`, so an unclaimed one is withdrawn. `writer_alive` is asked
/// only while the sender holds the claim.
pub(crate) fn poll(
    word: &AtomicU64,
    seq: u64,
    idle: bool,
    writer_alive: impl FnOnce() -> bool,
) -> Poll {
    match offer_state(word, seq) {
        Offer::Done => Poll::Written,
        Offer::Withdrawn => Poll::ReadItYourself {
            withdrawn_here: false,
        },
        // A failed withdrawal lost the race to the sender's claim: the next poll sees it.
        Offer::Open if idle && withdraw(word, seq, false) => Poll::ReadItYourself {
            withdrawn_here: true,
        },
        Offer::Open => Poll::Wait,
        Offer::Claimed if writer_alive() => Poll::Wait,
        Offer::Claimed => Poll::WriterDied,
    }
}

/// Whether a split may be finished by an exchange other than the one that started it (the
/// caller drives several): only once the sender has written its part, so that nothing is left
/// to copy into the other exchange's receive buffer. Anything else waits for that exchange.
pub(crate) fn finish_elsewhere(word: &AtomicU64, seq: u64) -> bool {
    offer_state(word, seq) == Offer::Done
}

/// One step of taking back a descriptor this side lent out (a send's descriptor or a write
/// offer) after its operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TakeBack {
    /// Withdrawn now, marked aborted: the peer finds it so and copies nothing.
    Withdrawn,
    /// Finished or withdrawn before: the peer no longer uses the buffer.
    Settled,
    /// The peer that claimed it died: a dead process copies nothing more.
    PeerDead,
    /// The peer claimed it and is copying: step again (after a pause).
    Wait,
}

/// One step of taking back descriptor `seq` (completion word `word`). `peer_alive` is asked
/// only while the peer holds a claim.
pub(crate) fn take_back(word: &AtomicU64, seq: u64, peer_alive: impl FnOnce() -> bool) -> TakeBack {
    match offer_state(word, seq) {
        Offer::Done | Offer::Withdrawn => TakeBack::Settled,
        Offer::Open if withdraw(word, seq, true) => TakeBack::Withdrawn,
        // Claimed since it was read as open: wait for the copy.
        Offer::Open => TakeBack::Wait,
        Offer::Claimed if peer_alive() => TakeBack::Wait,
        Offer::Claimed => TakeBack::PeerDead,
    }
}

/// What the sender does with a write offer it took out of its ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Serve {
    /// Claimed: write the part, then report it with [`written`].
    Write,
    /// The offer names no send this side still offers: refused (withdrawn), the receiver
    /// reads that part itself.
    Refused,
    /// The receiver withdrew it first (it idled, or the receiver's exchange failed): write
    /// nothing.
    Gone,
}

/// Whether a send whose single-copy descriptor is `desc` (None: not offered by descriptor,
/// or no longer: withdrawn, settled after a failure, finished) and whose payload is `len`
/// bytes can serve write offer `w`.
pub(crate) fn answers(desc: Option<u64>, len: usize, w: &WriteOffer) -> bool {
    desc == Some(w.desc) && w.len <= len as u64
}

/// The sender's step on offer `seq` (completion word `word`); `source`: whether a send of
/// its current exchange answers it ([`answers`]).
pub(crate) fn serve(word: &AtomicU64, seq: u64, source: bool) -> Serve {
    if !source {
        return if withdraw(word, seq, false) {
            Serve::Refused
        } else {
            Serve::Gone
        };
    }
    match claim(word, seq) {
        Claim::Got => Serve::Write,
        Claim::Withdrawn | Claim::Aborted => Serve::Gone,
    }
}

/// The sender finished writing offer `seq`'s part: completed (`ok`), or given back unserved
/// when the write failed, so that the receiver reads that part itself.
pub(crate) fn written(word: &AtomicU64, seq: u64, ok: bool) {
    if ok {
        complete(word, seq);
    } else {
        unclaim(word, seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(desc: u64, len: u64) -> WriteOffer {
        WriteOffer {
            desc,
            addr: 0x1000,
            len,
            seq: 0,
        }
    }

    #[test]
    fn claim_and_withdraw_exclude_each_other() {
        // The sender claims first: the receiver's idle withdrawal and its take-back wait.
        let w = AtomicU64::new(0);
        assert_eq!(serve(&w, 0, true), Serve::Write);
        assert_eq!(poll(&w, 0, true, || true), Poll::Wait);
        assert_eq!(take_back(&w, 0, || true), TakeBack::Wait);
        assert_eq!(take_back(&w, 0, || false), TakeBack::PeerDead);
        assert_eq!(poll(&w, 0, true, || false), Poll::WriterDied);
        written(&w, 0, true);
        assert_eq!(poll(&w, 0, true, || true), Poll::Written);
        assert_eq!(take_back(&w, 0, || true), TakeBack::Settled);

        // The receiver withdraws first: the sender writes nothing.
        let w = AtomicU64::new(0);
        assert_eq!(poll(&w, 0, false, || true), Poll::Wait);
        assert_eq!(
            poll(&w, 0, true, || true),
            Poll::ReadItYourself {
                withdrawn_here: true
            }
        );
        assert_eq!(serve(&w, 0, true), Serve::Gone);
        assert_eq!(serve(&w, 0, false), Serve::Gone);

        // A failed receiver takes it back aborted: the sender writes nothing either.
        let w = AtomicU64::new(0);
        assert_eq!(take_back(&w, 0, || true), TakeBack::Withdrawn);
        assert_eq!(serve(&w, 0, true), Serve::Gone);
    }

    #[test]
    fn a_refused_or_failed_write_leaves_the_part_to_the_receiver() {
        let w = AtomicU64::new(0);
        assert_eq!(serve(&w, 0, false), Serve::Refused);
        assert_eq!(
            poll(&w, 0, false, || true),
            Poll::ReadItYourself {
                withdrawn_here: false
            }
        );
        let w = AtomicU64::new(0);
        assert_eq!(serve(&w, 0, true), Serve::Write);
        written(&w, 0, false);
        assert_eq!(
            poll(&w, 0, false, || true),
            Poll::ReadItYourself {
                withdrawn_here: false
            }
        );
        assert_eq!(take_back(&w, 0, || true), TakeBack::Settled);
    }

    #[test]
    fn only_the_named_live_send_answers() {
        assert!(answers(Some(7), 100, &offer(7, 64)));
        assert!(!answers(Some(7), 32, &offer(7, 64)));
        assert!(!answers(Some(6), 100, &offer(7, 64)));
        assert!(!answers(None, 100, &offer(7, 64)));
        assert_eq!(split_point(1 << 20, 4096), 1 << 19);
        assert_eq!(split_point((1 << 16) + 4095, 4096), 1 << 15);
        assert_eq!(split_point(4096, 4096), 0);
    }
}
