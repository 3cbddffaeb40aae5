//! Encoding and strict decoding of agreement and flood messages (format in the module docs).

use std::collections::BTreeSet;

use super::Decision;

const AGREE_MAGIC: u8 = 0xFA;
const FLOOD_MAGIC: u8 = 0xFB;
const VERSION: u8 = 1;

const KIND_QUERY: u8 = 1;
const KIND_REPORT: u8 = 2;
const KIND_DECIDE: u8 = 3;
const KIND_FLOOD: u8 = 1;

/// Why bytes handed to an agreement or a flood were refused. The message is dropped; the
/// object's state is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FtDecodeError {
    /// The message ends before a field it announces.
    #[error("fault-tolerance message truncated: {need} bytes needed, {have} present")]
    Truncated {
        /// Bytes the message needs so far.
        need: usize,
        /// Bytes it has.
        have: usize,
    },
    /// The first byte names neither an agreement nor a flood message.
    #[error("not a fault-tolerance message (first byte {0:#04x})")]
    BadMagic(u8),
    /// A protocol version this build does not speak.
    #[error("fault-tolerance message version {0}, this build speaks 1")]
    BadVersion(u8),
    /// An unknown message kind.
    #[error("unknown fault-tolerance message kind {0}")]
    BadKind(u8),
    /// Bytes left after the last field.
    #[error("{0} bytes after the end of a fault-tolerance message")]
    TrailingBytes(usize),
    /// A rank list that is not strictly ascending.
    #[error("rank list not strictly ascending at rank {0}")]
    NotAscending(u32),
    /// An agreement message of another instance.
    #[error("agreement message of instance {got} handed to instance {expected}")]
    WrongInstance {
        /// This instance's number.
        expected: u64,
        /// The message's instance number.
        got: u64,
    },
    /// A flood message given to an agreement, or the reverse.
    #[error("a {got} message handed to a {expected}")]
    WrongProtocol {
        /// What the receiving object handles ("agreement" or "flood").
        expected: &'static str,
        /// What the message is.
        got: &'static str,
    },
    /// The sender, or a rank the message names, is not a member.
    #[error("message from rank {from}: rank {rank} is not a member")]
    NotAMember {
        /// The rank the message came from.
        from: u32,
        /// The rank that is not a member.
        rank: u32,
    },
    /// A message this rank can never receive from that sender in that view (a report from a rank
    /// that is not its child, a decision whose failed set is not in the sender's view, a message
    /// from itself): a corrupt or foreign message.
    #[error("fault-tolerance message from rank {from} not expected: {why}")]
    Unexpected {
        /// The rank the message came from.
        from: u32,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// What an agreement message says (after the common header).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AgreeBody {
    /// "I am in this view; report to me in it."
    Query,
    /// The AND of the sender's subtree, none of which had decided.
    Report(u64),
    /// A decision, sent up and down the tree of the view.
    Decide(Decision),
}

/// A decoded agreement message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AgreeMsg {
    pub instance: u64,
    /// The sender's view: members it knows dead, ascending.
    pub view: Vec<u32>,
    pub body: AgreeBody,
}

/// A decoded flood message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FloodMsg<'a> {
    pub origin: u32,
    pub serial: u64,
    pub payload: &'a [u8],
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FtDecodeError> {
        let need = self.at.saturating_add(n);
        let got = self
            .bytes
            .get(self.at..need)
            .ok_or(FtDecodeError::Truncated {
                need,
                have: self.bytes.len(),
            })?;
        self.at = need;
        Ok(got)
    }
    fn u8(&mut self) -> Result<u8, FtDecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, FtDecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, FtDecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// A count-prefixed, strictly ascending rank list. The count is checked against the bytes
    /// present before anything is allocated.
    fn ranks(&mut self) -> Result<Vec<u32>, FtDecodeError> {
        let count = self.u32()? as usize;
        let left = self.bytes.len() - self.at;
        if count > left / 4 {
            return Err(FtDecodeError::Truncated {
                need: self.at.saturating_add(count.saturating_mul(4)),
                have: self.bytes.len(),
            });
        }
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            let r = self.u32()?;
            if out.last().is_some_and(|&last| last >= r) {
                return Err(FtDecodeError::NotAscending(r));
            }
            out.push(r);
        }
        Ok(out)
    }
    fn end(&self) -> Result<(), FtDecodeError> {
        match self.bytes.len() - self.at {
            0 => Ok(()),
            n => Err(FtDecodeError::TrailingBytes(n)),
        }
    }
}

fn header(bytes: &[u8], magic: u8) -> Result<Reader<'_>, FtDecodeError> {
    let mut r = Reader { bytes, at: 0 };
    let m = r.u8()?;
    if m != magic {
        return Err(match (m, magic) {
            (FLOOD_MAGIC, AGREE_MAGIC) => FtDecodeError::WrongProtocol {
                expected: "agreement",
                got: "flood",
            },
            (AGREE_MAGIC, FLOOD_MAGIC) => FtDecodeError::WrongProtocol {
                expected: "flood",
                got: "agreement",
            },
            _ => FtDecodeError::BadMagic(m),
        });
    }
    let v = r.u8()?;
    if v != VERSION {
        return Err(FtDecodeError::BadVersion(v));
    }
    Ok(r)
}

/// The instance number of an agreement message, so a runtime can hand it to the right
/// [`Agreement`](super::Agreement) or keep it until that instance starts. Checks only the header;
/// the instance checks the rest.
pub fn peek_instance(bytes: &[u8]) -> Result<u64, FtDecodeError> {
    let mut r = header(bytes, AGREE_MAGIC)?;
    let kind = r.u8()?;
    if !(KIND_QUERY..=KIND_DECIDE).contains(&kind) {
        return Err(FtDecodeError::BadKind(kind));
    }
    r.u64()
}

fn put_ranks<'a>(out: &mut Vec<u8>, ranks: impl ExactSizeIterator<Item = &'a u32>) {
    // Lists are subsets of a communicator's members, whose count fits a u32.
    out.extend_from_slice(&(ranks.len() as u32).to_le_bytes());
    for r in ranks {
        out.extend_from_slice(&r.to_le_bytes());
    }
}

pub(crate) fn encode_agree(instance: u64, view: &BTreeSet<u32>, body: &AgreeBody) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + 4 * view.len());
    let kind = match body {
        AgreeBody::Query => KIND_QUERY,
        AgreeBody::Report(_) => KIND_REPORT,
        AgreeBody::Decide(_) => KIND_DECIDE,
    };
    out.extend_from_slice(&[AGREE_MAGIC, VERSION, kind]);
    out.extend_from_slice(&instance.to_le_bytes());
    put_ranks(&mut out, view.iter());
    match body {
        AgreeBody::Query => {}
        AgreeBody::Report(v) => out.extend_from_slice(&v.to_le_bytes()),
        AgreeBody::Decide(d) => {
            out.extend_from_slice(&d.value.to_le_bytes());
            put_ranks(&mut out, d.failed.iter());
        }
    }
    out
}

pub(crate) fn decode_agree(bytes: &[u8]) -> Result<AgreeMsg, FtDecodeError> {
    let mut r = header(bytes, AGREE_MAGIC)?;
    let kind = r.u8()?;
    let instance = r.u64()?;
    let view = r.ranks()?;
    let body = match kind {
        KIND_QUERY => AgreeBody::Query,
        KIND_REPORT => AgreeBody::Report(r.u64()?),
        KIND_DECIDE => {
            let value = r.u64()?;
            let failed = r.ranks()?.into_iter().collect();
            AgreeBody::Decide(Decision { value, failed })
        }
        k => return Err(FtDecodeError::BadKind(k)),
    };
    r.end()?;
    Ok(AgreeMsg {
        instance,
        view,
        body,
    })
}

pub(crate) fn encode_flood(origin: u32, serial: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(19 + payload.len());
    out.extend_from_slice(&[FLOOD_MAGIC, VERSION, KIND_FLOOD]);
    out.extend_from_slice(&origin.to_le_bytes());
    out.extend_from_slice(&serial.to_le_bytes());
    // A payload above 4 GiB cannot be described; the caller (Flood::originate) refuses it.
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

pub(crate) fn decode_flood(bytes: &[u8]) -> Result<FloodMsg<'_>, FtDecodeError> {
    let mut r = header(bytes, FLOOD_MAGIC)?;
    let kind = r.u8()?;
    if kind != KIND_FLOOD {
        return Err(FtDecodeError::BadKind(kind));
    }
    let origin = r.u32()?;
    let serial = r.u64()?;
    let len = r.u32()? as usize;
    let payload = r.take(len)?;
    r.end()?;
    Ok(FloodMsg {
        origin,
        serial,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(r: &[u32]) -> BTreeSet<u32> {
        r.iter().copied().collect()
    }

    #[test]
    fn agreement_messages_round_trip() {
        let view = set(&[3, 9]);
        for body in [
            AgreeBody::Query,
            AgreeBody::Report(0xdead_beef),
            AgreeBody::Decide(Decision {
                value: 7,
                failed: set(&[3]),
            }),
        ] {
            let bytes = encode_agree(42, &view, &body);
            assert_eq!(peek_instance(&bytes), Ok(42));
            let m = decode_agree(&bytes).unwrap();
            assert_eq!(m.instance, 42);
            assert_eq!(m.view, vec![3, 9]);
            assert_eq!(m.body, body);
            // Every strict prefix is refused, as is one byte too many.
            for cut in 0..bytes.len() {
                assert!(decode_agree(&bytes[..cut]).is_err(), "prefix {cut}");
            }
            let mut long = bytes.clone();
            long.push(0);
            assert_eq!(decode_agree(&long), Err(FtDecodeError::TrailingBytes(1)));
        }
    }

    #[test]
    fn flood_messages_round_trip() {
        let bytes = encode_flood(5, 11, b"revoke");
        let m = decode_flood(&bytes).unwrap();
        assert_eq!((m.origin, m.serial, m.payload), (5, 11, &b"revoke"[..]));
        for cut in 0..bytes.len() {
            assert!(decode_flood(&bytes[..cut]).is_err(), "prefix {cut}");
        }
        assert!(matches!(
            peek_instance(&bytes),
            Err(FtDecodeError::WrongProtocol { .. })
        ));
        assert!(matches!(
            decode_flood(&encode_agree(1, &set(&[]), &AgreeBody::Query)),
            Err(FtDecodeError::WrongProtocol { .. })
        ));
    }

    #[test]
    fn malformed_rank_lists_are_errors() {
        let mut bytes = encode_agree(1, &set(&[2, 4]), &AgreeBody::Query);
        // Swap the two ranks: 4, 2.
        bytes[15..19].copy_from_slice(&4u32.to_le_bytes());
        bytes[19..23].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(decode_agree(&bytes), Err(FtDecodeError::NotAscending(2)));
        // A count far beyond the bytes present allocates nothing and fails.
        let mut huge = encode_agree(1, &set(&[]), &AgreeBody::Query);
        huge[11..15].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode_agree(&huge),
            Err(FtDecodeError::Truncated { .. })
        ));
        assert_eq!(decode_agree(&[0x00]), Err(FtDecodeError::BadMagic(0)));
        assert_eq!(decode_agree(&[0xFA, 2]), Err(FtDecodeError::BadVersion(2)));
        let mut kind = encode_agree(1, &set(&[]), &AgreeBody::Query);
        kind[2] = 9;
        assert_eq!(decode_agree(&kind), Err(FtDecodeError::BadKind(9)));
        assert_eq!(peek_instance(&kind), Err(FtDecodeError::BadKind(9)));
    }
}
