//! Property tests of the TCP wire format (T4, T8): every header survives a round trip, and no
//! byte string can make the decoders panic.

use ferry_proto::frame::{FrameType, Header, HEADER_LEN};
use ferry_proto::handshake::{check_hello, check_hello_ack};
use ferry_proto::{MsgKey, MsgKind};
use proptest::prelude::*;

fn frame_type() -> impl Strategy<Value = FrameType> {
    prop::sample::select(vec![
        FrameType::Hello,
        FrameType::HelloAck,
        FrameType::Add,
        FrameType::Try,
        FrameType::Announce,
        FrameType::Accept,
        FrameType::Refuse,
        FrameType::Get,
        FrameType::Data,
        FrameType::Miss,
        FrameType::CloseReq,
        FrameType::CloseAck,
        FrameType::CloseNak,
        FrameType::Bye,
        FrameType::Done,
        FrameType::Consumed,
        FrameType::Rejoined,
        FrameType::Retire,
        FrameType::RetireOk,
        FrameType::RetireNo,
    ])
}

proptest! {
    #[test]
    fn header_round_trip(ty in frame_type(), generation: u32, kind: u8, tag: u32, source: u32,
                         dest: u32, serial: u64, len in 0u64..4096) {
        let len = if ty.carries_payload() || ty == FrameType::Announce { len } else { 0 };
        let h = Header { ty, key: MsgKey::new(generation, MsgKind(kind), tag), source, dest, serial, len };
        let b = h.encode();
        prop_assert_eq!(b.len(), HEADER_LEN);
        prop_assert_eq!(Header::decode(&b, 4096), Ok(h));
    }

    #[test]
    fn any_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..96), cap: u64) {
        if let Ok(h) = Header::decode(&bytes, cap) {
            // What decodes re-encodes to the same bytes: nothing is silently ignored.
            prop_assert_eq!(&h.encode()[..], &bytes[..HEADER_LEN]);
            let payload = &bytes[HEADER_LEN..];
            let _ = check_hello(&h, payload, b"secret", 0, 4);
            let _ = check_hello_ack(&h, payload, b"secret", 0, 1);
        }
    }

    #[test]
    fn mutated_valid_header_never_panics(pos in 0usize..HEADER_LEN, byte: u8) {
        let h = Header { ty: FrameType::Try, key: MsgKey::user(1), source: 1, dest: 0, serial: 5, len: 8 };
        let mut b = h.encode();
        b[pos] = byte;
        let _ = Header::decode(&b, 1 << 20);
    }
}
