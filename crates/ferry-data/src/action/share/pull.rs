//! The reader's side of an offer (see `share.rs`): checks, and the one copy from the owner's
//! memory.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use ferry_core::{Element, Error, ErrorKind, RegionId, SharedMemory};

use super::raw::{reach, Bufs};
use super::{get, protocol, PeerMaps, CTRL_HEAD, PLACE_BYTES};
use crate::action::{BoxCopy, Place};
use crate::storage::{HEADER, MAGIC, STATE};

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
    new: &mut Bufs<'_, T>,
    generic: bool,
) -> std::result::Result<(), Refusal> {
    let invalid = |why: String| Refusal::Invalid(protocol(rank, peer, why));
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
        // SAFETY: `avail` elements from `src` are inside the region, which this mapping keeps
        // alive; the owner does not write them while the offer stands (checked again below:
        // a withdrawn offer makes the copy an error, never data), and this rank never writes
        // a peer's region.
        if !unsafe { new.pull(src, avail, s, c, generic) } {
            return Err(invalid(format!(
                "segment {k} from rank {peer} does not fit this rank's new layout"
            )));
        }
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
    use ferry_core::shared::HeapShared;
    use ferry_core::SharedRegion;

    /// An owner's region with 64 f64 (value = index) and an offer of one 4 x 2 box at
    /// element 2 (row stride 8), as the reader sees them.
    fn offer(epoch: u64) -> (Vec<HeapShared>, SharedRegion, Vec<u8>, BoxCopy) {
        let ranks = HeapShared::for_job(2);
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

    /// Rank 1 takes `ctrl` from rank 0 into `new` (a separate old buffer, never read).
    fn take(
        ctrl: &[u8],
        ranks: &[HeapShared],
        maps: &mut PeerMaps,
        c: &BoxCopy,
        new: &mut [f64],
    ) -> std::result::Result<(), Refusal> {
        let old = [0f64; 0];
        let mut bufs = Bufs::two(&old, new);
        pull(
            ctrl,
            0,
            1,
            &ranks[1],
            maps,
            [c].into_iter(),
            &mut bufs,
            false,
        )
    }

    #[test]
    fn a_reader_copies_a_standing_offer_and_refuses_a_withdrawn_one() {
        let (ranks, region, ctrl, c) = offer(7);
        let mut maps = PeerMaps::default();
        let mut new = vec![0f64; 8];
        assert!(take(&ctrl, &ranks, &mut maps, &c, &mut new).is_ok());
        assert_eq!(new, [2.0, 3.0, 4.0, 5.0, 10.0, 11.0, 12.0, 13.0]);
        assert_eq!(maps.len(), 1, "the mapping is kept for the next switch");
        // The owner withdrew (its switch failed, or it dropped the container).
        // SAFETY: the state word of the owner's region, accessed atomically.
        unsafe { (*region.as_ptr().add(STATE).cast::<AtomicU64>()).store(0, Ordering::Release) };
        match take(&ctrl, &ranks, &mut maps, &c, &mut new) {
            Err(Refusal::Invalid(e)) => assert!(e.to_string().contains("withdrew"), "{e}"),
            _ => panic!("a withdrawn offer must be refused"),
        }
    }

    #[test]
    fn offers_out_of_bounds_or_unmappable_are_refused() {
        let (ranks, _region, ctrl, c) = offer(3);
        let mut new = vec![0f64; 8];
        let mut maps = PeerMaps::default();
        let refused = |field: usize, value: u64, maps: &mut PeerMaps, new: &mut [f64]| {
            let mut bad = ctrl.clone();
            put(&mut bad, field, value);
            take(&bad, &ranks, maps, &c, new)
        };
        let res = refused(CTRL_HEAD, 60, &mut maps, &mut new);
        assert!(
            matches!(res, Err(Refusal::Invalid(_))),
            "box beyond the buffer"
        );
        let res = refused(16, 2, &mut maps, &mut new);
        assert!(matches!(res, Err(Refusal::Invalid(_))), "an older epoch");
        let res = refused(32, 999, &mut PeerMaps::default(), &mut new);
        assert!(
            matches!(res, Err(Refusal::Map(_))),
            "no such region: copy instead"
        );
        let res = refused(8, 4, &mut maps, &mut new);
        assert!(
            matches!(res, Err(Refusal::Invalid(_))),
            "another element size"
        );
        let mut short = vec![0f64; 7];
        let res = take(&ctrl, &ranks, &mut maps, &c, &mut short);
        assert!(
            matches!(res, Err(Refusal::Invalid(_))),
            "a box beyond this rank's buffer is refused, not a panic"
        );
        assert!(
            new.iter().chain(&short).all(|&v| v == 0.0),
            "nothing copied from a refused offer"
        );
    }
}
