//! Drives an agreement instance and a flood endpoint with arbitrary messages and failure notices
//! (ferry_proto::ft): nothing may panic, a refused message changes nothing that matters, every
//! message they send decodes, and a decision names only members.
#![no_main]

use std::collections::BTreeSet;

use ferry_proto::ft::{peek_instance, Agreement, Flood};
use libfuzzer_sys::fuzz_target;

const INSTANCE: u64 = 7;

fuzz_target!(|data: &[u8]| {
    // Layout: me, member count (1..=16), known-dead bitmap, then events:
    // [sender index, length, bytes...] delivers a message; sender 0xFF reports a death instead.
    let [me, count, dead, events @ ..] = data else {
        return;
    };
    let mut rest: &[u8] = events;
    let n = u32::from(*count % 16) + 1;
    let members: Vec<u32> = (0..n).map(|i| i * 2).collect();
    let me = members[usize::from(*me) % members.len()];
    let known: BTreeSet<u32> = members
        .iter()
        .copied()
        .filter(|&r| r < 16 && dead & (1 << (r / 2)) != 0)
        .collect();
    let mut ag = Agreement::new(me, &members, INSTANCE, u64::MAX, &known);
    let mut fl = Flood::new(me, &members);
    fl.originate(b"fuzz");
    while let [from, len, tail @ ..] = rest {
        if *from == 0xFF {
            ag.on_failure(u32::from(*len));
            fl.on_failure(u32::from(*len));
            rest = tail;
            continue;
        }
        let len = usize::from(*len).min(tail.len());
        let (msg, tail) = tail.split_at(len);
        rest = tail;
        let from = u32::from(*from);
        let _ = peek_instance(msg);
        let before = ag.decision().cloned();
        let _ = ag.on_message(from, msg);
        if let Some(d) = before {
            assert_eq!(ag.decision(), Some(&d), "a decision changed");
        }
        if let Ok(Some((origin, _))) = fl.on_message(from, msg) {
            assert!(members.contains(&origin));
        }
        while let Some((to, bytes)) = ag.poll_transmit() {
            assert!(members.contains(&to) && to != me, "sent to {to}");
            assert_eq!(peek_instance(&bytes), Ok(INSTANCE));
        }
        while let Some((to, _)) = fl.poll_transmit() {
            assert!(members.contains(&to) && to != me, "flooded to {to}");
        }
    }
    if let Some(d) = ag.decision() {
        assert!(d.failed.iter().all(|r| members.contains(r) && *r != me));
    }
});
