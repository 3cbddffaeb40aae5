//! Wire format of the TCP backend (000 §4.4, §4.5.4; T1, T4, T8): one fixed 40-byte
//! little-endian header, optionally followed by a payload.
//!
//! ```text
//! offset size field
//!  0     2    magic  "FR" (0x46 0x52)
//!  2     1    version (1)
//!  3     1    frame type (FrameType)
//!  4     1    message kind (MsgKind)
//!  5     3    reserved, must be zero
//!  8     4    communicator generation
//! 12     4    source rank
//! 16     4    destination rank
//! 20     4    tag
//! 24     8    serial within the flow
//! 32     8    payload length (TRY/ADD/DATA/HELLO: bytes that follow; ANNOUNCE: announced length)
//! ```
//!
//! The decoder is strict: a wrong magic or version, an unknown type, non-zero reserved bytes, a
//! payload on a frame type that carries none, or a length above the configured cap is an error,
//! never a panic. A peer that sends such a frame is dropped by the backend.

use crate::ident::{MsgKey, MsgKind};

/// Length of every frame header in bytes.
pub const HEADER_LEN: usize = 40;
/// First two bytes of every frame.
pub const MAGIC: [u8; 2] = *b"FR";
/// Protocol version spoken by this build.
pub const VERSION: u8 = 1;
/// Largest handshake payload (job secret) accepted, independent of the payload cap.
pub const MAX_HELLO_LEN: u64 = 4096;

/// What a frame asks for or answers (the request types of 000 §4.4 plus connection control).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    /// Connector's handshake: source and destination rank, payload = job secret (T8).
    Hello = 1,
    /// Acceptor's answer to a valid `Hello`: payload = job secret, so both sides authenticate.
    HelloAck = 2,
    /// A message the receiver must accept, whatever its inbox holds (000 §4.4.1); small control
    /// traffic only. Answered by `Accept`.
    Add = 3,
    /// A message the receiver may refuse when its inbox is full (000 §4.4.2). Answered by
    /// `Accept` or `Refuse`; a refused message stays in the sender's outbox until fetched by GET.
    Try = 4,
    /// A large message announced without its payload (rendezvous); the receiver fetches it with
    /// `Get` when its receive is posted, straight into the receive buffer (T4).
    Announce = 5,
    /// The receiver kept the message of this identifier; the sender may forget it.
    Accept = 6,
    /// The receiver had no room; it will fetch the message with `Get` later.
    Refuse = 7,
    /// Request for the message with this identifier from the sender's outbox (000 §4.4.3).
    Get = 8,
    /// Answer to `Get`: the payload follows.
    Data = 9,
    /// Answer to `Get`: the message is not in the outbox.
    Miss = 10,
    /// Asks to close an idle connection (cache eviction, T2); answered by `CloseAck`/`CloseNak`.
    CloseReq = 11,
    /// The connection is idle on this side too; nothing more follows on it.
    CloseAck = 12,
    /// This side still has requests outstanding on the connection; it stays open.
    CloseNak = 13,
    /// This rank finished (orderly shutdown); nothing more follows on the connection.
    Bye = 14,
    /// Retained messages (T6): this rank's program is done and will never ask the receiver
    /// for a message again, so the receiver may drop what it retains for it and end.
    Done = 15,
    /// Retained messages (T6): the receiver marked a checkpoint after consuming the messages
    /// of this flow up to (not including) `serial`; the sender drops its retained copies.
    Consumed = 16,
    /// Retained messages (T6), after every handshake: whether the sender knew an earlier
    /// incarnation of the receiver's rank (serial 0: the receiver is a restart) or not
    /// (serial 1).
    Rejoined = 17,
    /// The sender of point-to-point flow (`source` -> `dest`, `key`) proposes to forget it:
    /// `serial` is its next serial, nothing of the flow is in its outbox, and it sends nothing
    /// more of the flow until the answer (bounded state: tags used once).
    Retire = 18,
    /// Answer to `Retire`: the receiver took every message below `serial` and forgot the
    /// flow; both sides start it again at serial 0.
    RetireOk = 19,
    /// Answer to `Retire`: the receiver still has receives or messages of the flow, or took
    /// fewer messages; both sides keep counting.
    RetireNo = 20,
}

impl FrameType {
    fn from_u8(v: u8) -> Option<FrameType> {
        use FrameType::*;
        Some(match v {
            1 => Hello,
            2 => HelloAck,
            3 => Add,
            4 => Try,
            5 => Announce,
            6 => Accept,
            7 => Refuse,
            8 => Get,
            9 => Data,
            10 => Miss,
            11 => CloseReq,
            12 => CloseAck,
            13 => CloseNak,
            14 => Bye,
            15 => Done,
            16 => Consumed,
            17 => Rejoined,
            18 => Retire,
            19 => RetireOk,
            20 => RetireNo,
            _ => return None,
        })
    }

    /// Whether `len` counts payload bytes that follow the header.
    pub fn carries_payload(self) -> bool {
        matches!(
            self,
            FrameType::Hello
                | FrameType::HelloAck
                | FrameType::Add
                | FrameType::Try
                | FrameType::Data
        )
    }
}

/// A decoded frame header.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// Request or answer type.
    pub ty: FrameType,
    /// Generation, kind and tag of the message's flow.
    pub key: MsgKey,
    /// Sending rank of the message (not necessarily of the frame: a `Get` names the message's
    /// source, which is the frame's receiver).
    pub source: u32,
    /// Receiving rank of the message.
    pub dest: u32,
    /// Serial of the message within its flow (M2).
    pub serial: u64,
    /// Payload length (or announced length for `Announce`; 0 for other payload-less types).
    pub len: u64,
}

/// Why bytes are not a valid frame header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer than [`HEADER_LEN`] bytes.
    #[error("truncated header: {0} of {HEADER_LEN} bytes")]
    Truncated(usize),
    /// The first two bytes are not `FR`.
    #[error("bad magic {0:02x?}, not a ferry frame")]
    BadMagic([u8; 2]),
    /// Another protocol version.
    #[error("protocol version {0}, this build speaks {VERSION}")]
    BadVersion(u8),
    /// Unknown frame type.
    #[error("unknown frame type {0}")]
    BadType(u8),
    /// Reserved bytes are not zero.
    #[error("reserved header bytes are not zero")]
    Reserved,
    /// A frame type without payload has a non-zero length.
    #[error("{0:?} frame with length {1}, expected 0")]
    UnexpectedLength(FrameType, u64),
    /// The payload exceeds the cap.
    #[error("{0:?} frame of {1} bytes exceeds the cap of {2} bytes")]
    TooLong(FrameType, u64, u64),
}

impl Header {
    /// A header without payload.
    pub fn control(ty: FrameType, key: MsgKey, source: u32, dest: u32, serial: u64) -> Header {
        Header {
            ty,
            key,
            source,
            dest,
            serial,
            len: 0,
        }
    }

    /// Encodes into the fixed-size wire form.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = VERSION;
        b[3] = self.ty as u8;
        b[4] = self.key.kind.0;
        b[8..12].copy_from_slice(&self.key.generation.to_le_bytes());
        b[12..16].copy_from_slice(&self.source.to_le_bytes());
        b[16..20].copy_from_slice(&self.dest.to_le_bytes());
        b[20..24].copy_from_slice(&self.key.tag.to_le_bytes());
        b[24..32].copy_from_slice(&self.serial.to_le_bytes());
        b[32..40].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Decodes and validates a header; `max_payload` caps the length of data-carrying and
    /// announced frames (handshakes are capped at [`MAX_HELLO_LEN`]).
    pub fn decode(bytes: &[u8], max_payload: u64) -> Result<Header, FrameError> {
        let b: &[u8; HEADER_LEN] = bytes
            .get(..HEADER_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(FrameError::Truncated(bytes.len()))?;
        if b[0..2] != MAGIC {
            return Err(FrameError::BadMagic([b[0], b[1]]));
        }
        if b[2] != VERSION {
            return Err(FrameError::BadVersion(b[2]));
        }
        let ty = FrameType::from_u8(b[3]).ok_or(FrameError::BadType(b[3]))?;
        if b[5..8] != [0, 0, 0] {
            return Err(FrameError::Reserved);
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let len = u64_at(32);
        let cap = match ty {
            FrameType::Hello | FrameType::HelloAck => MAX_HELLO_LEN,
            FrameType::Add | FrameType::Try | FrameType::Data | FrameType::Announce => max_payload,
            _ => 0,
        };
        if len > cap {
            return Err(if cap == 0 {
                FrameError::UnexpectedLength(ty, len)
            } else {
                FrameError::TooLong(ty, len, cap)
            });
        }
        Ok(Header {
            ty,
            key: MsgKey::new(u32_at(8), MsgKind(b[4]), u32_at(20)),
            source: u32_at(12),
            dest: u32_at(16),
            serial: u64_at(24),
            len,
        })
    }

    /// Bytes of payload that follow this header on the wire.
    pub fn payload_len(&self) -> u64 {
        if self.ty.carries_payload() {
            self.len
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            ty: FrameType::Try,
            key: MsgKey::new(7, MsgKind::COLLECTIVE, 0xdead_beef),
            source: 3,
            dest: 12,
            serial: 1 << 40,
            len: 100,
        }
    }

    #[test]
    fn round_trip_and_layout() {
        let h = sample();
        let b = h.encode();
        assert_eq!(&b[0..4], &[b'F', b'R', VERSION, 4]);
        assert_eq!(&b[32..40], &100u64.to_le_bytes());
        assert_eq!(Header::decode(&b, 1000), Ok(h));
    }

    #[test]
    fn strict_checks() {
        let b = sample().encode();
        assert_eq!(
            Header::decode(&b[..39], 1000),
            Err(FrameError::Truncated(39))
        );
        assert!(matches!(
            Header::decode(&b, 99),
            Err(FrameError::TooLong(FrameType::Try, 100, 99))
        ));
        let mut bad = b;
        bad[0] = b'X';
        assert!(matches!(
            Header::decode(&bad, 1000),
            Err(FrameError::BadMagic(_))
        ));
        let mut bad = b;
        bad[3] = 99;
        assert_eq!(Header::decode(&bad, 1000), Err(FrameError::BadType(99)));
        let mut bad = b;
        bad[6] = 1;
        assert_eq!(Header::decode(&bad, 1000), Err(FrameError::Reserved));
        let mut ack = sample();
        ack.ty = FrameType::Accept;
        assert!(matches!(
            Header::decode(&ack.encode(), 1000),
            Err(FrameError::UnexpectedLength(FrameType::Accept, 100))
        ));
        let mut hello = sample();
        hello.ty = FrameType::Hello;
        hello.len = MAX_HELLO_LEN + 1;
        assert!(Header::decode(&hello.encode(), u64::MAX).is_err());
    }
}
