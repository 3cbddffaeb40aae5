//! Range lists, range filters and partitionings whose partitioner runs later (LAIK's
//! `Laik_RangeList`, `Laik_RangeFilter`, `laik_run_partitioner`,
//! `laik_new_empty_partitioning` and `laik_partitioning_store_*`).
//!
//! A filter in LAIK saves memory by keeping only the ranges a process needs. Partitionings
//! here always hold every task's ranges (the data layer plans transitions from them), so the
//! `store_*` variants differ only in what LAIK would let the program query; range lists
//! returned by `laik_run_partitioner` and `laik_partitioning_*ranges` hold exactly the ranges
//! the filter keeps.

use std::ffi::{c_int, c_uint, c_void};
use std::ptr::null_mut;

use ferry_core::{Error, Result};
use ferry_data::Range;

use super::core::LaikGroup;
use super::custom::{range_of, LaikPartitionerParams, LaikTaskRange};
use super::part::{compute, LaikIndex, LaikPartitioner, LaikPartitioning, LaikRange, LaikSpace};
use super::{obj, run};

/// `Laik_RangeList`: ranges of a space assigned to task ids below `ntasks`; appended ranges
/// become readable once the list is frozen.
pub struct LaikRangeList {
    space: *mut LaikSpace,
    ntasks: usize,
    pending: Vec<(usize, Range, c_int, *mut c_void)>,
    ranges: Vec<LaikTaskRange>,
    frozen: bool,
}

impl LaikRangeList {
    /// The list's task ranges (empty until it is frozen).
    pub(crate) fn task_ranges(&self) -> &[LaikTaskRange] {
        &self.ranges
    }
}

/// `Laik_RangeFilter`: keeps the ranges of one process and/or the ranges intersecting given
/// index ranges.
pub struct LaikRangeFilter {
    my_task: Option<c_int>,
    idx: Vec<Range>,
}

impl LaikRangeFilter {
    fn keeps(&self, task: c_int, r: &Range) -> bool {
        self.my_task.is_none_or(|t| t == task)
            && (self.idx.is_empty() || self.idx.iter().any(|f| f.intersect(r).is_some()))
    }
}

fn dims(space: *mut LaikSpace) -> usize {
    // SAFETY: spaces live until the process ends.
    unsafe { space.as_ref() }.map_or(1, |s| s.space.dims())
}

fn c_range(space: *mut LaikSpace, r: &Range) -> LaikRange {
    LaikRange {
        space,
        from: LaikIndex { i: r.from() },
        to: LaikIndex { i: r.to() },
    }
}

impl LaikRangeList {
    fn new(space: *mut LaikSpace, ntasks: usize) -> Self {
        LaikRangeList {
            space,
            ntasks,
            pending: Vec::new(),
            ranges: Vec::new(),
            frozen: false,
        }
    }

    /// A frozen list of the task ranges of `src` that `keep` accepts (mapping numbers as in
    /// `src`).
    fn from_task_ranges(
        space: *mut LaikSpace,
        ntasks: usize,
        src: &[LaikTaskRange],
        keep: impl Fn(&LaikTaskRange) -> bool,
    ) -> Self {
        let ranges = src
            .iter()
            .filter(|t| keep(t))
            .map(|t| LaikTaskRange::new(*t.range(), t.task(), t.tag(), null_mut(), t.map_no()))
            .collect();
        LaikRangeList {
            space,
            ntasks,
            pending: Vec::new(),
            ranges,
            frozen: true,
        }
    }

    fn append(&mut self, tid: c_int, r: Range, tag: c_int, data: *mut c_void) -> Result<()> {
        let op = "laik_rangelist_append";
        if self.frozen {
            return Err(Error::invalid(op, "the range list is frozen"));
        }
        let t = usize::try_from(tid)
            .ok()
            .filter(|&t| t < self.ntasks)
            .ok_or_else(|| {
                Error::invalid(
                    op,
                    format!("task {tid} outside a list for {} tasks", self.ntasks),
                )
            })?;
        self.pending.push((t, r, tag, data));
        Ok(())
    }

    /// Sorts by task, tag and start; with `merge`, a task's overlapping or touching 1d ranges
    /// of one tag become one. Ranges of one positive tag share a mapping, tag 0 ranges get one
    /// each (LAIK's rule, also the data layer's).
    fn freeze(&mut self, merge: bool) {
        let mut items = std::mem::take(&mut self.pending);
        items.sort_by_key(|(t, r, tag, _)| (*t, *tag, r.from()));
        if merge && dims(self.space) == 1 {
            let mut merged: Vec<(usize, Range, c_int, *mut c_void)> = Vec::new();
            for it in items {
                match merged.last_mut() {
                    Some(last)
                        if last.0 == it.0 && last.2 == it.2 && it.1.from()[0] <= last.1.to()[0] =>
                    {
                        let hi = last.1.to()[0].max(it.1.to()[0]);
                        last.1 = Range::new1(last.1.from()[0], hi);
                    }
                    _ => merged.push(it),
                }
            }
            items = merged;
        }
        let mut task = None;
        let mut maps = 0;
        let mut tags: Vec<(c_int, c_int)> = Vec::new();
        for (t, r, tag, data) in items {
            if task != Some(t) {
                task = Some(t);
                maps = 0;
                tags.clear();
            }
            let known = (tag > 0)
                .then(|| tags.iter().find(|(g, _)| *g == tag).map(|&(_, m)| m))
                .flatten();
            let map_no = known.unwrap_or_else(|| {
                if tag > 0 {
                    tags.push((tag, maps));
                }
                maps += 1;
                maps - 1
            });
            self.ranges.push(LaikTaskRange::new(
                c_range(self.space, &r),
                t as c_int,
                tag,
                data,
                map_no,
            ));
        }
        self.frozen = true;
    }

    fn frozen(&self, op: &'static str) -> Result<&Self> {
        if !self.frozen {
            return Err(Error::invalid(
                op,
                "the range list is not frozen (laik_rangelist_freeze)",
            ));
        }
        Ok(self)
    }

    fn of_task(&self, tid: c_int) -> impl Iterator<Item = (usize, &LaikTaskRange)> {
        self.ranges
            .iter()
            .enumerate()
            .filter(move |(_, t)| t.task() == tid)
    }

    fn ferry_ranges(&self) -> Vec<Range> {
        let d = dims(self.space);
        self.ranges
            .iter()
            .filter_map(|t| range_of(t.range(), d).ok())
            .collect()
    }

    fn whole(&self) -> Option<Range> {
        // SAFETY: spaces live until the process ends.
        unsafe { self.space.as_ref() }.map(|s| s.space.range())
    }

    fn covers_space(&self) -> bool {
        let Some(whole) = self.whole() else {
            return false;
        };
        let mut left = vec![whole];
        for r in self.ferry_ranges() {
            let mut next = Vec::new();
            for l in &left {
                l.subtract_into(&r, &mut next);
            }
            left = next;
        }
        left.iter().all(|r| r.is_empty())
    }
}

fn list<'a>(l: *mut LaikRangeList, op: &'static str) -> Result<&'a mut LaikRangeList> {
    obj(l, op, "range list")
}

fn frozen_list<'a>(l: *mut LaikRangeList, op: &'static str) -> Result<&'a mut LaikRangeList> {
    let rl = list(l, op)?;
    rl.frozen(op)?;
    Ok(rl)
}

/// A list for ranges of `space` given to task ids below `max_tid`.
#[no_mangle]
pub extern "C" fn laik_rangelist_new(space: *mut LaikSpace, max_tid: c_uint) -> *mut LaikRangeList {
    run("laik_rangelist_new", || {
        obj(space, "laik_rangelist_new", "space")?.sized("laik_rangelist_new")?;
        Ok(Box::into_raw(Box::new(LaikRangeList::new(
            space,
            max_tid as usize,
        ))))
    })
}

#[no_mangle]
pub extern "C" fn laik_rangelist_free(l: *mut LaikRangeList) {
    if !l.is_null() {
        // SAFETY: from laik_rangelist_new or laik_run_partitioner (Box::into_raw), freed once.
        drop(unsafe { Box::from_raw(l) });
    }
}

#[no_mangle]
pub extern "C" fn laik_rangelist_append(
    l: *mut LaikRangeList,
    tid: c_int,
    range: *const LaikRange,
    tag: c_int,
    data: *mut c_void,
) {
    run("laik_rangelist_append", || {
        let op = "laik_rangelist_append";
        let rl = list(l, op)?;
        let r = range_of(obj(range.cast_mut(), op, "range")?, dims(rl.space))?;
        rl.append(tid, r, tag, data)
    })
}

#[no_mangle]
pub extern "C" fn laik_rangelist_append_single1d(l: *mut LaikRangeList, tid: c_int, idx: i64) {
    run("laik_rangelist_append_single1d", || {
        list(l, "laik_rangelist_append_single1d")?.append(
            tid,
            Range::new1(idx, idx + 1),
            0,
            null_mut(),
        )
    })
}

#[no_mangle]
pub extern "C" fn laik_rangelist_freeze(l: *mut LaikRangeList, do_merge: bool) {
    run("laik_rangelist_freeze", || {
        let rl = list(l, "laik_rangelist_freeze")?;
        if !rl.frozen {
            rl.freeze(do_merge);
        }
        Ok(())
    })
}

/// Renames task `t` to `idmap[t]` in a list for `new_count` tasks; every task that has ranges
/// must map to a task id below `new_count`.
#[no_mangle]
pub extern "C" fn laik_rangelist_migrate(
    l: *mut LaikRangeList,
    idmap: *mut c_int,
    new_count: c_uint,
) {
    run("laik_rangelist_migrate", || {
        let op = "laik_rangelist_migrate";
        let rl = frozen_list(l, op)?;
        if idmap.is_null() {
            return Err(crate::ffi::null_arg(op, "idmap"));
        }
        // SAFETY: LAIK's contract: idmap has an entry for every task id of the list.
        let map = unsafe { std::slice::from_raw_parts(idmap, rl.ntasks) };
        let mut moved = Vec::with_capacity(rl.ranges.len());
        for t in &rl.ranges {
            let to = map[t.task() as usize];
            if to < 0 || to as c_uint >= new_count {
                return Err(Error::invalid(
                    op,
                    format!(
                        "task {} with ranges maps to {to} (of {new_count})",
                        t.task()
                    ),
                ));
            }
            moved.push(LaikTaskRange::new(
                *t.range(),
                to,
                t.tag(),
                null_mut(),
                t.map_no(),
            ));
        }
        rl.ranges = moved;
        rl.ranges.sort_by_key(|t| t.task());
        rl.ntasks = new_count as usize;
        Ok(())
    })
}

/// Whether every task has exactly the whole space.
#[no_mangle]
pub extern "C" fn laik_rangelist_isAll(l: *mut LaikRangeList) -> bool {
    run("laik_rangelist_isAll", || {
        let rl = frozen_list(l, "laik_rangelist_isAll")?;
        let Some(whole) = rl.whole() else {
            return Ok(false);
        };
        let rs = rl.ferry_ranges();
        Ok(rs.len() == rl.ntasks
            && rl
                .ranges
                .iter()
                .enumerate()
                .all(|(k, t)| t.task() == k as c_int)
            && rs.iter().all(|r| *r == whole))
    })
}

/// The task holding the whole space as the list's only range, or -1.
#[no_mangle]
pub extern "C" fn laik_rangelist_isSingle(l: *mut LaikRangeList) -> c_int {
    run("laik_rangelist_isSingle", || {
        let rl = frozen_list(l, "laik_rangelist_isSingle")?;
        let rs = rl.ferry_ranges();
        Ok(match (rs.as_slice(), rl.whole()) {
            ([r], Some(w)) if *r == w => rl.ranges[0].task(),
            _ => -1,
        })
    })
}

#[no_mangle]
pub extern "C" fn laik_rangelist_isEqual(a: *mut LaikRangeList, b: *mut LaikRangeList) -> bool {
    run("laik_rangelist_isEqual", || {
        let op = "laik_rangelist_isEqual";
        let (x, y) = (frozen_list(a, op)?, frozen_list(b, op)?);
        Ok(x.ranges.len() == y.ranges.len()
            && x.ranges.iter().zip(&y.ranges).all(|(p, q)| {
                p.task() == q.task()
                    && p.range().from.i == q.range().from.i
                    && p.range().to.i == q.range().to.i
            }))
    })
}

#[no_mangle]
pub extern "C" fn laik_rangelist_coversSpace(l: *mut LaikRangeList) -> bool {
    run("laik_rangelist_coversSpace", || {
        Ok(frozen_list(l, "laik_rangelist_coversSpace")?.covers_space())
    })
}

#[no_mangle]
pub extern "C" fn laik_rangelist_rangecount(l: *mut LaikRangeList) -> c_int {
    run("laik_rangelist_rangecount", || {
        Ok(frozen_list(l, "laik_rangelist_rangecount")?.ranges.len() as c_int)
    })
}

#[no_mangle]
pub extern "C" fn laik_rangelist_tidrangecount(l: *mut LaikRangeList, tid: c_int) -> c_int {
    run("laik_rangelist_tidrangecount", || {
        Ok(frozen_list(l, "laik_rangelist_tidrangecount")?
            .of_task(tid)
            .count() as c_int)
    })
}

#[no_mangle]
pub extern "C" fn laik_rangelist_tidmapcount(l: *mut LaikRangeList, tid: c_int) -> c_int {
    run("laik_rangelist_tidmapcount", || {
        Ok(frozen_list(l, "laik_rangelist_tidmapcount")?
            .of_task(tid)
            .map(|(_, t)| t.map_no() + 1)
            .max()
            .unwrap_or(0))
    })
}

#[no_mangle]
pub extern "C" fn laik_rangelist_tidmaprangecount(
    l: *mut LaikRangeList,
    tid: c_int,
    map_no: c_int,
) -> c_uint {
    run("laik_rangelist_tidmaprangecount", || {
        Ok(frozen_list(l, "laik_rangelist_tidmaprangecount")?
            .of_task(tid)
            .filter(|(_, t)| t.map_no() == map_no)
            .count() as c_uint)
    })
}

fn nth(rl: &mut LaikRangeList, k: Option<usize>) -> *mut LaikTaskRange {
    k.and_then(|k| rl.ranges.get_mut(k))
        .map_or(null_mut(), |t| t as *mut LaikTaskRange)
}

/// Range `n` of the list (NULL past the end).
#[no_mangle]
pub extern "C" fn laik_rangelist_taskrange(l: *mut LaikRangeList, n: c_int) -> *mut LaikTaskRange {
    run("laik_rangelist_taskrange", || {
        let rl = frozen_list(l, "laik_rangelist_taskrange")?;
        Ok(nth(rl, usize::try_from(n).ok()))
    })
}

/// Range `n` of task `tid` (NULL past the end).
#[no_mangle]
pub extern "C" fn laik_rangelist_tidrange(
    l: *mut LaikRangeList,
    tid: c_int,
    n: c_int,
) -> *mut LaikTaskRange {
    run("laik_rangelist_tidrange", || {
        let rl = frozen_list(l, "laik_rangelist_tidrange")?;
        let k = usize::try_from(n)
            .ok()
            .and_then(|n| rl.of_task(tid).nth(n).map(|(k, _)| k));
        Ok(nth(rl, k))
    })
}

/// Range `n` of mapping `map_no` of task `tid` (NULL past the end).
#[no_mangle]
pub extern "C" fn laik_rangelist_tidmaprange(
    l: *mut LaikRangeList,
    tid: c_int,
    map_no: c_int,
    n: c_int,
) -> *mut LaikTaskRange {
    run("laik_rangelist_tidmaprange", || {
        let rl = frozen_list(l, "laik_rangelist_tidmaprange")?;
        let k = usize::try_from(n).ok().and_then(|n| {
            rl.of_task(tid)
                .filter(|(_, t)| t.map_no() == map_no)
                .nth(n)
                .map(|(k, _)| k)
        });
        Ok(nth(rl, k))
    })
}

/// A filter keeping every range (until restricted).
#[no_mangle]
pub extern "C" fn laik_rangefilter_new() -> *mut LaikRangeFilter {
    Box::into_raw(Box::new(LaikRangeFilter {
        my_task: None,
        idx: Vec::new(),
    }))
}

#[no_mangle]
pub extern "C" fn laik_rangefilter_free(f: *mut LaikRangeFilter) {
    if !f.is_null() {
        // SAFETY: from laik_rangefilter_new (Box::into_raw), freed once by the program.
        drop(unsafe { Box::from_raw(f) });
    }
}

/// Keeps only the ranges of this process in group `g`.
#[no_mangle]
pub extern "C" fn laik_rangefilter_set_myfilter(f: *mut LaikRangeFilter, g: *mut LaikGroup) {
    run("laik_rangefilter_set_myfilter", || {
        let op = "laik_rangefilter_set_myfilter";
        let myid = obj(g, op, "group")?.myid;
        obj(f, op, "filter")?.my_task = Some(myid);
        Ok(())
    })
}

/// Keeps only ranges intersecting a range of task `tid` in `l` (several calls: any of them).
#[no_mangle]
pub extern "C" fn laik_rangefilter_add_idxfilter(
    f: *mut LaikRangeFilter,
    l: *mut LaikRangeList,
    tid: c_int,
) {
    run("laik_rangefilter_add_idxfilter", || {
        let op = "laik_rangefilter_add_idxfilter";
        let rl = frozen_list(l, op)?;
        let d = dims(rl.space);
        let rs: Vec<Range> = rl
            .of_task(tid)
            .filter_map(|(_, t)| range_of(t.range(), d).ok())
            .collect();
        obj(f, op, "filter")?.idx.extend(rs);
        Ok(())
    })
}

/// Runs the partitioner of `params` over its space, group and base partitioning; the frozen
/// list holds the ranges `filter` keeps (all without a filter). The caller frees it.
#[no_mangle]
pub extern "C" fn laik_run_partitioner(
    params: *mut LaikPartitionerParams,
    filter: *mut LaikRangeFilter,
) -> *mut LaikRangeList {
    run("laik_run_partitioner", || {
        let op = "laik_run_partitioner";
        let p = obj(params, op, "parameters")?;
        let (part, _) = compute(p.partitioner, p.group, p.space, p.other, op)?;
        let trs = super::custom::task_ranges(&part, p.space);
        // SAFETY: a filter from laik_rangefilter_new, or NULL.
        let f = unsafe { filter.as_ref() };
        let d = dims(p.space);
        let l = LaikRangeList::from_task_ranges(p.space, part.group().size(), &trs, |t| {
            f.is_none_or(|f| range_of(t.range(), d).is_ok_and(|r| f.keeps(t.task(), &r)))
        });
        Ok(Box::into_raw(Box::new(l)))
    })
}

/// A partitioning of `s` for `g` whose partitioner `pr` (with base `other`) runs at the first
/// `laik_partitioning_store_*` call; until then it has no ranges.
#[no_mangle]
pub extern "C" fn laik_new_empty_partitioning(
    g: *mut LaikGroup,
    s: *mut LaikSpace,
    pr: *mut LaikPartitioner,
    other: *mut LaikPartitioning,
) -> *mut LaikPartitioning {
    run("laik_new_empty_partitioning", || {
        new_empty(g, s, pr, other, "laik_new_empty_partitioning")
    })
}

fn new_empty(
    g: *mut LaikGroup,
    s: *mut LaikSpace,
    pr: *mut LaikPartitioner,
    other: *mut LaikPartitioning,
    op: &'static str,
) -> Result<*mut LaikPartitioning> {
    let grp = obj(g, op, "group")?;
    let sp = obj(s, op, "space")?;
    obj(pr, op, "partitioner")?;
    let name = "empty".to_string();
    let part = ferry_data::Partitioning::from_ranges(sp.sized(op)?, &grp.group, &name, Vec::new())?;
    Ok(Box::into_raw(Box::new(LaikPartitioning {
        inst: grp.inst,
        part,
        group: g,
        space: s,
        name,
        ranges: Vec::new(),
        source: Some((pr, other)),
        lists: Vec::new(),
    })))
}

/// A new empty partitioning with the group, space, partitioner and base of `p`.
#[no_mangle]
pub extern "C" fn laik_clone_empty_partitioning(p: *mut LaikPartitioning) -> *mut LaikPartitioning {
    run("laik_clone_empty_partitioning", || {
        let op = "laik_clone_empty_partitioning";
        let pt = obj(p, op, "partitioning")?;
        let Some((pr, other)) = pt.source else {
            return Err(Error::invalid(
                op,
                "a migrated partitioning has no partitioner to run again",
            ));
        };
        new_empty(pt.group, pt.space, pr, other, op)
    })
}

/// Runs the partitioner of `p` (from `laik_new_empty_partitioning`) and keeps its ranges.
fn store(p: *mut LaikPartitioning, op: &'static str) -> Result<()> {
    let pt = obj(p, op, "partitioning")?;
    let Some((pr, other)) = pt.source else {
        return Err(Error::invalid(
            op,
            "a migrated partitioning has no partitioner to run again",
        ));
    };
    let (part, name) = compute(pr, pt.group, pt.space, other, op)?;
    pt.ranges = super::custom::task_ranges(&part, pt.space);
    pt.part = part;
    pt.name = name;
    Ok(())
}

#[no_mangle]
pub extern "C" fn laik_partitioning_store_allranges(p: *mut LaikPartitioning) {
    run("laik_partitioning_store_allranges", || {
        store(p, "laik_partitioning_store_allranges")
    })
}

#[no_mangle]
pub extern "C" fn laik_partitioning_store_myranges(p: *mut LaikPartitioning) {
    run("laik_partitioning_store_myranges", || {
        store(p, "laik_partitioning_store_myranges")
    })
}

#[no_mangle]
pub extern "C" fn laik_partitioning_store_intersectranges(
    p: *mut LaikPartitioning,
    p2: *mut LaikPartitioning,
) {
    run("laik_partitioning_store_intersectranges", || {
        obj(
            p2,
            "laik_partitioning_store_intersectranges",
            "partitioning",
        )?;
        store(p, "laik_partitioning_store_intersectranges")
    })
}

/// A list of the ranges of `p` that `keep` accepts, owned by `p`.
fn hand_out(
    p: *mut LaikPartitioning,
    keep: impl Fn(&LaikTaskRange) -> bool,
    op: &'static str,
) -> Result<*mut LaikRangeList> {
    let pt = obj(p, op, "partitioning")?;
    let l = LaikRangeList::from_task_ranges(pt.space, pt.part.group().size(), &pt.ranges, keep);
    pt.lists.push(Box::new(l));
    Ok(pt
        .lists
        .last_mut()
        .map_or(null_mut(), |b| &mut **b as *mut _))
}

fn my_id(p: *mut LaikPartitioning, op: &'static str) -> Result<c_int> {
    let pt = obj(p, op, "partitioning")?;
    Ok(obj(pt.group, op, "group")?.myid)
}

/// Every range of `p` (the list belongs to `p`).
#[no_mangle]
pub extern "C" fn laik_partitioning_allranges(p: *mut LaikPartitioning) -> *mut LaikRangeList {
    run("laik_partitioning_allranges", || {
        hand_out(p, |_| true, "laik_partitioning_allranges")
    })
}

/// The ranges of this process in `p` (the list belongs to `p`).
#[no_mangle]
pub extern "C" fn laik_partitioning_myranges(p: *mut LaikPartitioning) -> *mut LaikRangeList {
    run("laik_partitioning_myranges", || {
        let op = "laik_partitioning_myranges";
        let me = my_id(p, op)?;
        hand_out(p, |t| t.task() == me, op)
    })
}

/// The ranges of `p1` (any task) intersecting a range this process has in `p1` or `p2`: the
/// ranges a transition between the two exchanges with this process.
#[no_mangle]
pub extern "C" fn laik_partitioning_interranges(
    p1: *mut LaikPartitioning,
    p2: *mut LaikPartitioning,
) -> *mut LaikRangeList {
    run("laik_partitioning_interranges", || {
        let op = "laik_partitioning_interranges";
        let mut mine = Vec::new();
        for p in [p1, p2] {
            let me = my_id(p, op)?;
            let pt = obj(p, op, "partitioning")?;
            let d = dims(pt.space);
            mine.extend(
                pt.ranges
                    .iter()
                    .filter(|t| t.task() == me)
                    .filter_map(|t| range_of(t.range(), d).ok()),
            );
        }
        let f = LaikRangeFilter {
            my_task: None,
            idx: mine,
        };
        let d = dims(obj(p1, op, "partitioning")?.space);
        hand_out(
            p1,
            |t| range_of(t.range(), d).is_ok_and(|r| f.keeps(t.task(), &r)),
            op,
        )
    })
}
