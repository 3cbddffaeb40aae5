//! Application partitioners (`laik_new_partitioner`), LAIK's task-range handles and range
//! helpers.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::null_mut;

use ferry_core::{Error, Result};
use ferry_data::{Partitioner, PartitionerCtx, Partitioning, Range};

use super::core::LaikGroup;
use super::part::{LaikIndex, LaikPartitioner, LaikPartitioning, LaikRange, LaikSpace};
use super::{obj, out, run};

/// `laik_run_partitioner_t`.
pub type RunFn = extern "C" fn(*mut LaikRangeReceiver, *mut LaikPartitionerParams);

/// `Laik_PartitionerFlag` bits this layer acts on.
const PF_GROUP_BY_TAG: c_int = 1;
const PF_MERGE: c_int = 8;

/// `Laik_PartitionerParams` of laik.h (fields read by application partitioners).
#[repr(C)]
pub struct LaikPartitionerParams {
    pub space: *mut LaikSpace,
    pub group: *mut LaikGroup,
    pub partitioner: *mut LaikPartitioner,
    pub other: *mut LaikPartitioning,
}

/// Collects the ranges an application partitioner appends during one run.
pub struct LaikRangeReceiver {
    ntasks: usize,
    dims: usize,
    items: Vec<(usize, Range, c_int)>,
    error: Option<Error>,
}

/// `Laik_TaskRange`: one range of one task, as handed to C.
#[repr(C)]
pub struct LaikTaskRange {
    range: LaikRange,
    task: c_int,
    tag: c_int,
    data: *mut c_void,
    /// Number of the task's mapping that holds this range (as `laik_get_map` numbers them).
    map_no: c_int,
}

impl LaikTaskRange {
    /// Range `range` of `task` with `tag`, held in the task's mapping `map_no`.
    pub(crate) fn new(
        range: LaikRange,
        task: c_int,
        tag: c_int,
        data: *mut c_void,
        map_no: c_int,
    ) -> Self {
        LaikTaskRange {
            range,
            task,
            tag,
            data,
            map_no,
        }
    }

    pub(crate) fn range(&self) -> &LaikRange {
        &self.range
    }

    pub(crate) fn task(&self) -> c_int {
        self.task
    }

    pub(crate) fn tag(&self) -> c_int {
        self.tag
    }

    pub(crate) fn map_no(&self) -> c_int {
        self.map_no
    }
}

/// An application partitioner: its run function, user data and flags.
#[derive(Clone, Copy, Debug)]
pub struct CustomRule {
    name: &'static str,
    run: RunFn,
    data: usize,
    flags: c_int,
}

/// The `Laik_TaskRange`s of a partitioning, in its order.
pub(crate) fn task_ranges(p: &Partitioning, space: *mut LaikSpace) -> Vec<LaikTaskRange> {
    // Mapping numbers follow the data layer's layout (ferry_data::Layout): a task's ranges in
    // order, a new mapping for group 0 and for the first range of each other group.
    let mut task = None;
    let mut maps = 0;
    let mut groups: Vec<(u32, c_int)> = Vec::new();
    p.ranges()
        .iter()
        .map(|tr| {
            if task != Some(tr.task) {
                task = Some(tr.task);
                maps = 0;
                groups.clear();
            }
            let known = (tr.group != 0)
                .then(|| groups.iter().find(|(g, _)| *g == tr.group).map(|&(_, m)| m))
                .flatten();
            let map_no = known.unwrap_or_else(|| {
                if tr.group != 0 {
                    groups.push((tr.group, maps));
                }
                maps += 1;
                maps - 1
            });
            LaikTaskRange {
                range: LaikRange {
                    space,
                    from: LaikIndex { i: tr.range.from() },
                    to: LaikIndex { i: tr.range.to() },
                },
                task: tr.task as c_int,
                tag: tr.group as c_int,
                data: null_mut(),
                map_no,
            }
        })
        .collect()
}

impl CustomRule {
    /// The data layer's partitioner for one run: the C function sees LAIK's parameter block
    /// (space, group, this partitioner, base partitioning) and appends through a receiver.
    pub(crate) fn partitioner(
        self,
        me: *mut LaikPartitioner,
        space: *mut LaikSpace,
        group: *mut LaikGroup,
        other: *mut LaikPartitioning,
    ) -> Partitioner {
        // Handles travel as addresses: the data layer wants a Send + Sync rule, and the rule
        // runs during this call on this thread.
        let h = (me as usize, space as usize, group as usize, other as usize);
        let rule = self;
        Partitioner::custom(self.name, move |ctx: &mut PartitionerCtx<'_>| {
            let mut rr = LaikRangeReceiver {
                ntasks: ctx.ntasks(),
                dims: ctx.space().dims(),
                items: Vec::new(),
                error: None,
            };
            let mut params = LaikPartitionerParams {
                partitioner: h.0 as *mut LaikPartitioner,
                space: h.1 as *mut LaikSpace,
                group: h.2 as *mut LaikGroup,
                other: h.3 as *mut LaikPartitioning,
            };
            (rule.run)(&mut rr, &mut params);
            if let Some(e) = rr.error.take() {
                return Err(e);
            }
            rule.emit(ctx, rr.items)
        })
    }

    /// Hands the appended ranges to the data layer. With `LAIK_PF_Merge`, a task's 1d ranges
    /// are sorted and overlapping or touching ones merged; they then share one mapping, also
    /// with `LAIK_PF_Compact`: LAIK packs such a mapping, ferry keeps its holes, and either
    /// way a program's offsets from `laik_global2local_1d` index mapping 0 (one mapping per
    /// range would make them index another mapping's memory). Otherwise ranges with the same
    /// positive tag share a mapping and tag 0 gets a mapping of its own.
    fn emit(
        &self,
        ctx: &mut PartitionerCtx<'_>,
        mut items: Vec<(usize, Range, c_int)>,
    ) -> Result<()> {
        let group_of = |tag: c_int| -> u32 {
            if tag > 0 || self.flags & PF_GROUP_BY_TAG != 0 {
                tag.max(0) as u32
            } else {
                0
            }
        };
        if self.flags & PF_MERGE == 0 || ctx.space().dims() != 1 {
            for (task, r, tag) in items {
                ctx.append(task, r, group_of(tag))?;
            }
            return Ok(());
        }
        // the mapping group all of a task's merged ranges share
        let shared = 1;
        items.sort_by_key(|(t, r, _)| (*t, r.from()[0]));
        let mut cur: Option<(usize, i64, i64)> = None;
        for (task, r, _) in items {
            let (a, b) = (r.from()[0], r.to()[0]);
            match cur {
                Some((t, _, ref mut hi)) if t == task && a <= *hi => *hi = (*hi).max(b),
                _ => {
                    if let Some((t, lo, hi)) = cur {
                        ctx.append(t, Range::new1(lo, hi), shared)?;
                    }
                    cur = Some((task, a, b));
                }
            }
        }
        if let Some((t, lo, hi)) = cur {
            ctx.append(t, Range::new1(lo, hi), shared)?;
        }
        Ok(())
    }
}

/// The reassign rule for a run over `group` with base `other` (see
/// `laik_new_reassign_partitioner`).
pub(crate) fn reassign(
    weight: Option<(super::part::IdxWeightFn, usize)>,
    group: *mut LaikGroup,
    other: *mut LaikPartitioning,
) -> Partitioner {
    // SAFETY: handles of live objects passed to laik_new_partitioning (checked for NULL).
    let base = unsafe { other.as_ref() }.map(|p| p.part.clone());
    // SAFETY: as above; groups live until the process ends.
    let target = unsafe { group.as_ref() }.map(|g| g.group.clone());
    Partitioner::custom("reassign", move |ctx: &mut PartitionerCtx<'_>| {
        let (Some(base), Some(target)) = (&base, &target) else {
            return Err(Error::invalid(
                "reassign partitioner",
                "needs the previous partitioning as `other` and a group",
            ));
        };
        let w = |i: i64| match weight {
            Some((f, ud)) => {
                let mut idx = LaikIndex { i: [i, 0, 0] };
                f(&mut idx, ud as *const c_void)
            }
            None => 1.0,
        };
        let old = base.group();
        let mut out: Vec<(usize, i64, i64)> = Vec::new();
        let mut orphaned: Vec<(i64, i64)> = Vec::new();
        for tr in base.ranges() {
            let (a, b) = (tr.range.from()[0], tr.range.to()[0]);
            match target.index_of(old.member(tr.task)) {
                Some(t) => out.push((t, a, b)),
                None => orphaned.push((a, b)),
            }
        }
        orphaned.sort_unstable();
        let n = ctx.ntasks();
        let total: f64 = orphaned.iter().flat_map(|&(a, b)| a..b).map(w).sum();
        let share = total / n as f64;
        let (mut task, mut acc) = (0usize, 0.0);
        for &(a, b) in &orphaned {
            let mut from = a;
            for i in a..b {
                acc += w(i);
                if acc >= share && task + 1 < n {
                    out.push((task, from, i + 1));
                    from = i + 1;
                    acc -= share;
                    task += 1;
                }
            }
            if from < b {
                out.push((task, from, b));
            }
        }
        out.sort_unstable();
        for (t, a, b) in out {
            ctx.append(t, Range::new1(a, b), 0)?;
        }
        Ok(())
    })
}

impl LaikRangeReceiver {
    fn push(&mut self, task: c_int, r: Result<Range>, tag: c_int) {
        if self.error.is_some() {
            return;
        }
        let t = usize::try_from(task).ok().filter(|&t| t < self.ntasks);
        match (t, r) {
            (Some(t), Ok(r)) => self.items.push((t, r, tag)),
            (None, _) => {
                self.error = Some(Error::invalid(
                    "laik_append_range",
                    format!("task {task} outside a group of {}", self.ntasks),
                ))
            }
            (_, Err(e)) => self.error = Some(e),
        }
    }
}

/// An application partitioner named `name`.
#[no_mangle]
pub extern "C" fn laik_new_partitioner(
    name: *const c_char,
    run_fn: Option<RunFn>,
    data: *mut c_void,
    flags: c_int,
) -> *mut LaikPartitioner {
    run("laik_new_partitioner", || {
        let f = run_fn.ok_or_else(|| crate::ffi::null_arg("laik_new_partitioner", "run"))?;
        let n = if name.is_null() {
            "custom".to_string()
        } else {
            // SAFETY: NUL-terminated name from the program.
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        };
        // Partitioner names live as long as the process (partitioners are never freed).
        let name: &'static str = Box::leak(n.into_boxed_str());
        Ok(super::part::new_custom(CustomRule {
            name,
            run: f,
            data: data as usize,
            flags,
        }))
    })
}

/// The user data given to `laik_new_partitioner` (NULL for LAIK's own partitioners).
#[no_mangle]
pub extern "C" fn laik_partitioner_data(pr: *mut LaikPartitioner) -> *mut c_void {
    run("laik_partitioner_data", || {
        let p = obj(pr, "laik_partitioner_data", "partitioner")?;
        Ok(match p.kind {
            super::part::Kind::Custom(r) => r.data as *mut c_void,
            _ => null_mut(),
        })
    })
}

pub(crate) fn range_of(r: &LaikRange, dims: usize) -> Result<Range> {
    Range::from_corners(dims, r.from.i, r.to.i)
}

/// Gives range `s` to `task` (in the partitioner run that owns receiver `r`).
#[no_mangle]
pub extern "C" fn laik_append_range(
    r: *mut LaikRangeReceiver,
    task: c_int,
    s: *const LaikRange,
    tag: c_int,
    _data: *mut c_void,
) {
    run("laik_append_range", || {
        let rr = obj(r, "laik_append_range", "receiver")?;
        let range = obj(s.cast_mut(), "laik_append_range", "range")?;
        let dims = rr.dims;
        rr.push(task, range_of(range, dims), tag);
        Ok(())
    })
}

/// Gives the single 1d index `idx` to `task`.
#[no_mangle]
pub extern "C" fn laik_append_index_1d(r: *mut LaikRangeReceiver, task: c_int, idx: i64) {
    run("laik_append_index_1d", || {
        let rr = obj(r, "laik_append_index_1d", "receiver")?;
        rr.push(task, Ok(Range::new1(idx, idx + 1)), 0);
        Ok(())
    })
}

/// Number of ranges of all tasks.
#[no_mangle]
pub extern "C" fn laik_partitioning_rangecount(p: *mut LaikPartitioning) -> c_int {
    run("laik_partitioning_rangecount", || {
        Ok(obj(p, "laik_partitioning_rangecount", "partitioning")?
            .ranges
            .len() as c_int)
    })
}

/// Range `n` of all tasks' ranges (NULL past the end).
#[no_mangle]
pub extern "C" fn laik_partitioning_get_taskrange(
    p: *mut LaikPartitioning,
    n: c_int,
) -> *mut LaikTaskRange {
    run("laik_partitioning_get_taskrange", || {
        let pt = obj(p, "laik_partitioning_get_taskrange", "partitioning")?;
        Ok(usize::try_from(n)
            .ok()
            .and_then(|n| pt.ranges.get_mut(n))
            .map_or(null_mut(), |t| t as *mut LaikTaskRange))
    })
}

#[no_mangle]
pub extern "C" fn laik_taskrange_get_range(tr: *mut LaikTaskRange) -> *const LaikRange {
    run("laik_taskrange_get_range", || {
        Ok(&obj(tr, "laik_taskrange_get_range", "task range")?.range as *const LaikRange)
    })
}

#[no_mangle]
pub extern "C" fn laik_taskrange_get_task(tr: *mut LaikTaskRange) -> c_int {
    run("laik_taskrange_get_task", || {
        Ok(obj(tr, "laik_taskrange_get_task", "task range")?.task)
    })
}

#[no_mangle]
pub extern "C" fn laik_taskrange_get_tag(tr: *mut LaikTaskRange) -> c_int {
    run("laik_taskrange_get_tag", || {
        Ok(obj(tr, "laik_taskrange_get_tag", "task range")?.tag)
    })
}

/// Number of the mapping of the range's task that holds the range.
#[no_mangle]
pub extern "C" fn laik_taskrange_get_mapNo(tr: *mut LaikTaskRange) -> c_int {
    run("laik_taskrange_get_mapNo", || {
        Ok(obj(tr, "laik_taskrange_get_mapNo", "task range")?.map_no)
    })
}

#[no_mangle]
pub extern "C" fn laik_taskrange_get_data(tr: *mut LaikTaskRange) -> *mut c_void {
    run("laik_taskrange_get_data", || {
        Ok(obj(tr, "laik_taskrange_get_data", "task range")?.data)
    })
}

#[no_mangle]
pub extern "C" fn laik_taskrange_set_data(tr: *mut LaikTaskRange, data: *mut c_void) {
    run("laik_taskrange_set_data", || {
        obj(tr, "laik_taskrange_set_data", "task range")?.data = data;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_range_init(
    r: *mut LaikRange,
    s: *mut LaikSpace,
    from: *mut LaikIndex,
    to: *mut LaikIndex,
) {
    run("laik_range_init", || {
        let f = obj(from, "laik_range_init", "from")?.i;
        let t = obj(to, "laik_range_init", "to")?.i;
        out(
            r,
            LaikRange {
                space: s,
                from: LaikIndex { i: f },
                to: LaikIndex { i: t },
            },
        );
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_range_init_2d(
    r: *mut LaikRange,
    s: *mut LaikSpace,
    x1: i64,
    x2: i64,
    y1: i64,
    y2: i64,
) {
    out(
        r,
        LaikRange {
            space: s,
            from: LaikIndex { i: [x1, y1, 0] },
            to: LaikIndex { i: [x2, y2, 0] },
        },
    );
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn laik_range_init_3d(
    r: *mut LaikRange,
    s: *mut LaikSpace,
    x1: i64,
    x2: i64,
    y1: i64,
    y2: i64,
    z1: i64,
    z2: i64,
) {
    out(
        r,
        LaikRange {
            space: s,
            from: LaikIndex { i: [x1, y1, z1] },
            to: LaikIndex { i: [x2, y2, z2] },
        },
    );
}
