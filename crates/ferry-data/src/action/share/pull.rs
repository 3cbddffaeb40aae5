//! The reader's side of an offer (see `share.rs`): checks, and the one copy from the owner's
//! memory.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use ferry_core::{Element, Error, ErrorKind, RegionId, SharedMemory};

use super::{get, PeerMaps, CTRL_HEAD, PLACE_BYTES};
use crate::action::{BoxCopy, Place};
use crate::storage::{HEADER, MAGIC, STATE};
use crate::MAX_DIMS;

/// Highest element offset a place reaches for a box of extents `ext`, or None if the place
/// (from a peer's message) overflows.
fn reach(p: &Place, ext: [usize; MAX_DIMS]) -> Option<usize> {
    let mut last = p.off;
    for (e, st) in ext.iter().zip(p.st) {
        last = last.checked_add(e.checked_sub(1)?.checked_mul(st)?)?;
    }
    Some(last)
}

/// Copies a box from raw memory (a peer's region) into `dst`, row by row.
///
/// # Safety
/// Every element `s.off + x*s.st[0] + y*s.st[1] + z*s.st[2]` of the box must be readable at
/// `src` for the whole call (the caller checked `reach(s, ext) < available`), and `d` must lie
/// inside `dst` (checked when the sequence was bound).
unsafe fn copy_box_raw<T: Element>(
    src: *const T,
    s: Place,
    dst: &mut [T],
    d: Place,
    ext: [usize; MAX_DIMS],
    generic: bool,
) {
    let [ex, ey, ez] = ext;
    for z in 0..ez {
        for y in 0..ey {
            let so = s.off + y * s.st[1] + z * s.st[2];
            let dof = d.off + y * d.st[1] + z * d.st[2];
            if !generic && s.st[0] == 1 && d.st[0] == 1 {
                let row = &mut dst[dof..dof + ex];
                // SAFETY: the caller guarantees `ex` readable elements from `src + so`; the
                // destination row is a slice of our own buffer, not the peer's region.
                unsafe { std::ptr::copy_nonoverlapping(src.add(so), row.as_mut_ptr(), ex) };
            } else {
                for x in 0..ex {
                    // SAFETY: as above, element by element.
                    dst[dof + x * d.st[0]] = unsafe { src.add(so + x * s.st[0]).read() };
                }
            }
        }
    }
}

/// Why an offer could not be taken.
pub(super) enum Refusal {
    /// The region cannot be mapped here: take the values as a message.
    Map(Error),
    /// The offer is not valid: the switch fails.
    Invalid(Error),
}

/// Takes one offer: maps the owner's region, checks it, copies the reader's boxes.
#[allow(clippy::too_many_arguments)]
pub(super) fn pull<'c, T: Element>(
    ctrl: &[u8],
    peer: usize,
    rank: usize,
    mem: &dyn SharedMemory,
    maps: &mut PeerMaps,
    pulls: impl Iterator<Item = &'c BoxCopy>,
    new: &mut [T],
    generic: bool,
) -> std::result::Result<(), Refusal> {
    let invalid = |why: String| {
        Refusal::Invalid(
            Error::new(ErrorKind::Protocol, "switch")
                .on_rank(rank)
                .with_peer(peer)
                .with_detail(why),
        )
    };
    let size = std::mem::size_of::<T>();
    if get(ctrl, 8) != size as u64 {
        return Err(invalid(format!(
            "rank {peer} offers elements of {} bytes, this container's have {size}",
            get(ctrl, 8)
        )));
    }
    let epoch = get(ctrl, 16);
    let id = RegionId([get(ctrl, 24), get(ctrl, 32), get(ctrl, 40), get(ctrl, 48)]);
    let base = get(ctrl, 56);
    let region = maps.get(mem, peer, &id).map_err(Refusal::Map)?;
    let len = region.len();
    let base = usize::try_from(base)
        .ok()
        .filter(|&b| b >= HEADER && b <= len && b.is_multiple_of(std::mem::align_of::<T>().max(8)));
    let Some(base) = base else {
        return Err(invalid(format!(
            "rank {peer} offers a buffer outside its region of {len} bytes"
        )));
    };
    // The offered buffer only: a bad place cannot reach the owner's other buffer either.
    let avail = ((len - base) / size).min(usize::try_from(get(ctrl, 64)).unwrap_or(0));
    // SAFETY: the region has at least HEADER bytes (base >= HEADER and base <= len) and is
    // 64-aligned, so both header words are inside it and aligned; they are only accessed
    // atomically.
    let (magic, state) = unsafe {
        (
            &*region.as_ptr().cast::<AtomicU64>(),
            &*region.as_ptr().add(STATE).cast::<AtomicU64>(),
        )
    };
    if magic.load(Ordering::Relaxed) != MAGIC {
        return Err(invalid(format!("rank {peer}'s region is not a container")));
    }
    let withdrawn = || {
        Refusal::Invalid(
            Error::new(ErrorKind::PeerFailed, "switch")
                .on_rank(rank)
                .with_peer(peer)
                .with_detail(format!(
                    "rank {peer} withdrew its values during the switch (its switch failed)"
                )),
        )
    };
    if state.load(Ordering::Acquire) != epoch {
        return Err(withdrawn());
    }
    // SAFETY: `base` is inside the region and aligned for T (checked above).
    let src = unsafe { region.as_ptr().add(base).cast::<T>().cast_const() };
    for (k, c) in pulls.enumerate() {
        let at = CTRL_HEAD + PLACE_BYTES * k;
        if at + PLACE_BYTES > ctrl.len() {
            return Err(invalid(format!(
                "rank {peer}'s offer lists too few segments"
            )));
        }
        let field = |n: usize| usize::try_from(get(ctrl, at + 8 * n)).unwrap_or(usize::MAX);
        let s = Place {
            off: field(0),
            st: [field(1), field(2), field(3)],
        };
        if reach(&s, c.ext).is_none_or(|last| last >= avail) {
            return Err(invalid(format!(
                "rank {peer}'s segment {k} reaches beyond its buffer of {avail} elements"
            )));
        }
        // SAFETY: every element of the box is below `avail`, inside the region, which this
        // mapping keeps alive; the owner does not write it while the offer stands (checked
        // again below: a withdrawn offer makes the copy an error, never data); `c.dst` was
        // checked against the new layout at bind time.
        unsafe { copy_box_raw(src, s, new, c.dst, c.ext, generic) };
    }
    // The second look: whatever the copy read must predate a withdrawal we do not see.
    fence(Ordering::Acquire);
    if state.load(Ordering::Relaxed) != epoch {
        return Err(withdrawn());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{put, CTRL_MAGIC, OFFER};
    use super::*;
    use crate::action::copy_box;
    use ferry_core::SharedRegion;

    #[test]
    fn places_from_a_peer_are_checked_without_overflow() {
        let p = Place {
            off: 3,
            st: [1, 10, 100],
        };
        assert_eq!(reach(&p, [4, 2, 1]), Some(3 + 3 + 10));
        let huge = Place {
            off: usize::MAX - 1,
            st: [1, 1, 1],
        };
        assert_eq!(reach(&huge, [3, 1, 1]), None);
        assert_eq!(reach(&p, [0, 1, 1]), None, "an empty box reaches nothing");
    }

    /// An owner's region with 64 f64 (value = index) and an offer of one 4 x 2 box at
    /// element 2 (row stride 8), as the reader sees them.
    fn offer(
        epoch: u64,
    ) -> (
        Vec<ferry_core::shared::HeapShared>,
        SharedRegion,
        Vec<u8>,
        BoxCopy,
    ) {
        let ranks = ferry_core::shared::HeapShared::for_job(2);
        let region = ranks[0].alloc(HEADER + 64 * 8).unwrap();
        // SAFETY: the test owns the fresh region; header words are 64-aligned, data follows.
        unsafe {
            (*region.as_ptr().cast::<AtomicU64>()).store(MAGIC, Ordering::Relaxed);
            (*region.as_ptr().add(STATE).cast::<AtomicU64>()).store(epoch, Ordering::Release);
            let data = region.as_ptr().add(HEADER).cast::<f64>();
            for i in 0..64 {
                data.add(i).write(i as f64);
            }
        }
        let mut ctrl = vec![0u8; CTRL_HEAD + PLACE_BYTES];
        put(&mut ctrl, 0, CTRL_MAGIC | OFFER << 32);
        put(&mut ctrl, 8, 8);
        put(&mut ctrl, 16, epoch);
        for (k, w) in region.id().0.iter().enumerate() {
            put(&mut ctrl, 24 + 8 * k, *w);
        }
        put(&mut ctrl, 56, HEADER as u64);
        put(&mut ctrl, 64, 64);
        for (k, v) in [2u64, 1, 8, 64].iter().enumerate() {
            put(&mut ctrl, CTRL_HEAD + 8 * k, *v);
        }
        let dense = Place {
            off: 0,
            st: [1, 4, 8],
        };
        let c = BoxCopy {
            src: dense,
            dst: dense,
            ext: [4, 2, 1],
        };
        (ranks, region, ctrl, c)
    }

    #[test]
    fn a_reader_copies_a_standing_offer_and_refuses_a_withdrawn_one() {
        let (ranks, region, ctrl, c) = offer(7);
        let mut maps = PeerMaps::default();
        let mut new = vec![0f64; 8];
        let res = pull(
            &ctrl,
            0,
            1,
            &ranks[1],
            &mut maps,
            [&c].into_iter(),
            &mut new,
            false,
        );
        assert!(res.is_ok());
        assert_eq!(new, [2.0, 3.0, 4.0, 5.0, 10.0, 11.0, 12.0, 13.0]);
        assert_eq!(maps.len(), 1, "the mapping is kept for the next switch");
        // The owner withdrew (its switch failed, or it dropped the container).
        // SAFETY: the state word of the owner's region, accessed atomically.
        unsafe { (*region.as_ptr().add(STATE).cast::<AtomicU64>()).store(0, Ordering::Release) };
        let res = pull(
            &ctrl,
            0,
            1,
            &ranks[1],
            &mut maps,
            [&c].into_iter(),
            &mut new,
            false,
        );
        match res {
            Err(Refusal::Invalid(e)) => assert!(e.to_string().contains("withdrew"), "{e}"),
            _ => panic!("a withdrawn offer must be refused"),
        }
    }

    #[test]
    fn offers_out_of_bounds_or_unmappable_are_refused() {
        let (ranks, _region, ctrl, c) = offer(3);
        let mut new = vec![0f64; 8];
        let mut maps = PeerMaps::default();
        let mut far = ctrl.clone();
        put(&mut far, CTRL_HEAD, 60);
        let res = pull(
            &far,
            0,
            1,
            &ranks[1],
            &mut maps,
            [&c].into_iter(),
            &mut new,
            false,
        );
        assert!(
            matches!(res, Err(Refusal::Invalid(_))),
            "box beyond the buffer"
        );
        let mut stale = ctrl.clone();
        put(&mut stale, 16, 2);
        let res = pull(
            &stale,
            0,
            1,
            &ranks[1],
            &mut maps,
            [&c].into_iter(),
            &mut new,
            false,
        );
        assert!(matches!(res, Err(Refusal::Invalid(_))), "an older epoch");
        let mut other = ctrl.clone();
        put(&mut other, 32, 999);
        let mut fresh = PeerMaps::default();
        let res = pull(
            &other,
            0,
            1,
            &ranks[1],
            &mut fresh,
            [&c].into_iter(),
            &mut new,
            false,
        );
        assert!(
            matches!(res, Err(Refusal::Map(_))),
            "no such region: copy instead"
        );
        let mut wide = ctrl;
        put(&mut wide, 8, 4);
        let res = pull(
            &wide,
            0,
            1,
            &ranks[1],
            &mut maps,
            [&c].into_iter(),
            &mut new,
            false,
        );
        assert!(
            matches!(res, Err(Refusal::Invalid(_))),
            "another element size"
        );
        assert!(
            new.iter().all(|&v| v == 0.0),
            "nothing copied from a refused offer"
        );
    }

    #[test]
    fn raw_box_copy_matches_the_slice_copy() {
        let src: Vec<u32> = (0..200).collect();
        let s = Place {
            off: 5,
            st: [1, 12, 60],
        };
        let d = Place {
            off: 2,
            st: [1, 7, 40],
        };
        for generic in [false, true] {
            let mut a = vec![0u32; 150];
            let mut b = vec![0u32; 150];
            copy_box(&src, s, &mut a, d, [6, 3, 2], generic);
            // SAFETY: reach(s, ext) = 5 + 5 + 24 + 60 = 94 < 200.
            unsafe { copy_box_raw(src.as_ptr(), s, &mut b, d, [6, 3, 2], generic) };
            assert_eq!(a, b);
            assert!(a.iter().any(|&v| v != 0));
        }
    }
}
