//! Unit and property tests of the ring layout, entries, descriptors and claim words.

use super::*;
use proptest::prelude::*;

/// A ring in ordinary (64-aligned) heap memory.
struct HeapRing {
    mem: Vec<u64>,
}

impl HeapRing {
    fn new(slots: usize, slot_bytes: usize) -> HeapRing {
        // u64 elements give 8-byte alignment; offset to 64 manually below.
        HeapRing {
            mem: vec![0u64; (RING_CTRL + slots * slot_bytes) / 8 + 16],
        }
    }
    fn ring(&mut self, slots: usize, slot_bytes: usize) -> RingRef {
        let p = self.mem.as_mut_ptr() as *mut u8;
        let off = p.align_offset(64);
        // SAFETY: the buffer is large enough for the aligned ring and outlives its use.
        unsafe { RingRef::new(p.add(off), slots, slot_bytes) }
    }
}

fn entry(i: u64, len: usize) -> Entry {
    Entry {
        typ: T_INLINE,
        key: MsgKey::new(i as u32, MsgKind((i % 4) as u8), (i * 7) as u32),
        serial: i,
        total_len: len as u64,
    }
}

#[test]
fn full_ring_refuses_and_recovers() {
    let mut h = HeapRing::new(4, 128);
    let r = h.ring(4, 128);
    let mut p = Producer::new(r);
    let mut c = Consumer::new(r);
    for i in 0..4 {
        assert!(p.push(&entry(i, 1), &[i as u8]));
    }
    assert!(!p.push(&entry(9, 1), &[9]));
    assert_eq!(c.peek().unwrap().serial, 0);
    c.pop();
    assert!(p.push(&entry(4, 1), &[4]));
    for i in 1..5 {
        let e = c.peek().unwrap();
        assert_eq!(e, entry(i, 1));
        let mut b = [0u8; 1];
        c.read_payload(&mut b);
        assert_eq!(b[0], i as u8);
        c.pop();
    }
    assert!(c.peek().is_none());
}

/// A span's payload runs over the sequence words of its later slots. Payload bytes that
/// look exactly like the sequence numbers those slots expect on the next lap must not be
/// taken for published entries there (the consumer clears them when it hands the span
/// back).
#[test]
fn span_payload_never_reads_as_an_entry_on_the_next_lap() {
    let (slots, sb) = (4, 128);
    let mut h = HeapRing::new(slots, sb);
    let r = h.ring(slots, sb);
    let mut p = Producer::new(r);
    let mut c = Consumer::new(r);
    let cap = p.span_cap(slots);
    let mut payload: Vec<u8> = (0..cap).map(|i| i as u8).collect();
    for k in 1..slots {
        // Slot k's sequence word; on the next lap that slot holds position slots + k,
        // published as slots + k + 1.
        let off = k * sb - CHUNK_HEADER;
        payload[off..off + 8].copy_from_slice(&((slots + k + 1) as u64).to_le_bytes());
    }
    assert!(p.push_span(&entry(0, cap), &payload));
    assert_eq!(p.free_run(), 0, "the span takes the whole ring");
    assert!(!p.push(&entry(9, 1), &[9]));
    assert_eq!(c.peek(), Some(entry(0, cap)));
    assert_eq!(c.span(), slots);
    let mut got = vec![0u8; cap];
    c.read_chunk(&mut got);
    assert_eq!(got, payload);
    c.pop();
    assert!(c.peek().is_none());
    // Next lap: one single-slot entry at position `slots`, then nothing.
    assert!(p.push(&entry(1, 1), &[1]));
    assert_eq!(c.peek(), Some(entry(1, 1)));
    c.pop();
    assert!(
        c.peek().is_none(),
        "payload left in the ring was taken for an entry"
    );
}

/// Spans never wrap past the ring's end: the free run stops there, and a span asked for
/// more than the run is refused whole.
#[test]
fn spans_stop_at_the_ring_end() {
    let (slots, sb) = (8, 128);
    let mut h = HeapRing::new(slots, sb);
    let r = h.ring(slots, sb);
    let mut p = Producer::new(r);
    let mut c = Consumer::new(r);
    for i in 0..6 {
        assert!(p.push(&entry(i, 1), &[i as u8]));
    }
    for _ in 0..6 {
        c.pop();
    }
    // All eight slots are free, but only two lie before the ring's end.
    assert_eq!(p.free_run(), 2);
    assert!(!p.push_span(&entry(6, p.span_cap(3)), &vec![6u8; p.span_cap(3)]));
    let two = p.span_cap(2);
    assert!(p.push_span(&entry(6, two), &vec![6u8; two]));
    assert_eq!(
        p.free_run(),
        6,
        "after the end the run starts again at slot 0"
    );
    assert_eq!(c.span(), 2);
    let mut got = vec![0u8; two];
    c.read_chunk(&mut got);
    assert_eq!(got, vec![6u8; two]);
    c.pop();
    assert!(c.peek().is_none());
}

/// A chunk's payload starts on a cache line of the ring and every chunk capacity is whole
/// lines, so consecutive chunks of one message keep the message's line offsets (both
/// copies of a pipelined message move whole, equally aligned lines).
#[test]
fn chunk_payloads_start_on_a_cache_line() {
    let (slots, sb) = (8, 8256);
    let mut h = HeapRing::new(slots, sb);
    let r = h.ring(slots, sb);
    let mut p = Producer::new(r);
    let mut c = Consumer::new(r);
    for span in 1..=slots {
        assert_eq!(p.span_cap(span) % 64, 0, "span {span}");
        assert!(p.span_cap(span) + CHUNK_HEADER <= span * sb);
    }
    let cap = p.span_cap(3);
    let payload: Vec<u8> = (0..cap).map(|i| (i % 251) as u8 + 1).collect();
    assert!(p.push_span(&entry(0, cap), &payload));
    // The payload's first byte sits at the start of the slot's second cache line.
    let first = r.slot(0);
    assert_eq!(first as usize % 64, 0);
    // SAFETY: the span is published and lies inside the ring's memory.
    let at = unsafe { std::slice::from_raw_parts(first.add(CHUNK_HEADER), 4) };
    assert_eq!(at, &payload[..4]);
    assert_eq!(c.head_cap(), cap);
    let mut got = vec![0u8; cap];
    c.read_chunk(&mut got);
    assert_eq!(got, payload);
    c.pop();
}

#[test]
fn descriptor_round_trip() {
    let d = CmaDesc {
        pid: 77,
        addr: 0xdead_beef_0000,
        len: 1 << 30,
        seq: 5,
        heap: None,
    };
    assert_eq!(decode_cma(&encode_cma(d.pid, d.addr, d.len, d.seq)), d);
    let h = CmaDesc {
        heap: Some(HeapDesc {
            generation: 1 << 60,
            fd: 12,
            ino: 99,
            base: 0xdead_0000_0000,
            len: 1 << 31,
        }),
        ..d
    };
    assert_eq!(decode_cma(&encode_desc(&h)), h);
}

#[test]
fn write_offer_round_trip_and_unclaim() {
    let w = WriteOffer {
        desc: 7,
        addr: 0x7f00_dead_b000,
        len: 2 << 20,
        seq: 1 << 40,
    };
    assert_eq!(decode_write(&encode_write(&w)), w);
    // A claimed offer given back unserved reads as withdrawn to the side that offered it.
    let word = AtomicU64::new(0);
    assert_eq!(claim(&word, 0), Claim::Got);
    assert_eq!(offer_state(&word, 0), Offer::Claimed);
    unclaim(&word, 0);
    assert_eq!(offer_state(&word, 0), Offer::Withdrawn);
}

/// Claim and withdraw race for real on many descriptors at once (two threads): exactly
/// one side wins each, and the receiver learns whether the sender aborted.
#[test]
fn claim_and_withdraw_race_has_one_winner() {
    let n = if cfg!(miri) { 64 } else { 20_000 };
    let words: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
    let start = std::sync::Barrier::new(2);
    let (claims, withdrawals) = std::thread::scope(|s| {
        let r = s.spawn(|| {
            start.wait();
            words.iter().map(|w| claim(w, 0)).collect::<Vec<_>>()
        });
        let w = s.spawn(|| {
            start.wait();
            words
                .iter()
                .enumerate()
                .map(|(i, w)| withdraw(w, 0, i % 2 == 0))
                .collect::<Vec<_>>()
        });
        (r.join().unwrap(), w.join().unwrap())
    });
    let mut both_sides = [0usize; 2];
    for i in 0..n {
        let got = claims[i] == Claim::Got;
        assert!(
            got != withdrawals[i],
            "descriptor {i}: {:?} / {}",
            claims[i],
            withdrawals[i]
        );
        both_sides[got as usize] += 1;
        if !got {
            let want = if i % 2 == 0 {
                Claim::Aborted
            } else {
                Claim::Withdrawn
            };
            assert_eq!(claims[i], want);
        } else {
            assert_eq!(offer_state(&words[i], 0), Offer::Claimed);
            complete(&words[i], 0);
            assert_eq!(offer_state(&words[i], 0), Offer::Done);
        }
    }
    // Each side wins somewhere: the threads really met (not one after the other).
    if !cfg!(miri) {
        eprintln!(
            "claims won {}, withdrawals won {}",
            both_sides[1], both_sides[0]
        );
    }
}

proptest! {
    /// Any sequence of payload sizes goes through a small ring between two threads in
    /// order and intact, whatever the interleaving.
    #[test]
    #[cfg_attr(miri, ignore = "hundreds of proptest cases; too slow under Miri")]
    fn any_sizes_round_trip_across_threads(sizes in proptest::collection::vec(0usize..=88, 0..200)) {
        let slots = 4;
        let slot_bytes = 128;
        let mut h = HeapRing::new(slots, slot_bytes);
        let r = h.ring(slots, slot_bytes);
        let mut p = Producer::new(r);
        let mut c = Consumer::new(r);
        let sizes2 = sizes.clone();
        let got = std::thread::scope(|s| {
            s.spawn(move || {
                for (i, &n) in sizes2.iter().enumerate() {
                    let payload: Vec<u8> = (0..n).map(|k| (i + k) as u8).collect();
                    while !p.push(&entry(i as u64, n), &payload) {
                        std::thread::yield_now();
                    }
                }
            });
            let mut got = Vec::new();
            while got.len() < sizes.len() {
                match c.peek() {
                    Some(e) => {
                        let mut b = vec![0u8; e.total_len as usize];
                        c.read_payload(&mut b);
                        c.pop();
                        got.push((e, b));
                    }
                    None => std::thread::yield_now(),
                }
            }
            got
        });
        for (i, (e, b)) in got.iter().enumerate() {
            prop_assert_eq!(*e, entry(i as u64, sizes[i]));
            let want: Vec<u8> = (0..sizes[i]).map(|k| (i + k) as u8).collect();
            prop_assert_eq!(b, &want);
        }
    }
}
