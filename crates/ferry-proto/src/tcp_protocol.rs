//! Decisions of the TCP backend's ADD/TRY/GET protocol that need no I/O (000 §4.4; T1, T4):
//! which request carries a message, and which frames a connection may carry in which
//! direction. The backend (`ferry-tcp`) asks these functions and does the I/O.

use crate::frame::{FrameType, Header};
use crate::ident::{MsgKey, MsgKind};

/// Largest CONTROL message sent with ADD (never refused); larger ones use TRY.
pub const ADD_MAX: usize = 4096;

/// The request that carries a message of `len` bytes with `key`, given the eager limit:
/// small control traffic with ADD (000 §4.4.1), small messages with TRY and their payload
/// (§4.4.2), large ones ANNOUNCEd and pulled by the receiver with GET (§4.4.3).
pub fn request_for(key: MsgKey, len: usize, eager: usize) -> FrameType {
    if key.kind == MsgKind::CONTROL && len <= ADD_MAX {
        FrameType::Add
    } else if len <= eager {
        FrameType::Try
    } else {
        FrameType::Announce
    }
}

/// Why an authenticated peer's frame is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// Handshake frames only open a connection.
    #[error("{0:?} frame on an established connection")]
    Handshake(FrameType),
    /// The frame names ranks that do not match the connection.
    #[error(
        "{ty:?} frame from rank {from} to rank {to} on the connection of ranks {me} and {peer}"
    )]
    WrongRanks {
        /// Frame type.
        ty: FrameType,
        /// Source rank in the frame.
        from: u32,
        /// Destination rank in the frame.
        to: u32,
        /// This rank.
        me: usize,
        /// The connection's peer.
        peer: usize,
    },
    /// ADD is for small control messages only.
    #[error("ADD of {0} bytes, more than {ADD_MAX}")]
    AddTooLarge(u64),
}

/// Checks a frame that rank `me` read from its connection with `peer`. Frames about a message
/// the peer sends (TRY, ADD, ANNOUNCE, DATA, MISS) and connection control must name the peer
/// as source and `me` as destination; answers about a message `me` sent (ACCEPT, REFUSE) and
/// requests for it (GET) name `me` as source and the peer as destination.
pub fn check_route(h: &Header, me: usize, peer: usize) -> Result<(), RouteError> {
    let (me32, peer32) = (me as u32, peer as u32);
    let inbound = h.source == peer32 && h.dest == me32;
    let outbound = h.source == me32 && h.dest == peer32;
    let ok = match h.ty {
        FrameType::Hello | FrameType::HelloAck => return Err(RouteError::Handshake(h.ty)),
        FrameType::Try
        | FrameType::Add
        | FrameType::Announce
        | FrameType::Data
        | FrameType::Miss
        | FrameType::CloseReq
        | FrameType::CloseAck
        | FrameType::CloseNak
        | FrameType::Bye
        | FrameType::Done
        | FrameType::Rejoined
        | FrameType::Retire => inbound,
        FrameType::Accept
        | FrameType::Refuse
        | FrameType::Get
        | FrameType::Consumed
        | FrameType::RetireOk
        | FrameType::RetireNo => outbound,
    };
    if !ok || me32 as usize != me || peer32 as usize != peer {
        return Err(RouteError::WrongRanks {
            ty: h.ty,
            from: h.source,
            to: h.dest,
            me,
            peer,
        });
    }
    if h.ty == FrameType::Add && h.len > ADD_MAX as u64 {
        return Err(RouteError::AddTooLarge(h.len));
    }
    Ok(())
}

/// The ranks an answer of type `ty` to frame `h` carries: answers about a message keep the
/// message's identity (its source and destination), connection control comes from this rank.
pub fn answer(ty: FrameType, h: &Header) -> Header {
    let (source, dest) = match ty {
        FrameType::CloseAck | FrameType::CloseNak => (h.dest, h.source),
        _ => (h.source, h.dest),
    };
    Header::control(ty, h.key, source, dest, h.serial)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn h(ty: FrameType, source: u32, dest: u32) -> Header {
        Header::control(ty, MsgKey::user(1), source, dest, 5)
    }

    #[test]
    fn requests_by_kind_and_size() {
        let ctl = MsgKey::new(0, MsgKind::CONTROL, 0);
        assert_eq!(request_for(ctl, 10, 100), FrameType::Add);
        assert_eq!(request_for(ctl, ADD_MAX + 1, 1 << 20), FrameType::Try);
        assert_eq!(request_for(MsgKey::user(0), 100, 100), FrameType::Try);
        assert_eq!(request_for(MsgKey::user(0), 101, 100), FrameType::Announce);
    }

    #[test]
    fn routes() {
        // Rank 0 talking to rank 3.
        assert!(check_route(&h(FrameType::Try, 3, 0), 0, 3).is_ok());
        assert!(check_route(&h(FrameType::Try, 0, 3), 0, 3).is_err());
        assert!(check_route(&h(FrameType::Try, 2, 0), 0, 3).is_err());
        assert!(check_route(&h(FrameType::Accept, 0, 3), 0, 3).is_ok());
        assert!(check_route(&h(FrameType::Get, 0, 3), 0, 3).is_ok());
        assert!(check_route(&h(FrameType::Get, 3, 0), 0, 3).is_err());
        assert!(check_route(&h(FrameType::Hello, 3, 0), 0, 3).is_err());
        let mut add = h(FrameType::Add, 3, 0);
        add.len = ADD_MAX as u64 + 1;
        assert_eq!(
            check_route(&add, 0, 3),
            Err(RouteError::AddTooLarge(ADD_MAX as u64 + 1))
        );
    }

    proptest! {
        /// Every answer a rank sends passes the peer's route check: the two sides agree on
        /// the direction rules.
        #[test]
        fn answers_route_back(me in 0usize..64, peer in 0usize..64, pick in 0usize..7) {
            prop_assume!(me != peer);
            // (request the peer sent us, our answer)
            let cases = [
                (FrameType::Try, FrameType::Accept),
                (FrameType::Try, FrameType::Refuse),
                (FrameType::Add, FrameType::Accept),
                (FrameType::Data, FrameType::Accept),
                (FrameType::CloseReq, FrameType::CloseAck),
                (FrameType::CloseReq, FrameType::CloseNak),
                (FrameType::Get, FrameType::Miss),
            ];
            let (req, ans) = cases[pick];
            let request = if req == FrameType::Get {
                h(req, me as u32, peer as u32)
            } else {
                h(req, peer as u32, me as u32)
            };
            prop_assert!(check_route(&request, me, peer).is_ok());
            let reply = answer(ans, &request);
            prop_assert!(check_route(&reply, peer, me).is_ok(), "{:?}", reply);
        }
    }
}
