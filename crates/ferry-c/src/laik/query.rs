//! Questions a program asks about spaces, partitionings and groups (LAIK's `space.h` and
//! `core.h` queries beyond the ones its examples need most).

use std::ffi::{c_char, c_int, CString};
use std::ptr::null_mut;

use ferry_core::Error;
use ferry_data::{LayoutOrder, Range};

use super::core::{LaikGroup, LaikInstance};
use super::custom::LaikTaskRange;
use super::part::{range_n, LaikPartitioning, LaikRange, LaikSpace};
use super::{obj, run};

/// The index range a space covers (valid while the space lives; changed by
/// `laik_change_space_*`).
#[no_mangle]
pub extern "C" fn laik_space_asrange(s: *mut LaikSpace) -> *const LaikRange {
    run("laik_space_asrange", || {
        Ok(obj(s, "laik_space_asrange", "space")?.range_ptr())
    })
}

/// Whether every task holds the whole space in one range.
#[no_mangle]
pub extern "C" fn laik_partitioning_isAll(p: *mut LaikPartitioning) -> bool {
    run("laik_partitioning_isAll", || {
        Ok(obj(p, "laik_partitioning_isAll", "partitioning")?
            .part
            .is_replicated())
    })
}

/// The task holding the whole space in one range when it is the only range, else -1.
#[no_mangle]
pub extern "C" fn laik_partitioning_isSingle(p: *mut LaikPartitioning) -> c_int {
    run("laik_partitioning_isSingle", || {
        let pt = obj(p, "laik_partitioning_isSingle", "partitioning")?;
        Ok(match pt.part.ranges() {
            [only] if only.range == pt.part.space().range() => only.task as c_int,
            _ => -1,
        })
    })
}

/// Whether the ranges of all tasks together cover every index of the space.
#[no_mangle]
pub extern "C" fn laik_partitioning_coversSpace(p: *mut LaikPartitioning) -> bool {
    run("laik_partitioning_coversSpace", || {
        let pt = obj(p, "laik_partitioning_coversSpace", "partitioning")?;
        // Cut every range out of the space; whatever is left is not covered.
        let mut left = vec![pt.part.space().range()];
        for tr in pt.part.ranges() {
            let mut next: Vec<Range> = Vec::with_capacity(left.len());
            for r in &left {
                r.subtract_into(&tr.range, &mut next);
            }
            left = next;
            if left.is_empty() {
                break;
            }
        }
        Ok(left.iter().all(Range::is_empty))
    })
}

/// Whether two partitionings give the same ranges to the same tasks.
#[no_mangle]
pub extern "C" fn laik_partitioning_isEqual(
    p1: *mut LaikPartitioning,
    p2: *mut LaikPartitioning,
) -> bool {
    run("laik_partitioning_isEqual", || {
        let a = &obj(p1, "laik_partitioning_isEqual", "partitioning")?.part;
        let b = &obj(p2, "laik_partitioning_isEqual", "partitioning")?.part;
        let same = a.ranges().len() == b.ranges().len()
            && a.ranges()
                .iter()
                .zip(b.ranges())
                .all(|(x, y)| x.task == y.task && x.range == y.range);
        Ok(same)
    })
}

/// This process's ranges of `p` that go into mapping `map_no`, as indexes of its ranges.
fn map_ranges(
    p: *mut LaikPartitioning,
    map_no: c_int,
    op: &'static str,
) -> ferry_core::Result<Vec<usize>> {
    let pt = obj(p, op, "partitioning")?;
    // SAFETY: the instance outlives every handle.
    let rank = unsafe { &*pt.inst }.rank;
    let lay = ferry_data::Layout::new(&pt.part, rank, &LayoutOrder::Lexicographic)?;
    Ok(lay
        .range_mapping
        .iter()
        .enumerate()
        .filter(|(_, &m)| c_int::try_from(m).is_ok_and(|m| m == map_no))
        .map(|(k, _)| k)
        .collect())
}

/// Number of this process's ranges of `p` in mapping `map_no`.
#[no_mangle]
pub extern "C" fn laik_my_maprangecount(p: *mut LaikPartitioning, map_no: c_int) -> c_int {
    run("laik_my_maprangecount", || {
        Ok(map_ranges(p, map_no, "laik_my_maprangecount")?.len() as c_int)
    })
}

/// This process's range number `n` within mapping `map_no` of `p` (NULL if there is none).
#[no_mangle]
pub extern "C" fn laik_my_maprange(
    p: *mut LaikPartitioning,
    map_no: c_int,
    n: c_int,
) -> *mut LaikTaskRange {
    run("laik_my_maprange", || {
        let op = "laik_my_maprange";
        let ks = map_ranges(p, map_no, op)?;
        let Some(&k) = usize::try_from(n).ok().and_then(|n| ks.get(n)) else {
            return Ok(null_mut());
        };
        Ok(range_n(p, k as c_int, op)?.map_or(null_mut(), |(_, t)| t))
    })
}

/// A new group handle with the members of `g` (LAIK groups are immutable, so this is a
/// second name for the same membership).
#[no_mangle]
pub extern "C" fn laik_clone_group(g: *mut LaikGroup) -> *mut LaikGroup {
    run("laik_clone_group", || {
        let grp = obj(g, "laik_clone_group", "group")?;
        let i = obj(grp.inst, "laik_clone_group", "instance")?;
        Ok(i.new_group(grp.group.clone(), grp.parent))
    })
}

/// The location string of member `id` of `g`: this process's own always, the others' once
/// `laik_sync_location` exchanged them (NULL before, as in LAIK).
#[no_mangle]
pub extern "C" fn laik_group_location(g: *mut LaikGroup, id: c_int) -> *mut c_char {
    // Fields read first: the calls below borrow the instance again.
    let (inst, own, locations, loc_id) = run("laik_group_location", || {
        let grp = obj(g, "laik_group_location", "group")?;
        let loc_id = usize::try_from(id)
            .ok()
            .filter(|&k| k < grp.group.size())
            .map(|k| grp.group.member(k));
        let i = obj(grp.inst, "laik_group_location", "instance")?;
        Ok((grp.inst, id == grp.myid, i.locations, loc_id))
    });
    if own {
        return super::core::laik_mylocation(inst);
    }
    match (locations.is_null(), loc_id) {
        (false, Some(l)) => {
            let key = CString::new(l.to_string()).unwrap_or_default();
            super::kvs::laik_kvs_get(locations, key.as_ptr(), null_mut())
        }
        _ => null_mut(),
    }
}

/// Exchanges the location strings of the current world's processes (collective over the
/// world, through a key-value store of the instance keyed by location id), after which
/// `laik_group_location` names every member of a group.
#[no_mangle]
pub extern "C" fn laik_sync_location(inst: *mut LaikInstance) {
    let (rank, mut store) = run("laik_sync_location", || {
        let i = obj(inst, "laik_sync_location", "instance")?;
        Ok((i.rank, i.locations))
    });
    if store.is_null() {
        // a failure here is fatal inside laik_kvs_new, so the store is valid below
        store = super::kvs::laik_kvs_new(c"ferry-locations".as_ptr(), inst);
        // SAFETY: `inst` was checked by the run above; no other borrow of it is live here.
        unsafe { (*inst).locations = store };
    }
    let mine = super::core::laik_mylocation(inst);
    let key = CString::new(rank.to_string()).unwrap_or_default();
    super::kvs::laik_kvs_sets(store, key.as_ptr(), mine);
    super::kvs::laik_kvs_sync(store);
}

/// LAIK's older name of [`laik_sync_location`]; the exchange is over the current world
/// whatever `g` is, so every process of the world makes the call.
#[no_mangle]
pub extern "C" fn laik_location_synchronize_data(inst: *mut LaikInstance, _g: *mut LaikGroup) {
    laik_sync_location(inst);
}

/// The union of `g1` and `g2` (as LAIK: ordered by location id, here the world rank; `g1`
/// itself if it already holds every member of `g2`). Every process of the world must make
/// the same calls, as for `laik_new_shrinked_group`, since each computes the group on its
/// own.
#[no_mangle]
pub extern "C" fn laik_new_union_group(g1: *mut LaikGroup, g2: *mut LaikGroup) -> *mut LaikGroup {
    run("laik_new_union_group", || {
        let op = "laik_new_union_group";
        let a = obj(g1, op, "group")?;
        let b = obj(g2, op, "group")?;
        if a.inst != b.inst {
            return Err(Error::invalid(op, "groups of two instances"));
        }
        let mut members: Vec<usize> = a.group.members().to_vec();
        members.extend_from_slice(b.group.members());
        members.sort_unstable();
        members.dedup();
        if members.len() == a.group.size() {
            return Ok(g1);
        }
        let i = obj(a.inst, op, "instance")?;
        let world = obj(i.world_group, op, "world")?.group.clone();
        if let Some(&r) = members.iter().find(|&&r| world.index_of(r).is_none()) {
            return Err(Error::invalid(
                op,
                format!("process {r} is not in the current world"),
            ));
        }
        let mut order: Vec<usize> = world.members().to_vec();
        order.sort_unstable();
        if order != world.members() {
            return Err(Error::invalid(
                op,
                "the world's members are not in location order",
            ));
        }
        let removed: Vec<usize> = (0..world.size())
            .filter(|&k| members.binary_search(&world.member(k)).is_err())
            .collect();
        let union = i.data.shrink(&world, &removed)?;
        Ok(i.new_group(union, g1))
    })
}
