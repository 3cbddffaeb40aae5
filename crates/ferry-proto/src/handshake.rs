//! Connection handshake with a per-job secret (T8).
//!
//! The connector sends `Hello` (its rank as source, the rank it wants as destination, the job
//! secret as payload) and may queue further frames right behind it: nobody waits for the
//! answer, so two ranks that connect to each other at the same moment never deadlock. The
//! acceptor checks the `Hello` and answers `HelloAck` with the secret, so the connector also
//! knows it reached a member of its job; until that answer arrived it accepts no other frame.
//!
//! The secret travels in the clear: it keeps strangers and other jobs out (membership), it does
//! not make the connection confidential.

use crate::frame::{FrameType, Header};
use crate::ident::MsgKey;

/// Why a handshake was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// The first frame was not the expected handshake frame.
    #[error("expected a {expected:?} frame first, got {got:?}")]
    WrongFrame {
        /// Type the handshake needs.
        expected: FrameType,
        /// Type that arrived.
        got: FrameType,
    },
    /// The secret does not match this job's.
    #[error("wrong job secret")]
    WrongSecret,
    /// The peer claims a rank outside the job.
    #[error("source rank {0} out of range 0..{1}")]
    BadSource(u32, usize),
    /// The peer wanted another rank.
    #[error("addressed to rank {0}, this is rank {1}")]
    WrongDestination(u32, usize),
    /// The acceptor answered for another rank than the one dialled.
    #[error("answer from rank {0}, dialled rank {1}")]
    WrongPeer(u32, usize),
}

/// The connector's `Hello` header; the secret is the payload.
pub fn hello(source: usize, dest: usize, secret: &[u8]) -> Header {
    Header {
        ty: FrameType::Hello,
        key: MsgKey::user(0),
        source: source as u32,
        dest: dest as u32,
        serial: 0,
        len: secret.len() as u64,
    }
}

/// The acceptor's `HelloAck` header, sent from `source` back to the connector `dest`.
pub fn hello_ack(source: usize, dest: usize, secret: &[u8]) -> Header {
    Header {
        ty: FrameType::HelloAck,
        ..hello(source, dest, secret)
    }
}

/// Compares secrets in time independent of where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Checks a `Hello` received by rank `me` of a job of `size` ranks; returns the peer's rank.
pub fn check_hello(
    h: &Header,
    payload: &[u8],
    secret: &[u8],
    me: usize,
    size: usize,
) -> Result<usize, HandshakeError> {
    if h.ty != FrameType::Hello {
        return Err(HandshakeError::WrongFrame {
            expected: FrameType::Hello,
            got: h.ty,
        });
    }
    if !same_secret(payload, secret) {
        return Err(HandshakeError::WrongSecret);
    }
    if h.dest as usize != me {
        return Err(HandshakeError::WrongDestination(h.dest, me));
    }
    if h.source as usize >= size || h.source as usize == me {
        return Err(HandshakeError::BadSource(h.source, size));
    }
    Ok(h.source as usize)
}

/// Checks the `HelloAck` a connector `me` received after dialling `peer`.
pub fn check_hello_ack(
    h: &Header,
    payload: &[u8],
    secret: &[u8],
    me: usize,
    peer: usize,
) -> Result<(), HandshakeError> {
    if h.ty != FrameType::HelloAck {
        return Err(HandshakeError::WrongFrame {
            expected: FrameType::HelloAck,
            got: h.ty,
        });
    }
    if !same_secret(payload, secret) {
        return Err(HandshakeError::WrongSecret);
    }
    if h.dest as usize != me {
        return Err(HandshakeError::WrongDestination(h.dest, me));
    }
    if h.source as usize != peer {
        return Err(HandshakeError::WrongPeer(h.source, peer));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_members_only() {
        let h = hello(2, 0, b"s3cret");
        assert_eq!(check_hello(&h, b"s3cret", b"s3cret", 0, 4), Ok(2));
        assert_eq!(
            check_hello(&h, b"guess!", b"s3cret", 0, 4),
            Err(HandshakeError::WrongSecret)
        );
        assert_eq!(
            check_hello(&h, b"s3cret", b"s3cret", 1, 4),
            Err(HandshakeError::WrongDestination(0, 1))
        );
        assert_eq!(
            check_hello(&hello(9, 0, b""), b"", b"", 0, 4),
            Err(HandshakeError::BadSource(9, 4))
        );
        let a = hello_ack(0, 2, b"s3cret");
        assert_eq!(check_hello_ack(&a, b"s3cret", b"s3cret", 2, 0), Ok(()));
        assert_eq!(
            check_hello_ack(&a, b"s3cret", b"s3cret", 2, 1),
            Err(HandshakeError::WrongPeer(0, 1))
        );
        assert!(check_hello(&a, b"s3cret", b"s3cret", 2, 4).is_err());
    }
}
