//! The wire format of messages with exact MPI tags, chosen so that a receiver can post its
//! `MPI_Irecv` before the message is there without knowing its length (a probe, which MPI
//! can only answer from its unexpected-message queue, costs more than the rest of an 8-byte
//! ping-pong together):
//!
//! - a message shorter than [`EAGER_BYTES`] travels as it is, on the transport's main
//!   communicator;
//! - a longer one is split: a first part of exactly [`EAGER_BYTES`] on the main communicator
//!   (the first [`PREFIX`] payload bytes, then the total length as a little-endian `u64`), and
//!   the rest of the payload on a second communicator with the same tag.
//!
//! So every receive posts [`EAGER_BYTES`] on the main communicator: fewer bytes arrive for a
//! short message (MPI reports how many), exactly [`EAGER_BYTES`] announce a split one, and no
//! message ever truncates. First parts of one flow are matched in order (MPI's non-overtaking
//! rule), and so are rests, because each receive asks for its rest in the order its first part
//! was matched. Messages with hashed tags (key header) are not split: they are received after
//! a probe, as their key must be read before they can be delivered.

/// Length of the receive every exact-tag receive posts first, and the length from which a
/// message is split (see the module documentation). Large enough that every message a
/// latency-bound exchange sends (reductions of a few values, headers, halos of small grids)
/// travels in one piece; small enough that its copies cost little next to the large
/// message that follows.
pub const EAGER_BYTES: usize = 1024;

/// Payload bytes carried by a first part.
pub(super) const PREFIX: usize = EAGER_BYTES - 8;

/// Whether a message of `len` bytes with an exact tag is split.
pub(super) fn is_split(len: usize) -> bool {
    len >= EAGER_BYTES
}

/// Fills `buf` (cleared first) with the first part of `data` (which [`is_split`]).
pub(super) fn encode_first(buf: &mut Vec<u8>, data: &[u8]) {
    buf.clear();
    buf.extend_from_slice(&data[..PREFIX]);
    buf.extend_from_slice(&(data.len() as u64).to_le_bytes());
}

/// The total length a first part announces; `None` unless `first` is a first part (exactly
/// [`EAGER_BYTES`] long) announcing a split length whose rest fits one MPI message.
pub(super) fn decode_first(first: &[u8]) -> Option<usize> {
    if first.len() != EAGER_BYTES {
        return None;
    }
    let mut word = [0u8; 8];
    word.copy_from_slice(&first[PREFIX..]);
    let total = usize::try_from(u64::from_le_bytes(word)).ok()?;
    (is_split(total) && total - PREFIX <= i32::MAX as usize).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_parts_round_trip_and_short_messages_are_not_split() {
        assert!(!is_split(EAGER_BYTES - 1));
        assert!(is_split(EAGER_BYTES));
        for len in [EAGER_BYTES, EAGER_BYTES + 1, 1 << 20] {
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut first = Vec::new();
            encode_first(&mut first, &data);
            assert_eq!(first.len(), EAGER_BYTES);
            assert_eq!(&first[..PREFIX], &data[..PREFIX]);
            assert_eq!(decode_first(&first), Some(len));
        }
        // Not a first part: another length, or a total that would not have been split.
        assert_eq!(decode_first(&[0u8; EAGER_BYTES - 1]), None);
        let mut bogus = vec![0u8; EAGER_BYTES];
        bogus[PREFIX..].copy_from_slice(&5u64.to_le_bytes());
        assert_eq!(decode_first(&bogus), None);
        bogus[PREFIX..].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(decode_first(&bogus), None);
    }
}
