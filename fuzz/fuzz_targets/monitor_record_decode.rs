//! Feeds arbitrary bytes to the decoder of `ferry monitor` record files
//! (`ferry_monitor::format::decode`), which reads files from disk that may be truncated,
//! damaged or foreign. Nothing may panic, an error names an offset inside the input, and a
//! record that decodes re-encodes to bytes that decode to the same record.
#![no_main]

use ferry_monitor::format::{decode, encode_event, encode_marker, OP_END, OP_GAP};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match decode(data) {
        Err(e) => assert!(e.offset <= data.len(), "{e}"),
        Ok(rec) => {
            assert!(rec.events.len() <= data.len() / 40);
            let mut bytes = rec.header.encode();
            let mut gaps = rec.gaps.iter().peekable();
            for (i, ev) in rec.events.iter().enumerate() {
                while let Some(&&(at, n)) = gaps.peek() {
                    if at != i {
                        break;
                    }
                    encode_marker(OP_GAP, n, 0, &mut bytes);
                    gaps.next();
                }
                encode_event(ev, &mut bytes);
            }
            for &(_, n) in gaps {
                encode_marker(OP_GAP, n, 0, &mut bytes);
            }
            if rec.complete {
                encode_marker(OP_END, rec.dropped(), rec.end_ns, &mut bytes);
            }
            assert_eq!(decode(&bytes).as_ref(), Ok(&rec));
        }
    }
});
