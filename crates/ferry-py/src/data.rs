//! The data layer for Python: index spaces, partitioners, partitionings, groups and
//! containers whose local parts are numpy views.
//!
//! A view (`Container.local_data()`, `Container.mapping(i)`) points into the container's
//! storage, which a switch replaces. So a switch refuses to run while a view of the container
//! is alive (`BufferError`, like numpy's own resize); take the views again after the switch.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use numpy::ndarray::{ArrayView, IxDyn, ShapeBuilder};
use numpy::PyArrayDyn;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;

use ferry::data::{self as fd, Block};
use ferry::prelude::Element;

use crate::comm::Comm;
use crate::to_py;

/// An index space of 1 to 3 dimensions: `Space(n)`, `Space(nx, ny)`, `Space(nx, ny, nz)`.
#[pyclass(module = "ferry", frozen)]
pub struct Space(pub(crate) fd::Space);

#[pymethods]
impl Space {
    #[new]
    #[pyo3(signature = (*sizes))]
    fn new(sizes: Vec<u64>) -> PyResult<Space> {
        let s = match sizes[..] {
            [n] => fd::Space::new1(n),
            [x, y] => fd::Space::new2(x, y),
            [x, y, z] => fd::Space::new3(x, y, z),
            _ => return Err(PyValueError::new_err("a space has 1, 2 or 3 dimensions")),
        };
        s.map(Space).map_err(to_py)
    }

    /// Number of dimensions.
    #[getter]
    fn dims(&self) -> usize {
        self.0.dims()
    }

    /// Number of indexes.
    #[getter]
    fn size(&self) -> u64 {
        self.0.size()
    }
}

/// An ordered set of ranks with its own generation (from `Comm.group`, `Comm.shrink`).
#[pyclass(module = "ferry", frozen)]
pub struct Group(pub(crate) ferry::coll::Group);

#[pymethods]
impl Group {
    /// Number of members.
    #[getter]
    fn size(&self) -> usize {
        self.0.size()
    }

    /// The world ranks of the members, in group order.
    #[getter]
    fn members(&self) -> Vec<usize> {
        self.0.members().to_vec()
    }

    /// The group index of world rank `rank`, or `None` if it is not a member.
    fn index_of(&self, rank: usize) -> Option<usize> {
        self.0.index_of(rank)
    }
}

/// A partitioning rule; build one with the static methods (`Partitioner.block()`, ...).
#[pyclass(module = "ferry", frozen)]
pub struct Partitioner {
    pub(crate) inner: fd::Partitioner,
    /// The first exception a Python weight function raised, re-raised by the partitioning
    /// call that ran it (the rule itself cannot return errors from a weight).
    error: Arc<Mutex<Option<PyErr>>>,
}

impl Partitioner {
    fn plain(inner: fd::Partitioner) -> Partitioner {
        Partitioner {
            inner,
            error: Arc::default(),
        }
    }

    /// Raises the exception a weight function raised during the last partitioning, if any.
    pub(crate) fn take_callback_error(&self) -> PyResult<()> {
        match self.error.lock() {
            Ok(mut slot) => slot.take().map_or(Ok(()), Err),
            Err(_) => Err(PyValueError::new_err("a weight function panicked")),
        }
    }
}

/// A Python callable `f(x) -> float` as a weight; its first exception is kept in `slot`.
fn weight<X>(f: Py<PyAny>, slot: Arc<Mutex<Option<PyErr>>>) -> impl Fn(X) -> f64 + Send + Sync
where
    X: for<'py> IntoPyObject<'py> + Send,
{
    move |x| {
        Python::attach(
            |py| match f.call1(py, (x,)).and_then(|v| v.extract::<f64>(py)) {
                Ok(w) => w,
                Err(e) => {
                    if let Ok(mut s) = slot.lock() {
                        s.get_or_insert(e);
                    }
                    0.0
                }
            },
        )
    }
}

#[pymethods]
impl Partitioner {
    /// Task 0 owns every index.
    #[staticmethod]
    fn master() -> Partitioner {
        Partitioner::plain(fd::Partitioner::Master)
    }

    /// Every task owns every index (replicated).
    #[staticmethod]
    fn all() -> Partitioner {
        Partitioner::plain(fd::Partitioner::All)
    }

    /// 1-d blocks; `index_weight(i)` and `task_weight(t)` are optional Python callables
    /// returning floats, `cycles` ranges per task round-robin.
    #[staticmethod]
    #[pyo3(signature = (index_weight = None, task_weight = None, cycles = 1))]
    fn block(
        index_weight: Option<Py<PyAny>>,
        task_weight: Option<Py<PyAny>>,
        cycles: usize,
    ) -> Partitioner {
        let error: Arc<Mutex<Option<PyErr>>> = Arc::default();
        let block = Block {
            cycles,
            index_weight: index_weight
                .map(|f| Arc::new(weight::<i64>(f, error.clone())) as fd::partitioner::IndexWeight),
            task_weight: task_weight.map(|f| {
                Arc::new(weight::<usize>(f, error.clone())) as fd::partitioner::TaskWeight
            }),
            dim: None,
        };
        Partitioner {
            inner: fd::Partitioner::Block(block),
            error,
        }
    }

    /// Recursive bisection of 1-d to 3-d boxes.
    #[staticmethod]
    fn bisection() -> Partitioner {
        Partitioner::plain(fd::Partitioner::Bisection)
    }

    /// A regular grid of `x * y * z` blocks, one per task.
    #[staticmethod]
    #[pyo3(signature = (x, y = 1, z = 1))]
    fn grid(x: usize, y: usize, z: usize) -> Partitioner {
        Partitioner::plain(fd::Partitioner::Grid { blocks: [x, y, z] })
    }

    /// Derived: the base's ranges plus face neighbourhoods of width `depth` (no corners).
    #[staticmethod]
    #[pyo3(signature = (depth = 1))]
    fn halo(depth: i64) -> Partitioner {
        Partitioner::plain(fd::Partitioner::Halo { depth })
    }

    /// Derived: the base's ranges grown by `depth` in every dimension, corners included.
    #[staticmethod]
    #[pyo3(signature = (depth = 1))]
    fn corner_halo(depth: i64) -> Partitioner {
        Partitioner::plain(fd::Partitioner::CornerHalo { depth })
    }

    /// A partitioner written in Python: `run(space, ntasks, base)` returns the ranges as an
    /// iterable of `(task, from, to)` or `(task, from, to, group)`, where `from` and `to` are
    /// ints for a 1-d space and tuples of ints otherwise (ranges are clipped to the space,
    /// empty ones dropped; ranges of one task with the same non-zero `group` share one
    /// mapping). `base` is `None`, or for a partitioning made with `base=` that
    /// partitioning's ranges as `(task, from, to)` tuples of the same form. Every rank runs it
    /// and must get the same ranges. An exception it raises is raised again by the
    /// `Comm.partitioning` call that ran it.
    #[staticmethod]
    fn custom(name: String, run: Py<PyAny>) -> Partitioner {
        let error: Arc<Mutex<Option<PyErr>>> = Arc::default();
        let slot = error.clone();
        // The data layer names partitioners with static strings; a program makes few custom
        // partitioners, so their names live as long as the process.
        let name: &'static str = Box::leak(name.into_boxed_str());
        let inner = fd::Partitioner::custom(name, move |ctx| {
            let ranges = Python::attach(|py| custom_ranges(py, &run, ctx));
            match ranges {
                Ok(v) => v.into_iter().try_for_each(|(t, r, g)| ctx.append(t, r, g)),
                Err(e) => {
                    let msg = e.to_string();
                    if let Ok(mut s) = slot.lock() {
                        s.get_or_insert(e);
                    }
                    Err(ferry::Error::invalid(
                        "partition",
                        format!("partitioner `{name}` raised: {msg}"),
                    ))
                }
            }
        });
        Partitioner { inner, error }
    }
}

/// An index of a `dims`-dimensional space as Python sees it: an int in 1-d, a tuple otherwise.
fn index_to_py<'py>(py: Python<'py>, i: &fd::Index, dims: usize) -> PyResult<Bound<'py, PyAny>> {
    if dims == 1 {
        Ok(i[0].into_pyobject(py)?.into_any())
    } else {
        Ok(pyo3::types::PyTuple::new(py, &i[..dims])?.into_any())
    }
}

fn index_from_py(x: &Bound<'_, PyAny>, dims: usize) -> PyResult<fd::Index> {
    let v: Vec<i64> = match x.extract::<i64>() {
        Ok(n) => vec![n],
        Err(_) => x.extract()?,
    };
    if v.len() != dims {
        return Err(PyValueError::new_err(format!(
            "index {v:?} of a {dims}-dimensional space"
        )));
    }
    let mut i = [0i64; fd::MAX_DIMS];
    i[..dims].copy_from_slice(&v);
    Ok(i)
}

/// Runs a Python partitioner and converts its ranges.
fn custom_ranges(
    py: Python<'_>,
    run: &Py<PyAny>,
    ctx: &fd::PartitionerCtx<'_>,
) -> PyResult<Vec<(usize, fd::Range, u32)>> {
    let dims = ctx.space().dims();
    let base = match ctx.base() {
        Some(b) => {
            let mut v = Vec::with_capacity(b.len());
            for tr in b {
                let (f, t) = (tr.range.from(), tr.range.to());
                v.push((
                    tr.task,
                    index_to_py(py, &f, dims)?,
                    index_to_py(py, &t, dims)?,
                ));
            }
            Some(v)
        }
        None => None,
    };
    let space = Py::new(py, Space(*ctx.space()))?;
    let got = run.call1(py, (space, ctx.ntasks(), base))?;
    let mut out = Vec::new();
    for item in got.bind(py).try_iter()? {
        let item = item?;
        let n = item.len()?;
        if n != 3 && n != 4 {
            return Err(PyValueError::new_err(
                "a range is (task, from, to) or (task, from, to, group)",
            ));
        }
        let task: usize = item.get_item(0)?.extract()?;
        let from = index_from_py(&item.get_item(1)?, dims)?;
        let to = index_from_py(&item.get_item(2)?, dims)?;
        let group: u32 = if n == 4 {
            item.get_item(3)?.extract()?
        } else {
            0
        };
        let r = fd::Range::from_corners(dims, from, to).map_err(to_py)?;
        out.push((task, r, group));
    }
    Ok(out)
}

/// Which task owns which indexes of a space (from `Comm.partitioning`).
#[pyclass(module = "ferry", frozen)]
pub struct Partitioning(pub(crate) fd::Partitioning);

#[pymethods]
impl Partitioning {
    /// The same ownership expressed over `group` (every owning rank must be a member).
    fn migrate(&self, group: &Group) -> PyResult<Partitioning> {
        self.0.migrate(&group.0).map(Partitioning).map_err(to_py)
    }

    /// The group the partitioning is over.
    #[getter]
    fn group(&self) -> Group {
        Group(self.0.group().clone())
    }

    /// The ranges of world rank `rank`, as `(from, to)` index tuples.
    fn ranges_of(&self, rank: usize) -> Vec<(Vec<i64>, Vec<i64>)> {
        let d = self.0.space().dims();
        self.0
            .rank_ranges(rank)
            .iter()
            .map(|tr| corners(&tr.range, d))
            .collect()
    }
}

fn corners(r: &fd::Range, dims: usize) -> (Vec<i64>, Vec<i64>) {
    (r.from()[..dims].to_vec(), r.to()[..dims].to_vec())
}

/// The typed containers Python can hold.
pub(crate) enum AnyContainer {
    F64(fd::Container<f64>),
    F32(fd::Container<f32>),
    I64(fd::Container<i64>),
    I32(fd::Container<i32>),
}

/// Runs `$body` with `$c` bound to the typed container inside `$any`.
macro_rules! each {
    ($any:expr, $c:ident => $body:expr) => {
        match $any {
            AnyContainer::F64($c) => $body,
            AnyContainer::F32($c) => $body,
            AnyContainer::I64($c) => $body,
            AnyContainer::I32($c) => $body,
        }
    };
}

impl AnyContainer {
    pub(crate) fn new(
        comm: &mut ferry::Comm,
        dtype: &str,
        name: &str,
        space: &fd::Space,
    ) -> PyResult<AnyContainer> {
        Ok(match dtype {
            "float64" | "f8" | "double" => AnyContainer::F64(comm.container(name, space)),
            "float32" | "f4" => AnyContainer::F32(comm.container(name, space)),
            "int64" | "i8" => AnyContainer::I64(comm.container(name, space)),
            "int32" | "i4" => AnyContainer::I32(comm.container(name, space)),
            other => {
                return Err(PyValueError::new_err(format!(
                    "containers hold float64, float32, int64 or int32, not {other}"
                )))
            }
        })
    }
}

/// Keeps a container alive while a numpy view of it exists, and counts the live views.
#[pyclass(module = "ferry", frozen)]
struct ViewGuard {
    _owner: Py<Container>,
    live: Arc<AtomicUsize>,
}

impl Drop for ViewGuard {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A distributed array over a space; this process stores the part its current partitioning
/// gives it, readable and writable as numpy views.
#[pyclass(module = "ferry", unsendable)]
pub struct Container {
    inner: AnyContainer,
    comm: Py<Comm>,
    live: Arc<AtomicUsize>,
}

impl Container {
    pub(crate) fn new(inner: AnyContainer, comm: Py<Comm>) -> Container {
        Container {
            inner,
            comm,
            live: Arc::default(),
        }
    }
}

/// A numpy view of `len` elements at `ptr` with `shape` and element `strides`, kept alive by
/// (and counted in) a guard owning `owner`.
///
/// # Safety
/// Every index the shape and strides reach must lie in the `len` elements at `ptr`, and the
/// memory must stay in place while a guard of `owner` is alive (switches refuse to run then).
unsafe fn view<'py, T: numpy::Element>(
    owner: &Bound<'py, Container>,
    live: &Arc<AtomicUsize>,
    ptr: *const T,
    shape: Vec<usize>,
    strides: Vec<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = owner.py();
    let guard = Bound::new(
        py,
        ViewGuard {
            _owner: owner.clone().unbind(),
            live: live.clone(),
        },
    )?;
    live.fetch_add(1, Ordering::AcqRel);
    // SAFETY: the caller guarantees shape and strides stay inside the allocation at `ptr`.
    let arr = unsafe { ArrayView::from_shape_ptr(IxDyn(&shape).strides(IxDyn(&strides)), ptr) };
    // SAFETY: the numpy array's base is the guard, which keeps the container (and so its
    // storage) alive; the storage only moves in a switch, which refuses to run while a guard
    // is alive.
    Ok(unsafe { PyArrayDyn::<T>::borrow_from_array(&arr, guard.into_any()) }.into_any())
}

/// Shape and strides (slowest dimension first, as numpy indexes `[z][y][x]`) of a mapping
/// box of `dims` dimensions, checked against the `len` elements it lives in.
fn box_layout(
    range: &fd::Range,
    strides: &[usize; fd::MAX_DIMS],
    dims: usize,
    len: usize,
) -> PyResult<(Vec<usize>, Vec<usize>)> {
    let mut shape = Vec::with_capacity(dims);
    let mut st = Vec::with_capacity(dims);
    let mut last = 0usize;
    for d in (0..dims).rev() {
        let e = range.extent(d) as usize;
        shape.push(e);
        st.push(strides[d]);
        last += e.saturating_sub(1) * strides[d];
    }
    let empty = shape.contains(&0);
    if !empty && last >= len {
        return Err(PyValueError::new_err(format!(
            "mapping box {range:?} does not fit its {len} elements"
        )));
    }
    Ok((shape, st))
}

fn local_view<'py, T: Element + numpy::Element>(
    slf: &Bound<'py, Container>,
    c: &mut fd::Container<T>,
    live: &Arc<AtomicUsize>,
) -> PyResult<Bound<'py, PyAny>> {
    let data = c.local_data_mut();
    let n = data.len();
    // SAFETY: a 1-d view of exactly the `n` local elements.
    unsafe { view(slf, live, data.as_ptr(), vec![n], vec![1]) }
}

type Corners = (Vec<i64>, Vec<i64>);

fn mapping_view<'py, T: Element + numpy::Element>(
    slf: &Bound<'py, Container>,
    c: &mut fd::Container<T>,
    live: &Arc<AtomicUsize>,
    i: usize,
) -> PyResult<(Corners, Bound<'py, PyAny>)> {
    let dims = c.space().dims();
    let m = c.mapping_mut(i).map_err(to_py)?;
    let (shape, strides) = box_layout(&m.range, &m.strides, dims, m.data.len())?;
    let ptr = m.data.as_ptr();
    let box_ = corners(&m.range, dims);
    // SAFETY: `box_layout` checked that the box's last element lies inside the mapping.
    let v = unsafe { view(slf, live, ptr, shape, strides)? };
    Ok((box_, v))
}

#[pymethods]
impl Container {
    /// Switches to `partitioning` with data flow `flow` (`"preserve"`, `"none"`, `"init"`)
    /// and optional reduction `op` (`"sum"`, ...). Raises `BufferError` while a numpy view of
    /// this container is alive.
    #[pyo3(signature = (partitioning, flow = "preserve", op = None))]
    fn switch(
        &mut self,
        py: Python<'_>,
        partitioning: &Partitioning,
        flow: &str,
        op: Option<&str>,
    ) -> PyResult<()> {
        let alive = self.live.load(Ordering::Acquire);
        if alive > 0 {
            return Err(PyBufferError::new_err(format!(
                "container `{}`: {alive} numpy view(s) still alive; delete them before a \
                 switch (the switch replaces the storage they point into)",
                each!(&self.inner, c => c.name().to_string())
            )));
        }
        let fl = crate::buf::flow(flow)?;
        let mut comm = self.comm.bind(py).borrow_mut();
        let t = comm.get()?.transport();
        each!(&mut self.inner, c => {
            let o = op.map(crate::buf::op).transpose()?;
            c.switch_to(t, &partitioning.0, fl, o.as_ref()).map_err(to_py)
        })
    }

    /// A 1-d numpy view of every element this process stores (all mappings).
    fn local_data<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let mut me = slf.borrow_mut();
        let live = me.live.clone();
        each!(&mut me.inner, c => local_view(slf, c, &live))
    }

    /// Mapping `i`: `((from, to), view)` — the box of global indexes it stores and a numpy
    /// view indexed `[x - from[0]]`, `[y - from[1], x - from[0]]` or with z first in 3-d.
    fn mapping<'py>(slf: &Bound<'py, Self>, i: usize) -> PyResult<(Corners, Bound<'py, PyAny>)> {
        let mut me = slf.borrow_mut();
        let live = me.live.clone();
        each!(&mut me.inner, c => mapping_view(slf, c, &live, i))
    }

    /// The index ranges this process owns, as `(from, to)` tuples (to exclusive).
    fn my_ranges(&self) -> Vec<Corners> {
        each!(&self.inner, c => {
            let d = c.space().dims();
            c.my_ranges().iter().map(|r| corners(r, d)).collect()
        })
    }

    /// For owned range `no`: the range, and the number of the mapping that stores it.
    fn range_mapping(&self, no: usize) -> PyResult<(Corners, usize)> {
        each!(&self.inner, c => {
            let d = c.space().dims();
            let r = *c.my_ranges().get(no).ok_or_else(|| {
                PyValueError::new_err(format!("range {no} of {}", c.my_ranges().len()))
            })?;
            let (m, _) = c.local_index(&r.from()).map_err(to_py)?;
            Ok((corners(&r, d), m))
        })
    }

    /// Number of mappings (allocations) this process holds.
    fn num_mappings(&self) -> usize {
        each!(&self.inner, c => c.num_mappings())
    }

    /// Sets every local element to `value`.
    fn fill(&mut self, value: f64) {
        each!(&mut self.inner, c => c.fill(num_cast(value)))
    }

    /// Sizes the storage once for every partitioning in `parts`, so that switching among
    /// them never allocates.
    fn reserve(&mut self, parts: Vec<PyRef<'_, Partitioning>>) -> PyResult<()> {
        let ps: Vec<&fd::Partitioning> = parts.iter().map(|p| &p.0).collect();
        each!(&mut self.inner, c => c.reserve(&ps).map_err(to_py))
    }

    /// Lets partitionings `a` and `b` (a base and its halo) share one placement, so that
    /// switching between them only moves the halo.
    fn share_layout(&mut self, a: &Partitioning, b: &Partitioning) -> PyResult<bool> {
        each!(&mut self.inner, c => c.share_layout(&a.0, &b.0).map_err(to_py))
    }

    /// The container's name.
    #[getter]
    fn name(&self) -> String {
        each!(&self.inner, c => c.name().to_string())
    }
}

/// A Python float as the container's element type (`fill`).
fn num_cast<T: Element>(v: f64) -> T {
    let mut out = T::default();
    if let Some(x) = (&mut out as &mut dyn std::any::Any).downcast_mut::<f64>() {
        *x = v;
    } else if let Some(x) = (&mut out as &mut dyn std::any::Any).downcast_mut::<f32>() {
        *x = v as f32;
    } else if let Some(x) = (&mut out as &mut dyn std::any::Any).downcast_mut::<i64>() {
        *x = v as i64;
    } else if let Some(x) = (&mut out as &mut dyn std::any::Any).downcast_mut::<i32>() {
        *x = v as i32;
    }
    out
}
