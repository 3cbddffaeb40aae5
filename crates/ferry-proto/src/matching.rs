//! The receive side of message matching (M2) and the bounded inbox (T1).
//!
//! A message that arrives before the program posted its receive is kept in [`EarlyArrivals`]
//! under its full identifier (source, key, serial). The store has a byte cap and a message cap:
//! when a message does not fit, the caller must refuse it (the TCP backend answers a TRY with
//! "refused" and pulls the message later with GET; seed 000 §4.4), never drop it.

use std::collections::HashMap;

use crate::ident::MsgKey;

/// Full identifier of one arrived message.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Arrival {
    /// Rank that sent the message.
    pub source: usize,
    /// Generation, kind and tag.
    pub key: MsgKey,
    /// Position of the message within its flow.
    pub serial: u64,
}

/// Why an early arrival could not be stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatchError {
    /// Storing the message would exceed the inbox cap; the sender must keep it.
    #[error("inbox full: {len} bytes do not fit ({used} of {cap_bytes} bytes, {count} of {cap_messages} messages in use)")]
    Full {
        /// Length of the refused message.
        len: usize,
        /// Bytes in use.
        used: usize,
        /// Byte cap.
        cap_bytes: usize,
        /// Messages in use.
        count: usize,
        /// Message cap.
        cap_messages: usize,
    },
    /// A message with the same identifier is already stored: the peer sent it twice.
    #[error("duplicate message from rank {0}, serial {1}")]
    Duplicate(usize, u64),
}

/// Bounded store of messages that arrived before their receive was posted.
#[derive(Debug)]
pub struct EarlyArrivals {
    stored: HashMap<Arrival, Vec<u8>>,
    bytes: usize,
    cap_bytes: usize,
    cap_messages: usize,
}

impl EarlyArrivals {
    /// A store that holds at most `cap_messages` messages and `cap_bytes` payload bytes.
    /// A cap of 0 messages still admits nothing; use `usize::MAX` for "unbounded".
    pub fn new(cap_messages: usize, cap_bytes: usize) -> EarlyArrivals {
        EarlyArrivals {
            stored: HashMap::new(),
            bytes: 0,
            cap_bytes,
            cap_messages,
        }
    }

    /// Whether a message of `len` bytes would be accepted now.
    pub fn has_room_for(&self, len: usize) -> bool {
        self.stored.len() < self.cap_messages && self.bytes.saturating_add(len) <= self.cap_bytes
    }

    /// Stores a message, or refuses it when it does not fit or duplicates a stored one.
    pub fn insert(&mut self, arrival: Arrival, payload: Vec<u8>) -> Result<(), MatchError> {
        if self.stored.contains_key(&arrival) {
            return Err(MatchError::Duplicate(arrival.source, arrival.serial));
        }
        if !self.has_room_for(payload.len()) {
            return Err(MatchError::Full {
                len: payload.len(),
                used: self.bytes,
                cap_bytes: self.cap_bytes,
                count: self.stored.len(),
                cap_messages: self.cap_messages,
            });
        }
        self.bytes += payload.len();
        self.stored.insert(arrival, payload);
        Ok(())
    }

    /// Removes and returns the message with exactly this identifier, if it arrived.
    pub fn take(&mut self, arrival: &Arrival) -> Option<Vec<u8>> {
        let payload = self.stored.remove(arrival)?;
        self.bytes -= payload.len();
        Some(payload)
    }

    /// The message with exactly this identifier, left in place.
    pub fn peek(&self, arrival: &Arrival) -> Option<&[u8]> {
        self.stored.get(arrival).map(Vec::as_slice)
    }

    /// Keeps only the messages for which `keep` holds (a retired generation's go).
    pub fn retain(&mut self, mut keep: impl FnMut(&Arrival) -> bool) {
        let mut freed = 0;
        self.stored.retain(|a, p| {
            let k = keep(a);
            if !k {
                freed += p.len();
            }
            k
        });
        self.bytes -= freed;
    }

    /// Whether the message with this identifier is stored.
    pub fn contains(&self, arrival: &Arrival) -> bool {
        self.stored.contains_key(arrival)
    }

    /// Number of stored messages.
    pub fn len(&self) -> usize {
        self.stored.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.stored.is_empty()
    }

    /// Payload bytes stored.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Drops every stored message from `source` (after that rank failed), returning how many.
    pub fn drop_source(&mut self, source: usize) -> usize {
        let before = self.stored.len();
        let mut freed = 0;
        self.stored.retain(|a, p| {
            let keep = a.source != source;
            if !keep {
                freed += p.len();
            }
            keep
        });
        self.bytes -= freed;
        before - self.stored.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arrival(source: usize, serial: u64) -> Arrival {
        Arrival {
            source,
            key: MsgKey::user(7),
            serial,
        }
    }

    #[test]
    fn refuses_when_full_and_keeps_accounting() {
        let mut inbox = EarlyArrivals::new(1, 100);
        inbox.insert(arrival(0, 0), vec![1; 10]).unwrap();
        assert!(matches!(
            inbox.insert(arrival(0, 1), vec![1; 10]),
            Err(MatchError::Full { .. })
        ));
        assert_eq!(inbox.take(&arrival(0, 0)), Some(vec![1; 10]));
        assert_eq!(inbox.bytes(), 0);
        inbox.insert(arrival(0, 1), vec![2; 10]).unwrap();
    }

    #[test]
    fn duplicate_is_an_error() {
        let mut inbox = EarlyArrivals::new(10, 100);
        inbox.insert(arrival(1, 0), vec![]).unwrap();
        assert_eq!(
            inbox.insert(arrival(1, 0), vec![]),
            Err(MatchError::Duplicate(1, 0))
        );
    }

    proptest! {
        /// Whatever order messages of a flow arrive in, taking them by serial returns each
        /// payload exactly once, and the byte count returns to zero.
        #[test]
        fn any_arrival_order_matches_by_serial(order in Just((0u64..20).collect::<Vec<_>>()).prop_shuffle()) {
            let mut inbox = EarlyArrivals::new(usize::MAX, usize::MAX);
            for &s in &order {
                inbox.insert(arrival(3, s), s.to_le_bytes().to_vec()).unwrap();
            }
            for s in 0..20u64 {
                let p = inbox.take(&arrival(3, s)).unwrap();
                prop_assert_eq!(p, s.to_le_bytes().to_vec());
            }
            prop_assert!(inbox.is_empty());
            prop_assert_eq!(inbox.bytes(), 0);
        }
    }
}
