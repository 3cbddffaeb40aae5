//! The envelope of fault-tolerance control messages.
//!
//! Every control message of a process's fault-tolerant communicators travels on one flow per
//! peer pair (`MsgKind::CONTROL`, the control generation), so that a rank blocked in any
//! operation has exactly one standing receive per peer to keep posted, however many
//! communicators it shares with that peer. The envelope says what the body is and for which
//! communicator (its id) and generation:
//! `[type u8][communicator id u32 LE][generation u32 LE][body]`. LEAVE and ABORT concern the
//! process, not a communicator (id and generation 0). Flood bodies carry a notice once
//! unwrapped by the flood protocol: `[what u8][rank u32 LE]`.

/// Body is a message of the reliable broadcast (`ferry_proto::ft::Flood`).
pub(crate) const FLOOD: u8 = 1;
/// Body is a message of the agreement protocol (`ferry_proto::ft::Agreement`).
pub(crate) const AGREE: u8 = 2;

/// No body: the sender ends in an orderly way and sends no more control messages (the last
/// message of its control flow to this rank), so its end is not a failure.
pub(crate) const LEAVE: u8 = 3;

/// Body `[rank u32 LE]`: the sender ends the job (ABORT mode) because that rank failed; sent
/// straight to every member before it exits, so that they name the same rank.
pub(crate) const ABORT: u8 = 4;

/// Notice: the rank named failed.
pub(crate) const NOTICE_FAILED: u8 = 1;
/// Notice: the generation of the envelope is revoked.
pub(crate) const NOTICE_REVOKED: u8 = 2;

/// Wraps `body` of `kind` for generation `generation` of communicator `comm`.
pub(crate) fn envelope(kind: u8, comm: u32, generation: u32, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(9 + body.len());
    v.push(kind);
    v.extend_from_slice(&comm.to_le_bytes());
    v.extend_from_slice(&generation.to_le_bytes());
    v.extend_from_slice(body);
    v
}

/// An opened envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Envelope<'a> {
    pub kind: u8,
    pub comm: u32,
    pub generation: u32,
    pub body: &'a [u8],
}

/// Splits an envelope into kind, communicator, generation and body; `None` when it is too
/// short or of an unknown kind (a protocol violation the caller reports).
pub(crate) fn open(bytes: &[u8]) -> Option<Envelope<'_>> {
    let (&kind, rest) = bytes.split_first()?;
    if !matches!(kind, FLOOD | AGREE | LEAVE | ABORT) || rest.len() < 8 {
        return None;
    }
    let comm = u32::from_le_bytes(rest[..4].try_into().ok()?);
    let generation = u32::from_le_bytes(rest[4..8].try_into().ok()?);
    Some(Envelope {
        kind,
        comm,
        generation,
        body: &rest[8..],
    })
}

/// A notice as carried by the flood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Notice {
    /// World rank that failed.
    Failed(u32),
    /// The generation the flood belongs to is revoked.
    Revoked,
}

impl Notice {
    pub(crate) fn encode(self) -> Vec<u8> {
        let (what, rank) = match self {
            Notice::Failed(r) => (NOTICE_FAILED, r),
            Notice::Revoked => (NOTICE_REVOKED, 0),
        };
        let mut v = vec![what];
        v.extend_from_slice(&rank.to_le_bytes());
        v
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Notice> {
        if bytes.len() != 5 {
            return None;
        }
        let rank = u32::from_le_bytes(bytes[1..5].try_into().ok()?);
        match bytes[0] {
            NOTICE_FAILED => Some(Notice::Failed(rank)),
            NOTICE_REVOKED => Some(Notice::Revoked),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_and_notices_round_trip_and_garbage_is_refused() {
        let e = envelope(AGREE, 3, 7, b"xyz");
        assert_eq!(
            open(&e),
            Some(Envelope {
                kind: AGREE,
                comm: 3,
                generation: 7,
                body: &b"xyz"[..]
            })
        );
        assert_eq!(open(&[FLOOD, 1, 2]), None);
        assert_eq!(open(&[FLOOD, 1, 0, 0, 0, 2, 0, 0]), None);
        assert_eq!(open(&[9, 0, 0, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(open(&[]), None);
        for n in [Notice::Failed(3), Notice::Revoked] {
            assert_eq!(Notice::decode(&n.encode()), Some(n));
        }
        assert_eq!(Notice::decode(&[1, 0, 0]), None);
        assert_eq!(Notice::decode(&[7, 0, 0, 0, 0]), None);
    }
}
