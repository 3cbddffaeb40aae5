//! `ferry.Comm`: a communicator over numpy arrays.
//!
//! Buffers are numpy arrays of a numeric dtype, C-contiguous; they are read and written in
//! place (no copy) through the buffer the array owns. Methods named like MPI's take the same
//! arguments as the Rust [`ferry::Comm`]: ranks, roots, sources and destinations are indices in
//! the communicator. Python floats and ints are accepted where one value is reduced or
//! broadcast, and come back as Python values.

use numpy::{PyArray, PyArrayDyn, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt};

use ferry::coll::CollOptions;

use crate::buf::{dispatch, with_slice, with_slice_mut};
use crate::data;
use crate::to_py;

/// A communicator: this process's rank in a job of `size` ranks, its transport and the data
/// layer. `ferry.init()` returns the one over every rank of the job.
#[pyclass(unsendable, weakref, module = "ferry")]
pub struct Comm {
    inner: Option<ferry::Comm>,
    rank: usize,
    /// World changes so far (resize points that admitted or removed processes).
    epoch: u32,
    /// The world before the last resize point that changed it.
    previous: Option<ferry::coll::Group>,
    /// A resize point removed this process (or it was a spare never admitted): it is no
    /// member to meet at `finish`.
    outside: bool,
}

/// Initialises ferry from the environment `ferry run` sets (a process started alone is rank 0
/// of 1) and returns the world communicator.
#[pyfunction]
pub fn init() -> PyResult<Comm> {
    let c = ferry::Comm::init().map_err(|e| {
        // A failure before the transport exists still names the rank the launcher gave.
        match std::env::var("FERRY_RANK")
            .ok()
            .and_then(|r| r.parse().ok())
        {
            Some(rank) => to_py(e.or_rank(rank)),
            None => to_py(e),
        }
    })?;
    Ok(Comm {
        rank: c.rank(),
        inner: Some(c),
        epoch: 0,
        previous: None,
        outside: false,
    })
}

impl Comm {
    /// Takes the world of a resize point: `Some(true)` if it changed, `None` if this process
    /// is not in it (removed, or a spare never admitted). `always`: take its group even when
    /// nothing changed (at `join_world`, where the communicator still spans the spares).
    fn adopt(&mut self, r: ferry::data::resize::Resized, always: bool) -> PyResult<Option<bool>> {
        let rank = self.rank;
        let Some(me) = r.my_index else {
            self.outside = true;
            return Ok(None);
        };
        if r.changed || always {
            let c = self.get()?;
            c.set_group(r.group).map_err(|e| to_py(e.or_rank(rank)))?;
        }
        if r.changed {
            self.previous = Some(r.previous);
        }
        self.epoch = r.epoch;
        self.rank = me;
        Ok(Some(r.changed))
    }

    /// The live communicator, or an error naming this rank after `finish`.
    pub(crate) fn get(&mut self) -> PyResult<&mut ferry::Comm> {
        let rank = self.rank;
        self.inner.as_mut().ok_or_else(|| {
            to_py(ferry::Error::invalid("comm", "the communicator was finished").on_rank(rank))
        })
    }
}

/// One value of a Python scalar: an int (`i64`) or a float (`f64`).
enum Scalar {
    Int(i64),
    Float(f64),
}

fn scalar(x: &Bound<'_, PyAny>) -> PyResult<Option<Scalar>> {
    if x.downcast::<PyUntypedArray>().is_ok() {
        return Ok(None);
    }
    if x.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err("bool values cannot be reduced"));
    }
    if x.is_instance_of::<PyInt>() {
        return Ok(Some(Scalar::Int(x.extract()?)));
    }
    if x.is_instance_of::<PyFloat>() {
        return Ok(Some(Scalar::Float(x.extract()?)));
    }
    // numpy scalars (numpy.int32(3), numpy.float32(1.5)): by their kind.
    if let Ok(kind) = x.getattr("dtype").and_then(|d| d.getattr("kind")) {
        let kind: String = kind.extract()?;
        return match kind.as_str() {
            "i" | "u" => Ok(Some(Scalar::Int(x.call_method0("__int__")?.extract()?))),
            "f" => Ok(Some(Scalar::Float(x.call_method0("__float__")?.extract()?))),
            _ => Err(PyTypeError::new_err(format!(
                "cannot communicate a value of kind {kind}"
            ))),
        };
    }
    Err(PyTypeError::new_err(format!(
        "expected a numpy array, an int or a float, got {}",
        x.get_type().name()?
    )))
}

/// A new C-contiguous array of `T` with dimensions `dims`.
fn new_array<'py, T: numpy::Element>(
    py: Python<'py>,
    dims: Vec<usize>,
) -> Bound<'py, PyArrayDyn<T>> {
    PyArray::zeros(py, numpy::IxDyn(&dims), false)
}

#[pymethods]
impl Comm {
    /// This process's index in the communicator.
    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }

    /// Number of members.
    #[getter]
    fn size(&mut self) -> PyResult<usize> {
        Ok(self.get()?.size())
    }

    /// The backend in use (`single`, `tcp`, `shm`, `hybrid`, `mpi`).
    #[getter]
    fn backend(&mut self) -> PyResult<&'static str> {
        Ok(self.get()?.backend())
    }

    /// Start of an elastic program (`ferry run --spares S`), called first: until then the
    /// communicator spans the spares too. A process of the initial world returns the phase
    /// `0` at once (the communicator is then over the initial world); a spare waits until a resize point admits it and
    /// returns that point's phase (the communicator is then over the new world), or `None`
    /// if the job ended without admitting it (the program should then exit).
    fn join_world(&mut self) -> PyResult<Option<i64>> {
        let rank = self.rank;
        let c = self.get()?;
        let mut resizer = c.world().resizer();
        let (r, phase) = resizer
            .join_world(c.transport())
            .map_err(|e| to_py(e.or_rank(rank)))?;
        Ok(self.adopt(r, true)?.map(|_| phase))
    }

    /// A resize point at `phase` (collective over the members; member 0 decides): spares
    /// waiting in `join_world` are admitted and processes that `ferry ctl NAME remove`
    /// named leave. Returns `True` if the world changed (the communicator is then over the
    /// new world: partitionings made before must be made again, `previous_group` is the old
    /// world for migrating data), `False` if not, and `None` on a process that was removed
    /// (it should stop communicating and exit).
    fn allow_resize(&mut self, phase: i64) -> PyResult<Option<bool>> {
        let (rank, epoch) = (self.rank, self.epoch);
        let c = self.get()?;
        let mut resizer = c.world().resizer();
        let group = c.group().clone();
        let r = resizer
            .allow_world_resize(c.transport(), &group, epoch, phase)
            .map_err(|e| to_py(e.or_rank(rank)))?;
        self.adopt(r, false)
    }

    /// Number of world changes so far (LAIK's epoch).
    #[getter]
    fn epoch(&self) -> u32 {
        self.epoch
    }

    /// The world before the last resize point that changed it (`None` before any change).
    #[getter]
    fn previous_group(&self) -> Option<data::Group> {
        self.previous.clone().map(data::Group)
    }

    /// The group this communicator talks over (for partitionings and `shrink`).
    #[getter]
    fn group(&mut self) -> PyResult<data::Group> {
        Ok(data::Group(self.get()?.group().clone()))
    }

    /// Sends the array `buf` to member `dest` with `tag`.
    #[pyo3(signature = (buf, dest, tag = 0))]
    fn send(&mut self, buf: &Bound<'_, PyAny>, dest: usize, tag: u32) -> PyResult<()> {
        let c = self.get()?;
        dispatch!(
            buf,
            a,
            T,
            with_slice(a, |s| c.send(s, dest, tag).map_err(to_py))
        )
    }

    /// Receives the next message of member `source` with `tag`: into `buf` (which must have the
    /// message's length; returned) or, without `buf`, as a new 1-d array of `dtype`.
    #[pyo3(signature = (source, tag = 0, buf = None, dtype = None))]
    fn recv<'py>(
        &mut self,
        py: Python<'py>,
        source: usize,
        tag: u32,
        buf: Option<Bound<'py, PyAny>>,
        dtype: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.get()?;
        if let Some(buf) = buf {
            dispatch!(
                &buf,
                a,
                T,
                with_slice_mut(a, |s| c.recv_into(s, source, tag).map_err(to_py))
            )?;
            return Ok(buf);
        }
        // The dtype's canonical name decides the element type of the new array.
        let np = py.import("numpy")?;
        let dtype = match dtype {
            Some(d) => np.getattr("dtype")?.call1((d,))?,
            None => np.getattr("dtype")?.call1(("float64",))?,
        };
        let name: String = dtype.getattr("name")?.extract()?;
        macro_rules! recv_as {
            ($($n:literal => $t:ty),*) => {
                match name.as_str() {
                    $($n => {
                        let v = c.recv_vec::<$t>(source, tag).map_err(to_py)?;
                        Ok(PyArray::from_vec(py, v).into_any())
                    })*
                    other => Err(PyTypeError::new_err(format!("unsupported dtype {other}"))),
                }
            };
        }
        recv_as!("float64" => f64, "float32" => f32, "int64" => i64, "int32" => i32,
                 "int16" => i16, "int8" => i8, "uint64" => u64, "uint32" => u32,
                 "uint16" => u16, "uint8" => u8)
    }

    /// Sends `sendbuf` to `dest` and receives `recvbuf` (same dtype) from `source`, progressed
    /// together (a ring shift or halo swap cannot deadlock). Returns `recvbuf`.
    #[pyo3(signature = (sendbuf, dest, recvbuf, source, tag = 0))]
    fn sendrecv<'py>(
        &mut self,
        sendbuf: &Bound<'py, PyAny>,
        dest: usize,
        recvbuf: Bound<'py, PyAny>,
        source: usize,
        tag: u32,
    ) -> PyResult<Bound<'py, PyAny>> {
        if sendbuf.is(&recvbuf) {
            return Err(PyValueError::new_err(
                "sendbuf and recvbuf must be different arrays",
            ));
        }
        let c = self.get()?;
        dispatch!(sendbuf, a, T, {
            let b = recvbuf
                .downcast::<PyArrayDyn<T>>()
                .map_err(|_| PyTypeError::new_err("recvbuf must have the dtype of sendbuf"))?;
            with_slice(a, |s| {
                with_slice_mut(b, |r| {
                    c.sendrecv_into(s, dest, r, source, tag).map_err(to_py)
                })
            })
        })?;
        Ok(recvbuf)
    }

    /// Blocks until every member has entered the barrier.
    fn barrier(&mut self) -> PyResult<()> {
        self.get()?.barrier().map_err(to_py)
    }

    /// The root's `x` on every member: an array is overwritten in place (same shape on every
    /// member) and returned; an int or float is returned.
    #[pyo3(signature = (x, root = 0))]
    fn bcast<'py>(
        &mut self,
        py: Python<'py>,
        x: Bound<'py, PyAny>,
        root: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.get()?;
        match scalar(&x)? {
            Some(Scalar::Int(v)) => Ok(c
                .broadcast_value(v, root)
                .map_err(to_py)?
                .into_pyobject(py)?
                .into_any()),
            Some(Scalar::Float(v)) => Ok(c
                .broadcast_value(v, root)
                .map_err(to_py)?
                .into_pyobject(py)?
                .into_any()),
            None => {
                dispatch!(
                    &x,
                    a,
                    T,
                    with_slice_mut(a, |s| c.broadcast(s, root).map_err(to_py))
                )?;
                Ok(x)
            }
        }
    }

    /// Combines every member's `x` element-wise with `op` (`"sum"`, `"prod"`, `"min"`,
    /// `"max"`) at the root. An array is reduced in place (the root's holds the result, the
    /// others' are unchanged) and returned; an int or float returns the result on the root
    /// and the member's own value elsewhere.
    #[pyo3(signature = (x, root = 0, op = "sum"))]
    fn reduce<'py>(
        &mut self,
        py: Python<'py>,
        x: Bound<'py, PyAny>,
        root: usize,
        op: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.get()?;
        match scalar(&x)? {
            Some(Scalar::Int(v)) => {
                let mut b = [v];
                c.reduce(&mut b, root, crate::buf::op(op)?).map_err(to_py)?;
                Ok(b[0].into_pyobject(py)?.into_any())
            }
            Some(Scalar::Float(v)) => {
                let mut b = [v];
                c.reduce(&mut b, root, crate::buf::op(op)?).map_err(to_py)?;
                Ok(b[0].into_pyobject(py)?.into_any())
            }
            None => {
                dispatch!(&x, a, T, {
                    let o = crate::buf::op::<T>(op)?;
                    with_slice_mut(a, |s| c.reduce(s, root, o).map_err(to_py))
                })?;
                Ok(x)
            }
        }
    }

    /// Combines every member's `x` element-wise with `op` and gives every member the result
    /// (the same bits everywhere). An int or float returns the reduced value. An array gives a
    /// new array, or is written into `out` (in place, no copy, when `out` is `x` itself).
    /// `ordered=True` asks for the strict left fold in rank order (the data layer's order).
    #[pyo3(signature = (x, op = "sum", out = None, ordered = false))]
    fn allreduce<'py>(
        &mut self,
        py: Python<'py>,
        x: Bound<'py, PyAny>,
        op: &str,
        out: Option<Bound<'py, PyAny>>,
        ordered: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let opts = if ordered {
            CollOptions::rank_ordered()
        } else {
            CollOptions::default()
        };
        let c = self.get()?;
        match scalar(&x)? {
            Some(Scalar::Int(v)) => Ok(c
                .allreduce_value_with(v, crate::buf::op(op)?, &opts)
                .map_err(to_py)?
                .into_pyobject(py)?
                .into_any()),
            Some(Scalar::Float(v)) => Ok(c
                .allreduce_value_with(v, crate::buf::op(op)?, &opts)
                .map_err(to_py)?
                .into_pyobject(py)?
                .into_any()),
            None => {
                let target = match out {
                    Some(o) if o.is(&x) => o,
                    Some(o) => {
                        py.import("numpy")?.getattr("copyto")?.call1((&o, &x))?;
                        o
                    }
                    None => x.call_method1("copy", ("C",))?,
                };
                dispatch!(&target, a, T, {
                    let o = crate::buf::op::<T>(op)?;
                    with_slice_mut(a, |s| c.allreduce_with(s, o, &opts).map_err(to_py))
                })?;
                Ok(target)
            }
        }
    }

    /// Collects every member's `x` (same shape everywhere) at the root: there a new array of
    /// shape `(size, *x.shape)`, or `out` with as many elements, filled in rank order and
    /// returned; `None` on the other members.
    #[pyo3(signature = (x, root = 0, out = None))]
    fn gather<'py>(
        &mut self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        root: usize,
        out: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let c = self.get()?;
        let me = c.rank();
        let n = c.size();
        dispatch!(x, a, T, {
            if me != root {
                with_slice(a, |s| c.gather_into(s, &mut [], root).map_err(to_py))?;
                return Ok(None);
            }
            let dst = match out {
                Some(o) => o
                    .downcast_into::<PyArrayDyn<T>>()
                    .map_err(|_| PyTypeError::new_err("out must have the dtype of x"))?,
                None => {
                    let mut dims = vec![n];
                    dims.extend_from_slice(a.shape());
                    new_array::<T>(py, dims)
                }
            };
            with_slice(a, |s| {
                with_slice_mut(&dst, |r| c.gather_into(s, r, root).map_err(to_py))
            })?;
            Ok(Some(dst.into_any()))
        })
    }

    /// Every member gets every member's `x` (same shape everywhere): a new array of shape
    /// `(size, *x.shape)`, or `out` with as many elements.
    #[pyo3(signature = (x, out = None))]
    fn allgather<'py>(
        &mut self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        out: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.get()?;
        let n = c.size();
        dispatch!(x, a, T, {
            let dst = match out {
                Some(o) => o
                    .downcast_into::<PyArrayDyn<T>>()
                    .map_err(|_| PyTypeError::new_err("out must have the dtype of x"))?,
                None => {
                    let mut dims = vec![n];
                    dims.extend_from_slice(a.shape());
                    new_array::<T>(py, dims)
                }
            };
            with_slice(a, |s| {
                with_slice_mut(&dst, |r| c.allgather_into(s, r).map_err(to_py))
            })?;
            Ok(dst.into_any())
        })
    }

    /// The root hands block `i` of `sendbuf` (`size` blocks of `recvbuf`'s length) to member
    /// `i`; every member gets its block in `recvbuf`, which is returned. `sendbuf` is read on
    /// the root only (others may pass `None`).
    #[pyo3(signature = (sendbuf, recvbuf, root = 0))]
    fn scatter<'py>(
        &mut self,
        sendbuf: Option<Bound<'py, PyAny>>,
        recvbuf: Bound<'py, PyAny>,
        root: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.get()?;
        let me = c.rank();
        dispatch!(&recvbuf, b, T, {
            match (&sendbuf, me == root) {
                (Some(s), true) => {
                    let a = s.downcast::<PyArrayDyn<T>>().map_err(|_| {
                        PyTypeError::new_err("sendbuf must have the dtype of recvbuf")
                    })?;
                    with_slice(a, |s| {
                        with_slice_mut(b, |r| c.scatter_into(s, r, root).map_err(to_py))
                    })
                }
                (None, true) => Err(PyValueError::new_err("the root must pass sendbuf")),
                (_, false) => with_slice_mut(b, |r| c.scatter_into(&[], r, root).map_err(to_py)),
            }
        })?;
        Ok(recvbuf)
    }

    /// Member `i` sends block `j` of `x` (first dimension `size`) to member `j` and receives
    /// member `j`'s block `i` as block `j` of the result: a new array shaped like `x`, or
    /// `out`.
    #[pyo3(signature = (x, out = None))]
    fn alltoall<'py>(
        &mut self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        out: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.get()?;
        dispatch!(x, a, T, {
            let dst = match out {
                Some(o) => o
                    .downcast_into::<PyArrayDyn<T>>()
                    .map_err(|_| PyTypeError::new_err("out must have the dtype of x"))?,
                None => new_array::<T>(py, a.shape().to_vec()),
            };
            with_slice(a, |s| {
                with_slice_mut(&dst, |r| c.alltoall_into(s, r).map_err(to_py))
            })?;
            Ok(dst.into_any())
        })
    }

    /// Lays the members out on a Cartesian grid of extents `dims` (their product is `size`),
    /// `periods[d]` true for a dimension that wraps around; row-major, a member's rank is its
    /// grid index. Local, but every member declares the same grid before its next collective.
    fn set_cartesian(&mut self, dims: Vec<usize>, periods: Vec<bool>) -> PyResult<()> {
        self.get()?.set_cartesian(&dims, &periods).map_err(to_py)
    }

    /// This member's coordinates on the grid.
    fn cart_coords(&mut self) -> PyResult<Vec<usize>> {
        self.get()?.cart_coords().map_err(to_py)
    }

    /// `(source, dest)`: the members `disp` steps behind and ahead along dimension `dim`
    /// (`None` past the edge of a non-periodic dimension), as `MPI_Cart_shift`.
    #[pyo3(signature = (dim, disp = 1))]
    fn cart_shift(&mut self, dim: usize, disp: isize) -> PyResult<(Option<usize>, Option<usize>)> {
        self.get()?.cart_shift(dim, disp).map_err(to_py)
    }

    /// Gives this member the edges of a distributed graph: it receives from `sources` and
    /// sends to `destinations` in the neighbour collectives (ranks of this communicator).
    fn set_graph(&mut self, sources: Vec<usize>, destinations: Vec<usize>) -> PyResult<()> {
        self.get()?.set_graph(sources, destinations).map_err(to_py)
    }

    /// Sends `x` to every neighbour and returns one entry per source slot of the topology
    /// (grid: dimension 0 behind, ahead, dimension 1 behind, ...): a flat array of what that
    /// neighbour sent, or `None` where the slot has no neighbour.
    fn neighbor_allgather<'py>(
        &mut self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
    ) -> PyResult<Vec<Option<Bound<'py, PyAny>>>> {
        let c = self.get()?;
        dispatch!(x, a, T, {
            let got = with_slice(a, |s| c.neighbor_allgather(s).map_err(to_py))?;
            Ok(got
                .into_iter()
                .map(|b| b.map(|v| PyArray::from_vec(py, v).into_any()))
                .collect())
        })
    }

    /// Sends `blocks[k]` to the `k`-th destination slot (one array per slot, all of one
    /// dtype; `None` for a slot without a neighbour) and returns one entry per source slot,
    /// as [`Comm::neighbor_allgather`].
    fn neighbor_alltoall<'py>(
        &mut self,
        py: Python<'py>,
        blocks: Vec<Option<Bound<'py, PyAny>>>,
    ) -> PyResult<Vec<Option<Bound<'py, PyAny>>>> {
        let c = self.get()?;
        let Some(first) = blocks.iter().flatten().next().cloned() else {
            return Err(PyValueError::new_err(
                "neighbor_alltoall needs at least one array",
            ));
        };
        dispatch!(&first, _a, T, {
            let mut parts: Vec<Vec<T>> = Vec::with_capacity(blocks.len());
            for b in &blocks {
                match b {
                    None => parts.push(Vec::new()),
                    Some(b) => {
                        let a = b.downcast::<PyArrayDyn<T>>().map_err(|_| {
                            PyTypeError::new_err("every block must have the dtype of the first")
                        })?;
                        parts.push(with_slice(a, |s| Ok(s.to_vec()))?);
                    }
                }
            }
            let got = c.neighbor_alltoall(&parts).map_err(to_py)?;
            Ok(got
                .into_iter()
                .map(|b| b.map(|v| PyArray::from_vec(py, v).into_any()))
                .collect())
        })
    }

    /// A new container of `dtype` (`"float64"`, `"float32"`, `"int64"` or `"int32"`) over
    /// `space`.
    #[pyo3(signature = (space, dtype = "float64", name = "container"))]
    fn container(
        slf: Bound<'_, Self>,
        space: &data::Space,
        dtype: &str,
        name: &str,
    ) -> PyResult<data::Container> {
        let inner = {
            let mut me = slf.borrow_mut();
            data::AnyContainer::new(me.get()?, dtype, name, &space.0)?
        };
        Ok(data::Container::new(inner, slf.unbind()))
    }

    /// Partitions `space` with `partitioner` over this communicator's members, or over
    /// `group`; derived partitioners (halos) take the partitioning they derive from as
    /// `base`.
    #[pyo3(signature = (space, partitioner, group = None, base = None))]
    fn partitioning(
        &mut self,
        space: &data::Space,
        partitioner: &data::Partitioner,
        group: Option<&data::Group>,
        base: Option<&data::Partitioning>,
    ) -> PyResult<data::Partitioning> {
        let c = self.get()?;
        let rank = c.world_rank();
        let g = group.map_or_else(|| c.group().clone(), |g| g.0.clone());
        let r = match base {
            Some(b) => ferry::data::Partitioning::derived(&space.0, &partitioner.inner, &b.0),
            None => ferry::data::Partitioning::new(&space.0, &g, &partitioner.inner),
        };
        partitioner.take_callback_error()?;
        r.map(data::Partitioning)
            .map_err(|e| to_py(e.or_rank(rank)))
    }

    /// The group of `group` (default: this communicator's) without the members at the
    /// indices in `removed`; every rank makes the same calls in the same order.
    #[pyo3(signature = (removed, group = None))]
    fn shrink(
        &mut self,
        removed: Vec<usize>,
        group: Option<&data::Group>,
    ) -> PyResult<data::Group> {
        let c = self.get()?;
        let parent = group.map_or_else(|| c.group().clone(), |g| g.0.clone());
        c.data()
            .shrink(&parent, &removed)
            .map(data::Group)
            .map_err(to_py)
    }

    /// Orderly end: every member meets once more, then the transport shuts down. Later calls
    /// raise; a second `finish` does nothing.
    fn finish(&mut self) -> PyResult<()> {
        match self.inner.take() {
            Some(c) if self.outside => c.into_world().finish().map_err(to_py),
            Some(c) => c.finish().map_err(to_py),
            None => Ok(()),
        }
    }

    /// Ends the transport without meeting the other members (what interpreter exit does
    /// for a communicator the program did not finish: after an exception, the others may
    /// never reach a last meeting). Peers still get what this process owes them.
    fn close(&mut self) -> PyResult<()> {
        match self.inner.take() {
            Some(c) => c.into_world().finish().map_err(to_py),
            None => Ok(()),
        }
    }

    fn __repr__(&self) -> String {
        match &self.inner {
            Some(c) => format!(
                "<ferry.Comm rank {} of {} ({})>",
                self.rank,
                c.size(),
                c.backend()
            ),
            None => format!("<ferry.Comm rank {} (finished)>", self.rank),
        }
    }
}
