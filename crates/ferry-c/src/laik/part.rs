//! Index spaces, partitioners and partitionings.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::null_mut;
use std::sync::Arc;

use ferry_core::{Error, Result};
use ferry_data::{Block, Partitioner, PartitionerCtx, Partitioning, Range, Space, TaskRange};

use super::core::{LaikGroup, LaikInstance};
use super::{obj, out, run};

/// An index space. The first fields are the C view of `laik-internal.h`'s `struct _Laik_Space`
/// (name, id, dimensions, range), which LAIK's test programs read; `LaikSpace::set` keeps them
/// equal to `space`.
#[repr(C)]
pub struct LaikSpace {
    c_name: *mut c_char,
    id: c_int,
    pub(crate) dims: c_int,
    pub(crate) range: LaikRange,
    kvs: *mut c_void,
    pub(crate) inst: *mut LaikInstance,
    next: *mut LaikSpace,
    pub(crate) space: Space,
    pub(crate) name: String,
    name_buf: std::ffi::CString,
    /// From `laik_new_space`: no size yet, until the first `laik_change_space_*` gives one.
    pub(crate) unsized_: bool,
}

impl LaikSpace {
    /// The range fields C reads (`Laik_Range`), kept in step with `space`.
    pub(crate) fn range_ptr(&self) -> *const LaikRange {
        &self.range
    }
}

impl LaikSpace {
    /// A boxed space handle (its C view filled in).
    pub(crate) fn boxed(inst: *mut LaikInstance, space: Space, name: &str) -> *mut LaikSpace {
        let p = Box::into_raw(Box::new(LaikSpace {
            c_name: null_mut(),
            id: 0,
            dims: 0,
            range: LaikRange {
                space: null_mut(),
                from: LaikIndex::default(),
                to: LaikIndex::default(),
            },
            kvs: null_mut(),
            inst,
            next: null_mut(),
            space,
            name: String::new(),
            name_buf: std::ffi::CString::default(),
            unsized_: false,
        }));
        // SAFETY: just allocated; the handle lives until the process ends.
        let s = unsafe { &mut *p };
        s.set(space);
        s.set_name(name);
        p
    }

    /// Fails while the space has no size (`laik_new_space` before any `laik_change_space_*`).
    pub(crate) fn sized(&self, op: &'static str) -> Result<&Space> {
        if self.unsized_ {
            return Err(Error::invalid(
                op,
                format!(
                    "space `{}` from laik_new_space has no size yet (call laik_change_space_* \
                     first)",
                    self.name
                ),
            ));
        }
        Ok(&self.space)
    }

    /// Changes the space (and its C view).
    pub(crate) fn set(&mut self, space: Space) {
        self.unsized_ = false;
        let r = space.range();
        self.space = space;
        self.dims = r.dims() as c_int;
        self.range = LaikRange {
            space: self,
            from: LaikIndex { i: r.from() },
            to: LaikIndex { i: r.to() },
        };
    }

    /// Names the space (and its C view).
    pub(crate) fn set_name(&mut self, name: &str) {
        self.name = name.to_string();
        self.name_buf = std::ffi::CString::new(name.replace('\0', "")).unwrap_or_default();
        self.c_name = self.name_buf.as_ptr().cast_mut();
    }
}

/// `Laik_Index` of laik.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LaikIndex {
    pub i: [i64; 3],
}

/// `Laik_Range` of laik.h.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct LaikRange {
    pub space: *mut LaikSpace,
    pub from: LaikIndex,
    pub to: LaikIndex,
}

/// `Laik_GetIdxWeight_t`.
pub type IdxWeightFn = extern "C" fn(*mut LaikIndex, *const c_void) -> f64;
/// `Laik_GetTaskWeight_t`.
pub type TaskWeightFn = extern "C" fn(c_int, *const c_void) -> f64;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    All,
    Master,
    Block,
    Bisection,
    Grid([usize; 3]),
    CornerHalo(i64),
    Halo(i64),
    Copy(usize, usize),
    Custom(super::custom::CustomRule),
    /// Incremental: the base's ranges with those of removed tasks spread over the rest.
    Reassign(Option<(IdxWeightFn, usize)>),
}

/// A partitioning rule with LAIK's knobs (block weights and cycles).
pub struct LaikPartitioner {
    pub(crate) kind: Kind,
    /// Dimension a block partitioner cuts (`pdim`).
    pdim: usize,
    cycles: usize,
    index_weight: Option<(IdxWeightFn, usize)>,
    task_weight: Option<(TaskWeightFn, usize)>,
}

/// A partitioning: the ranges of a space that each task of a group owns.
pub struct LaikPartitioning {
    pub(crate) inst: *mut LaikInstance,
    pub(crate) part: Partitioning,
    pub(crate) group: *mut LaikGroup,
    pub(crate) space: *mut LaikSpace,
    pub(crate) name: String,
    /// Every task's ranges as LAIK's `Laik_TaskRange`s (same order as the partitioning's).
    pub(crate) ranges: Vec<super::custom::LaikTaskRange>,
    /// The partitioner and base partitioning the ranges come from (none for a migrated one),
    /// for `laik_clone_empty_partitioning` and the `laik_partitioning_store_*` runs.
    pub(crate) source: Option<(*mut LaikPartitioner, *mut LaikPartitioning)>,
    /// Range lists handed out by `laik_partitioning_allranges` and friends, valid as long as
    /// the partitioning. Boxed: C holds pointers to them while the vector grows.
    #[allow(clippy::vec_box)]
    pub(crate) lists: Vec<Box<super::ranges::LaikRangeList>>,
}

const fn partitioner(kind: Kind) -> LaikPartitioner {
    LaikPartitioner {
        kind,
        pdim: 0,
        cycles: 1,
        index_weight: None,
        task_weight: None,
    }
}

static mut ALL: LaikPartitioner = partitioner(Kind::All);
static mut MASTER: LaikPartitioner = partitioner(Kind::Master);

/// `laik_All`: every task owns the whole space.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static mut laik_All: *mut LaikPartitioner = null_mut();
/// `laik_Master`: the group's master (task 0 unless `laik_set_master`) owns the whole space.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static mut laik_Master: *mut LaikPartitioner = null_mut();

/// Points the predefined partitioner handles at their objects (at `laik_init`).
pub(crate) fn init_statics() {
    // SAFETY: written once at initialisation, before the program can read them; the targets
    // are statics that live for the whole process.
    unsafe {
        laik_All = &raw mut ALL;
        laik_Master = &raw mut MASTER;
    }
    super::data::init_types();
    super::alloc::init_statics();
}

impl LaikPartitioner {
    /// The data layer's partitioner for a run over `space` and `group` (with base `other`).
    /// The C callbacks are called with the user data they were registered with.
    fn to_ferry(
        &self,
        me: *mut LaikPartitioner,
        space: *mut LaikSpace,
        group: *mut LaikGroup,
        other: *mut LaikPartitioning,
    ) -> Partitioner {
        match self.kind {
            Kind::Copy(from_dim, to_dim) => Partitioner::Copy { from_dim, to_dim },
            Kind::Custom(rule) => rule.partitioner(me, space, group, other),
            Kind::Reassign(weight) => super::custom::reassign(weight, group, other),
            Kind::All => Partitioner::All,
            Kind::Master => {
                // SAFETY: a group handle from this library, valid until the process ends.
                let master = unsafe { group.as_ref() }.map_or(0, |g| g.master);
                if master == 0 {
                    return Partitioner::Master;
                }
                let task = master as usize;
                Partitioner::custom("master", move |ctx: &mut PartitionerCtx<'_>| {
                    let whole = ctx.space().range();
                    ctx.append(task, whole, 0)
                })
            }
            Kind::Bisection => Partitioner::Bisection,
            Kind::Grid(blocks) => Partitioner::Grid { blocks },
            Kind::CornerHalo(depth) => Partitioner::CornerHalo { depth },
            Kind::Halo(depth) => Partitioner::Halo { depth },
            Kind::Block => {
                let pdim = self.pdim;
                let index_weight = self.index_weight.map(|(f, ud)| {
                    // LAIK passes a full index: the cut dimension's coordinate, 0 elsewhere.
                    let w: ferry_data::partitioner::IndexWeight = Arc::new(move |i| {
                        let mut idx = LaikIndex { i: [0; 3] };
                        idx.i[pdim] = i;
                        f(&mut idx, ud as *const c_void)
                    });
                    w
                });
                let task_weight = self.task_weight.map(|(f, ud)| {
                    let w: ferry_data::partitioner::TaskWeight =
                        Arc::new(move |t| f(t as c_int, ud as *const c_void));
                    w
                });
                Partitioner::Block(Block {
                    cycles: self.cycles.max(1),
                    index_weight,
                    task_weight,
                    dim: Some(pdim),
                })
            }
        }
    }

    fn needs_base(&self) -> bool {
        matches!(
            self.kind,
            Kind::CornerHalo(_) | Kind::Halo(_) | Kind::Copy(..)
        )
    }
}

fn new_partitioner(p: LaikPartitioner) -> *mut LaikPartitioner {
    Box::into_raw(Box::new(p))
}

#[no_mangle]
pub extern "C" fn laik_new_all_partitioner() -> *mut LaikPartitioner {
    new_partitioner(partitioner(Kind::All))
}

#[no_mangle]
pub extern "C" fn laik_new_master_partitioner() -> *mut LaikPartitioner {
    new_partitioner(partitioner(Kind::Master))
}

/// Block partitioner over dimension `pdim` (0, 1 or 2; the other dimensions stay whole) with
/// `cycles` rounds and optional index and task weights.
#[no_mangle]
pub extern "C" fn laik_new_block_partitioner(
    pdim: c_int,
    cycles: c_int,
    ifunc: Option<IdxWeightFn>,
    tfunc: Option<TaskWeightFn>,
    user_data: *const c_void,
) -> *mut LaikPartitioner {
    run("laik_new_block_partitioner", || {
        let Some(pdim) = usize::try_from(pdim).ok().filter(|&d| d < 3) else {
            return Err(Error::invalid(
                "laik_new_block_partitioner",
                format!("blocks along dimension {pdim} (LAIK spaces have 0 to 2)"),
            ));
        };
        Ok(new_partitioner(LaikPartitioner {
            kind: Kind::Block,
            pdim,
            cycles: usize::try_from(cycles).unwrap_or(1).max(1),
            index_weight: ifunc.map(|f| (f, user_data as usize)),
            task_weight: tfunc.map(|f| (f, user_data as usize)),
        }))
    })
}

#[no_mangle]
pub extern "C" fn laik_new_block_partitioner1() -> *mut LaikPartitioner {
    new_partitioner(partitioner(Kind::Block))
}

#[no_mangle]
pub extern "C" fn laik_new_block_partitioner_iw1(
    f: Option<IdxWeightFn>,
    user_data: *const c_void,
) -> *mut LaikPartitioner {
    laik_new_block_partitioner(0, 1, f, None, user_data)
}

#[no_mangle]
pub extern "C" fn laik_new_block_partitioner_tw1(
    f: Option<TaskWeightFn>,
    user_data: *const c_void,
) -> *mut LaikPartitioner {
    laik_new_block_partitioner(0, 1, None, f, user_data)
}

fn block_of<'a>(pr: *mut LaikPartitioner, op: &'static str) -> Result<&'a mut LaikPartitioner> {
    let p = obj(pr, op, "partitioner")?;
    if !matches!(p.kind, Kind::Block) {
        return Err(Error::invalid(op, "not a block partitioner"));
    }
    Ok(p)
}

#[no_mangle]
pub extern "C" fn laik_set_index_weight(
    pr: *mut LaikPartitioner,
    f: Option<IdxWeightFn>,
    user_data: *const c_void,
) {
    run("laik_set_index_weight", || {
        block_of(pr, "laik_set_index_weight")?.index_weight = f.map(|f| (f, user_data as usize));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_set_task_weight(
    pr: *mut LaikPartitioner,
    f: Option<TaskWeightFn>,
    user_data: *const c_void,
) {
    run("laik_set_task_weight", || {
        block_of(pr, "laik_set_task_weight")?.task_weight = f.map(|f| (f, user_data as usize));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_set_cycle_count(pr: *mut LaikPartitioner, cycles: c_int) {
    run("laik_set_cycle_count", || {
        block_of(pr, "laik_set_cycle_count")?.cycles = usize::try_from(cycles).unwrap_or(1).max(1);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_new_bisection_partitioner() -> *mut LaikPartitioner {
    new_partitioner(partitioner(Kind::Bisection))
}

#[no_mangle]
pub extern "C" fn laik_new_grid_partitioner(x: c_int, y: c_int, z: c_int) -> *mut LaikPartitioner {
    run("laik_new_grid_partitioner", || {
        let b = |v: c_int| {
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| Error::invalid("laik_new_grid_partitioner", format!("{v} blocks")))
        };
        Ok(new_partitioner(partitioner(Kind::Grid([
            b(x)?,
            b(y)?,
            b(z)?,
        ]))))
    })
}

#[no_mangle]
pub extern "C" fn laik_new_cornerhalo_partitioner(depth: c_int) -> *mut LaikPartitioner {
    new_partitioner(partitioner(Kind::CornerHalo(i64::from(depth))))
}

#[no_mangle]
pub extern "C" fn laik_new_halo_partitioner(depth: c_int) -> *mut LaikPartitioner {
    new_partitioner(partitioner(Kind::Halo(i64::from(depth))))
}

/// Derived: the base's ranges in dimension `from_dim`, placed in dimension `to_dim` of this
/// space, every other dimension spanning the space.
#[no_mangle]
pub extern "C" fn laik_new_copy_partitioner(
    from_dim: c_int,
    to_dim: c_int,
) -> *mut LaikPartitioner {
    run("laik_new_copy_partitioner", || {
        let d = |v: c_int| {
            usize::try_from(v).ok().filter(|&v| v < 3).ok_or_else(|| {
                Error::invalid("laik_new_copy_partitioner", format!("dimension {v}"))
            })
        };
        Ok(new_partitioner(partitioner(Kind::Copy(
            d(from_dim)?,
            d(to_dim)?,
        ))))
    })
}

/// LAIK's reassign partitioner: run over the new group `newg` with the old partitioning as
/// base, survivors keep their ranges and the ranges of removed tasks are spread over the new
/// group by index weight (`get_idx_w`, 1 per index without), in increasing index order.
#[no_mangle]
pub extern "C" fn laik_new_reassign_partitioner(
    newg: *mut LaikGroup,
    get_idx_w: Option<IdxWeightFn>,
    user_data: *const c_void,
) -> *mut LaikPartitioner {
    run("laik_new_reassign_partitioner", || {
        obj(newg, "laik_new_reassign_partitioner", "group")?;
        Ok(new_partitioner(partitioner(Kind::Reassign(
            get_idx_w.map(|f| (f, user_data as usize)),
        ))))
    })
}

/// An application partitioner: `run` appends ranges through the receiver.
pub(crate) fn new_custom(rule: super::custom::CustomRule) -> *mut LaikPartitioner {
    new_partitioner(partitioner(Kind::Custom(rule)))
}

/// Partitioners stay valid until the process ends (the predefined ones are shared).
#[no_mangle]
pub extern "C" fn laik_free_partitioner(pr: *mut LaikPartitioner) {
    run("laik_free_partitioner", || {
        obj(pr, "laik_free_partitioner", "partitioner").map(|_| ())
    })
}

/// Runs `pr` for the tasks of `g` over `space` (derived partitioners such as halos extend
/// `other`): the partitioning and its name.
pub(crate) fn compute(
    pr: *mut LaikPartitioner,
    g: *mut LaikGroup,
    space: *mut LaikSpace,
    other: *mut LaikPartitioning,
    op: &'static str,
) -> Result<(Partitioning, String)> {
    let p = obj(pr, op, "partitioner")?;
    let grp = obj(g, op, "group")?;
    let sp = obj(space, op, "space")?;
    sp.sized(op)?;
    let fp = p.to_ferry(pr, space, g, other);
    let part = if p.needs_base() {
        let base = obj(
            other,
            op,
            "base partitioning (`other`) of a halo partitioner",
        )?;
        Partitioning::derived(&sp.space, &fp, &base.part)?
    } else {
        Partitioning::new(&sp.space, &grp.group, &fp)?
    };
    Ok((part, fp.name().to_string()))
}

/// Runs `pr` for the tasks of `g` over `space`; derived partitioners (halos) extend `other`.
#[no_mangle]
pub extern "C" fn laik_new_partitioning(
    pr: *mut LaikPartitioner,
    g: *mut LaikGroup,
    space: *mut LaikSpace,
    other: *mut LaikPartitioning,
) -> *mut LaikPartitioning {
    run("laik_new_partitioning", || {
        let (part, name) = compute(pr, g, space, other, "laik_new_partitioning")?;
        let ranges = super::custom::task_ranges(&part, space);
        Ok(Box::into_raw(Box::new(LaikPartitioning {
            inst: obj(g, "laik_new_partitioning", "group")?.inst,
            name,
            part,
            group: g,
            space,
            ranges,
            source: Some((pr, other)),
            lists: Vec::new(),
        })))
    })
}

/// A new partitioning with the ranges of `other`, for group `g`: tasks `g` adds get no
/// ranges, tasks it removes must have none (as for `laik_partitioning_migrate`, which changes
/// `other` itself).
#[no_mangle]
pub extern "C" fn laik_new_migrated_partitioning(
    other: *mut LaikPartitioning,
    g: *mut LaikGroup,
) -> *mut LaikPartitioning {
    run("laik_new_migrated_partitioning", || {
        let op = "laik_new_migrated_partitioning";
        let pt = obj(other, op, "partitioning")?;
        let grp = obj(g, op, "group")?;
        let part = pt.part.migrate(&grp.group)?;
        let ranges = super::custom::task_ranges(&part, pt.space);
        Ok(Box::into_raw(Box::new(LaikPartitioning {
            inst: grp.inst,
            name: pt.name.clone(),
            part,
            group: g,
            space: pt.space,
            ranges,
            source: None,
            lists: Vec::new(),
        })))
    })
}

#[no_mangle]
pub extern "C" fn laik_free_partitioning(p: *mut LaikPartitioning) {
    run("laik_free_partitioning", || {
        if !p.is_null() {
            // SAFETY: from laik_new_partitioning (Box::into_raw), freed once by the program.
            drop(unsafe { Box::from_raw(p) });
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_partitioning_set_name(p: *mut LaikPartitioning, name: *mut c_char) {
    run("laik_partitioning_set_name", || {
        let pt = obj(p, "laik_partitioning_set_name", "partitioning")?;
        if !name.is_null() {
            // SAFETY: NUL-terminated name from the program.
            pt.name = unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned();
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_partitioning_get_group(p: *mut LaikPartitioning) -> *mut LaikGroup {
    run("laik_partitioning_get_group", || {
        Ok(obj(p, "laik_partitioning_get_group", "partitioning")?.group)
    })
}

#[no_mangle]
pub extern "C" fn laik_partitioning_get_space(p: *mut LaikPartitioning) -> *mut LaikSpace {
    run("laik_partitioning_get_space", || {
        Ok(obj(p, "laik_partitioning_get_space", "partitioning")?.space)
    })
}

/// Expresses `p` for group `g` (its owners must all be in `g`); containers using `p` follow
/// without moving data.
#[no_mangle]
pub extern "C" fn laik_partitioning_migrate(p: *mut LaikPartitioning, g: *mut LaikGroup) {
    run("laik_partitioning_migrate", || {
        let op = "laik_partitioning_migrate";
        let pt = obj(p, op, "partitioning")?;
        let grp = obj(g, op, "group")?;
        let old_id = pt.part.id();
        pt.part = pt.part.migrate(&grp.group)?;
        pt.ranges = super::custom::task_ranges(&pt.part, pt.space);
        pt.group = g;
        super::data::follow_migration(pt, old_id)
    })
}

fn my_ranges(p: &LaikPartitioning) -> &[TaskRange] {
    // SAFETY: the instance outlives every handle.
    let rank = unsafe { &*p.inst }.rank;
    p.part.rank_ranges(rank)
}

#[no_mangle]
pub extern "C" fn laik_my_rangecount(p: *mut LaikPartitioning) -> c_int {
    run("laik_my_rangecount", || {
        Ok(my_ranges(obj(p, "laik_my_rangecount", "partitioning")?).len() as c_int)
    })
}

/// Number of mappings this process gets for `p` (ranges of one mapping group share one).
#[no_mangle]
pub extern "C" fn laik_my_mapcount(p: *mut LaikPartitioning) -> c_int {
    run("laik_my_mapcount", || {
        let pt = obj(p, "laik_my_mapcount", "partitioning")?;
        // SAFETY: the instance outlives every handle.
        let rank = unsafe { &*pt.inst }.rank;
        let l = ferry_data::Layout::new(&pt.part, rank, &ferry_data::LayoutOrder::Lexicographic)?;
        Ok(l.mappings.len() as c_int)
    })
}

/// This process's range number `n` of `p` and its `Laik_TaskRange` (None if it has fewer).
pub(crate) fn range_n(
    p: *mut LaikPartitioning,
    n: c_int,
    op: &'static str,
) -> Result<Option<(Range, *mut super::custom::LaikTaskRange)>> {
    let pt = obj(p, op, "partitioning")?;
    let all = pt.part.ranges();
    let mine = my_ranges(pt);
    let Some(k) = usize::try_from(n).ok().filter(|&k| k < mine.len()) else {
        return Ok(None);
    };
    // `mine` is a sub-slice of `all`: its offset there indexes the handle cache.
    let first = (mine.as_ptr() as usize - all.as_ptr() as usize) / std::mem::size_of::<TaskRange>();
    let range = mine[k].range;
    let tr = pt
        .ranges
        .get_mut(first + k)
        .map_or(null_mut(), |t| t as *mut super::custom::LaikTaskRange);
    Ok(Some((range, tr)))
}

#[no_mangle]
pub extern "C" fn laik_my_range(
    p: *mut LaikPartitioning,
    n: c_int,
) -> *mut super::custom::LaikTaskRange {
    run("laik_my_range", || {
        Ok(range_n(p, n, "laik_my_range")?.map_or(null_mut(), |(_, t)| t))
    })
}

/// This process's range `n` of a 1d partitioning as `[from, to)`; both 0 if there is none.
#[no_mangle]
pub extern "C" fn laik_my_range_1d(
    p: *mut LaikPartitioning,
    n: c_int,
    from: *mut i64,
    to: *mut i64,
) -> *mut super::custom::LaikTaskRange {
    run("laik_my_range_1d", || {
        let r = range_n(p, n, "laik_my_range_1d")?;
        let (f, t) = r.map_or(([0; 3], [0; 3]), |(r, _)| (r.from(), r.to()));
        out(from, f[0]);
        out(to, t[0]);
        Ok(r.map_or(null_mut(), |(_, t)| t))
    })
}

#[no_mangle]
pub extern "C" fn laik_my_range_2d(
    p: *mut LaikPartitioning,
    n: c_int,
    x1: *mut i64,
    x2: *mut i64,
    y1: *mut i64,
    y2: *mut i64,
) -> *mut super::custom::LaikTaskRange {
    run("laik_my_range_2d", || {
        let r = range_n(p, n, "laik_my_range_2d")?;
        let (f, t) = r.map_or(([0; 3], [0; 3]), |(r, _)| (r.from(), r.to()));
        out(x1, f[0]);
        out(x2, t[0]);
        out(y1, f[1]);
        out(y2, t[1]);
        Ok(r.map_or(null_mut(), |(_, t)| t))
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn laik_my_range_3d(
    p: *mut LaikPartitioning,
    n: c_int,
    x1: *mut i64,
    x2: *mut i64,
    y1: *mut i64,
    y2: *mut i64,
    z1: *mut i64,
    z2: *mut i64,
) -> *mut super::custom::LaikTaskRange {
    run("laik_my_range_3d", || {
        let r = range_n(p, n, "laik_my_range_3d")?;
        let (f, t) = r.map_or(([0; 3], [0; 3]), |(r, _)| (r.from(), r.to()));
        out(x1, f[0]);
        out(x2, t[0]);
        out(y1, f[1]);
        out(y2, t[1]);
        out(z1, f[2]);
        out(z2, t[2]);
        Ok(r.map_or(null_mut(), |(_, t)| t))
    })
}
