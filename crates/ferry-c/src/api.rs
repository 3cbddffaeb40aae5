//! ferry's C API (`include/ferry.h` is generated from this file by cbindgen).
//!
//! A program calls `ferry_init` once and gets a `FerryWorld`; point-to-point messages,
//! collectives over the whole world and data containers go through it; `ferry_finalize` ends
//! it. Every function returns `FERRY_OK` (0) or a negative `FerryStatus`; after a failure
//! `ferry_last_error()` describes it (rank, operation, cause). Values come back through
//! out-parameters. Nothing aborts: a dead peer, a bad argument or an internal error is a
//! status code.

use std::ffi::{c_char, c_int, c_void};

use ferry_coll::Group;
use ferry_core::{Element, Error, MsgKey, Result};
use ferry_data::{DataFlow, Instance, Partitioner, Partitioning, Space};
use ferry_facade::World;

use crate::ffi::{guard, last_message, last_status, null_arg};
use crate::typed::{AnyContainer, Elem, Op};

/// Status codes: `FERRY_OK` or the kind of failure.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FerryStatus {
    /// Success.
    FERRY_OK = 0,
    /// A peer died, closed its connection or is unreachable.
    FERRY_ERR_PEER_FAILED = -1,
    /// An operation did not complete within its configured timeout.
    FERRY_ERR_TIMEOUT = -2,
    /// A peer violated the protocol.
    FERRY_ERR_PROTOCOL = -3,
    /// Configuration file or environment is wrong.
    FERRY_ERR_CONFIG = -4,
    /// An argument is invalid (NULL pointer, rank out of range, size mismatch, ...).
    FERRY_ERR_INVALID_ARGUMENT = -5,
    /// An operating-system call failed.
    FERRY_ERR_IO = -6,
    /// A bounded resource (memory, buffers) is exhausted.
    FERRY_ERR_RESOURCE_EXHAUSTED = -7,
    /// Not available on this backend or build.
    FERRY_ERR_UNSUPPORTED = -8,
    /// The MPI library reported an error.
    FERRY_ERR_MPI = -9,
    /// The communicator was revoked underneath the operation.
    FERRY_ERR_REVOKED = -10,
    /// A bug in ferry (caught instead of crashing the program).
    FERRY_ERR_INTERNAL = -11,
}

/// Element types of reductions and containers.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FerryDatatype {
    /// `double`
    FERRY_DOUBLE = 0,
    /// `float`
    FERRY_FLOAT = 1,
    /// `int64_t`
    FERRY_INT64 = 2,
    /// `int32_t`
    FERRY_INT32 = 3,
    /// `uint64_t`
    FERRY_UINT64 = 4,
    /// `uint32_t`
    FERRY_UINT32 = 5,
    /// `int8_t`
    FERRY_INT8 = 6,
    /// `uint8_t`
    FERRY_UINT8 = 7,
}

/// Reduction operations.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FerryOp {
    /// Addition, combined in rank order.
    FERRY_SUM = 0,
    /// Multiplication.
    FERRY_PROD = 1,
    /// Minimum.
    FERRY_MIN = 2,
    /// Maximum.
    FERRY_MAX = 3,
}

/// Built-in partitioners of the data layer.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FerryPartitioner {
    /// Rank 0 holds everything.
    FERRY_PART_MASTER = 0,
    /// Every rank holds everything.
    FERRY_PART_ALL = 1,
    /// Equal 1d blocks.
    FERRY_PART_BLOCK = 2,
    /// Recursive bisection (1d, 2d, 3d).
    FERRY_PART_BISECTION = 3,
}

/// What happens to a container's values when it switches partitionings.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FerryFlow {
    /// Values are not needed.
    FERRY_FLOW_NONE = 0,
    /// Values move to their new holders (reduced if a reduction is given).
    FERRY_FLOW_PRESERVE = 1,
    /// The new part is filled with the reduction's neutral element.
    FERRY_FLOW_INIT = 2,
}

/// This process's view of the job (opaque).
pub struct FerryWorld {
    pub(crate) world: World,
    inst: Instance,
    /// The world's group; carries the topology `ferry_cart_create` or `ferry_graph_create`
    /// laid over it.
    pub(crate) group: Group,
}

/// A distributed array over a 1d, 2d or 3d index space (opaque).
pub struct FerryData {
    c: AnyContainer,
    space: Space,
}

fn elem_of(dt: FerryDatatype) -> Elem {
    match dt {
        FerryDatatype::FERRY_DOUBLE => Elem::F64,
        FerryDatatype::FERRY_FLOAT => Elem::F32,
        FerryDatatype::FERRY_INT64 => Elem::I64,
        FerryDatatype::FERRY_INT32 => Elem::I32,
        FerryDatatype::FERRY_UINT64 => Elem::U64,
        FerryDatatype::FERRY_UINT32 => Elem::U32,
        FerryDatatype::FERRY_INT8 => Elem::I8,
        FerryDatatype::FERRY_UINT8 => Elem::U8,
    }
}

fn op_of(op: FerryOp) -> Op {
    match op {
        FerryOp::FERRY_SUM => Op::Sum,
        FerryOp::FERRY_PROD => Op::Prod,
        FerryOp::FERRY_MIN => Op::Min,
        FerryOp::FERRY_MAX => Op::Max,
    }
}

/// Borrows the world behind a C pointer.
pub(crate) fn world_mut<'a>(w: *mut FerryWorld, op: &'static str) -> Result<&'a mut FerryWorld> {
    // SAFETY: a non-null FerryWorld pointer was returned by ferry_init and not yet finalized
    // (the API contract); C calls are not concurrent on one world.
    unsafe { w.as_mut() }.ok_or_else(|| null_arg(op, "world"))
}

fn data_mut<'a>(d: *mut FerryData, op: &'static str) -> Result<&'a mut FerryData> {
    // SAFETY: as for worlds: a live pointer from ferry_data_new.
    unsafe { d.as_mut() }.ok_or_else(|| null_arg(op, "data"))
}

fn put<T>(out: *mut T, v: T, op: &'static str, what: &str) -> Result<()> {
    if out.is_null() {
        return Err(null_arg(op, what));
    }
    // SAFETY: non-null out-parameter provided by the caller for a value of type T.
    unsafe { out.write(v) };
    Ok(())
}

fn peer(w: &FerryWorld, r: c_int, op: &'static str) -> Result<usize> {
    let n = w.world.size();
    usize::try_from(r).ok().filter(|&r| r < n).ok_or_else(|| {
        Error::invalid(op, format!("rank {r} outside a world of {n}")).on_rank(w.world.rank())
    })
}

/// Bytes of a C buffer (empty for length 0, so a NULL pointer with length 0 is fine).
pub(crate) fn bytes<'a>(p: *const c_void, len: usize, op: &'static str) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null_arg(op, "buffer"));
    }
    // SAFETY: the caller passes a readable buffer of `len` bytes.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

pub(crate) fn bytes_mut<'a>(p: *mut c_void, len: usize, op: &'static str) -> Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(null_arg(op, "buffer"));
    }
    // SAFETY: the caller passes a writable buffer of `len` bytes, not aliased during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}

/// Typed view of a C buffer of `count` elements of `T`.
fn typed_mut<'a, T: Element>(
    p: *mut c_void,
    count: usize,
    op: &'static str,
) -> Result<&'a mut [T]> {
    if count == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(null_arg(op, "buffer"));
    }
    if !(p as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return Err(Error::invalid(
            op,
            format!("buffer not aligned for {}", T::NAME),
        ));
    }
    // SAFETY: non-null, aligned, the caller passes `count` writable elements of T.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<T>(), count) })
}

/// Starts ferry from the environment `ferry run` sets (backend, rank, size) and stores the
/// world in `*out`. Call once per process.
#[no_mangle]
pub extern "C" fn ferry_init(out: *mut *mut FerryWorld) -> c_int {
    guard("ferry_init", || {
        if out.is_null() {
            return Err(null_arg("ferry_init", "out"));
        }
        let world = ferry_facade::init()?;
        let inst = world.data_instance()?;
        let group = inst.world().clone();
        let w = Box::new(FerryWorld { world, inst, group });
        put(out, Box::into_raw(w), "ferry_init", "out")
    })
}

/// Ends the world: waits until every rank got here (so no peer still needs data from this
/// one), shuts the transport down and frees `world`. The world must not be used afterwards,
/// even when this fails.
#[no_mangle]
pub extern "C" fn ferry_finalize(world: *mut FerryWorld) -> c_int {
    guard("ferry_finalize", || {
        if world.is_null() {
            return Err(null_arg("ferry_finalize", "world"));
        }
        // SAFETY: the pointer came from ferry_init (Box::into_raw) and is finalized once.
        let w = unsafe { Box::from_raw(world) };
        let FerryWorld {
            mut world, inst, ..
        } = *w;
        let done = inst.finalize(world.transport());
        done.and(world.finish())
    })
}

/// This process's rank, in `*rank`.
#[no_mangle]
pub extern "C" fn ferry_rank(world: *const FerryWorld, rank: *mut c_int) -> c_int {
    guard("ferry_rank", || {
        let w = world_mut(world.cast_mut(), "ferry_rank")?;
        put(rank, w.world.rank() as c_int, "ferry_rank", "rank")
    })
}

/// Number of processes, in `*size`.
#[no_mangle]
pub extern "C" fn ferry_size(world: *const FerryWorld, size: *mut c_int) -> c_int {
    guard("ferry_size", || {
        let w = world_mut(world.cast_mut(), "ferry_size")?;
        put(size, w.world.size() as c_int, "ferry_size", "size")
    })
}

/// Sends `len` bytes to rank `dest` with `tag`. Messages of one (source, destination, tag)
/// arrive in order.
#[no_mangle]
pub extern "C" fn ferry_send(
    world: *mut FerryWorld,
    buf: *const c_void,
    len: usize,
    dest: c_int,
    tag: u32,
) -> c_int {
    guard("ferry_send", || {
        let w = world_mut(world, "ferry_send")?;
        let dest = peer(w, dest, "ferry_send")?;
        let data = bytes(buf, len, "ferry_send")?;
        w.world.transport().send(dest, MsgKey::user(tag), data)
    })
}

/// Receives the next message from rank `src` with `tag` into `buf` (capacity `cap` bytes);
/// its length goes to `*received` (may be NULL). A longer message is an error.
#[no_mangle]
pub extern "C" fn ferry_recv(
    world: *mut FerryWorld,
    buf: *mut c_void,
    cap: usize,
    src: c_int,
    tag: u32,
    received: *mut usize,
) -> c_int {
    guard("ferry_recv", || {
        let w = world_mut(world, "ferry_recv")?;
        let src = peer(w, src, "ferry_recv")?;
        let mut msg = Vec::new();
        w.world.transport().recv(src, MsgKey::user(tag), &mut msg)?;
        if msg.len() > cap {
            return Err(Error::invalid(
                "ferry_recv",
                format!(
                    "message of {} bytes from rank {src} does not fit the buffer of {cap}",
                    msg.len()
                ),
            )
            .on_rank(w.world.rank()));
        }
        bytes_mut(buf, msg.len(), "ferry_recv")?.copy_from_slice(&msg);
        if !received.is_null() {
            put(received, msg.len(), "ferry_recv", "received")?;
        }
        Ok(())
    })
}

/// Waits until every rank entered the barrier.
#[no_mangle]
pub extern "C" fn ferry_barrier(world: *mut FerryWorld) -> c_int {
    guard("ferry_barrier", || {
        let w = world_mut(world, "ferry_barrier")?;
        ferry_coll::barrier(w.world.transport(), &w.group)
    })
}

/// Copies `len` bytes from rank `root`'s `buf` into every rank's `buf`.
#[no_mangle]
pub extern "C" fn ferry_bcast(
    world: *mut FerryWorld,
    buf: *mut c_void,
    len: usize,
    root: c_int,
) -> c_int {
    guard("ferry_bcast", || {
        let w = world_mut(world, "ferry_bcast")?;
        let root = peer(w, root, "ferry_bcast")?;
        let data = bytes_mut(buf, len, "ferry_bcast")?;
        ferry_coll::broadcast_slice(w.world.transport(), &w.group, root, data)
    })
}

fn reduce_typed<T: Element>(
    w: &mut FerryWorld,
    buf: *mut c_void,
    count: usize,
    op: Op,
    root: Option<usize>,
) -> Result<()> {
    let data = typed_mut::<T>(buf, count, "ferry_allreduce")?;
    let op = op.typed::<T>();
    match root {
        None => ferry_coll::allreduce(w.world.transport(), &w.group, data, &op),
        Some(r) => ferry_coll::reduce(w.world.transport(), &w.group, r, data, &op),
    }
}

fn reduce_any(
    w: &mut FerryWorld,
    buf: *mut c_void,
    count: usize,
    dt: FerryDatatype,
    op: FerryOp,
    root: Option<usize>,
) -> Result<()> {
    let op = op_of(op);
    match elem_of(dt) {
        Elem::F64 => reduce_typed::<f64>(w, buf, count, op, root),
        Elem::F32 => reduce_typed::<f32>(w, buf, count, op, root),
        Elem::I64 => reduce_typed::<i64>(w, buf, count, op, root),
        Elem::I32 => reduce_typed::<i32>(w, buf, count, op, root),
        Elem::U64 => reduce_typed::<u64>(w, buf, count, op, root),
        Elem::U32 => reduce_typed::<u32>(w, buf, count, op, root),
        Elem::I8 => reduce_typed::<i8>(w, buf, count, op, root),
        Elem::U8 => reduce_typed::<u8>(w, buf, count, op, root),
    }
}

/// Combines the `count` elements of `buf` of every rank with `op` (in rank order) and leaves
/// the result in every rank's `buf`.
#[no_mangle]
pub extern "C" fn ferry_allreduce(
    world: *mut FerryWorld,
    buf: *mut c_void,
    count: usize,
    datatype: FerryDatatype,
    op: FerryOp,
) -> c_int {
    guard("ferry_allreduce", || {
        let w = world_mut(world, "ferry_allreduce")?;
        reduce_any(w, buf, count, datatype, op, None)
    })
}

/// Like `ferry_allreduce`, but only rank `root`'s `buf` receives the result.
#[no_mangle]
pub extern "C" fn ferry_reduce(
    world: *mut FerryWorld,
    buf: *mut c_void,
    count: usize,
    datatype: FerryDatatype,
    op: FerryOp,
    root: c_int,
) -> c_int {
    guard("ferry_reduce", || {
        let w = world_mut(world, "ferry_reduce")?;
        let root = peer(w, root, "ferry_reduce")?;
        reduce_any(w, buf, count, datatype, op, Some(root))
    })
}

/// Gathers `len` bytes of every rank into every rank's `recv` (`len * size` bytes, rank
/// order).
#[no_mangle]
pub extern "C" fn ferry_allgather(
    world: *mut FerryWorld,
    send: *const c_void,
    len: usize,
    recv: *mut c_void,
) -> c_int {
    guard("ferry_allgather", || {
        let w = world_mut(world, "ferry_allgather")?;
        let n = w.world.size();
        let mine = bytes(send, len, "ferry_allgather")?;
        let parts = ferry_coll::allgather(w.world.transport(), &w.group, mine)?;
        let out = bytes_mut(recv, len * n, "ferry_allgather")?;
        for (i, p) in parts.iter().enumerate() {
            if p.len() != len {
                return Err(Error::invalid(
                    "ferry_allgather",
                    format!("rank {i} contributed {} bytes, this rank {len}", p.len()),
                )
                .on_rank(w.world.rank()));
            }
            out[i * len..(i + 1) * len].copy_from_slice(p);
        }
        Ok(())
    })
}

/// A new container of `datatype` over the index space `[0, sizes[0]) x ...` of `dims` (1 to
/// 3) dimensions, without a partitioning yet. Every rank creates its containers in the same
/// order.
#[no_mangle]
pub extern "C" fn ferry_data_new(
    world: *mut FerryWorld,
    datatype: FerryDatatype,
    dims: c_int,
    sizes: *const u64,
    out: *mut *mut FerryData,
) -> c_int {
    guard("ferry_data_new", || {
        let w = world_mut(world, "ferry_data_new")?;
        if sizes.is_null() {
            return Err(null_arg("ferry_data_new", "sizes"));
        }
        // SAFETY: the caller passes `dims` sizes (checked to be 1..=3 before reading).
        let s = |i: usize| unsafe { *sizes.add(i) };
        let space = match dims {
            1 => Space::new1(s(0)),
            2 => Space::new2(s(0), s(1)),
            3 => Space::new3(s(0), s(1), s(2)),
            _ => Err(Error::invalid(
                "ferry_data_new",
                format!("{dims} dimensions (1 to 3 supported)"),
            )),
        }?;
        let c = AnyContainer::new(&mut w.inst, elem_of(datatype), "data", &space);
        put(
            out,
            Box::into_raw(Box::new(FerryData { c, space })),
            "ferry_data_new",
            "out",
        )
    })
}

/// Switches `data` to the partitioning `partitioner` gives over the world. With
/// `FERRY_FLOW_PRESERVE` values move to their new holders; `reduce` non-zero combines the
/// copies of several holders with `op` (e.g. `FERRY_PART_ALL` to `FERRY_PART_MASTER` with a
/// sum).
#[no_mangle]
pub extern "C" fn ferry_data_switch(
    world: *mut FerryWorld,
    data: *mut FerryData,
    partitioner: FerryPartitioner,
    flow: FerryFlow,
    reduce: c_int,
    op: FerryOp,
) -> c_int {
    guard("ferry_data_switch", || {
        let w = world_mut(world, "ferry_data_switch")?;
        let d = data_mut(data, "ferry_data_switch")?;
        let p = match partitioner {
            FerryPartitioner::FERRY_PART_MASTER => Partitioner::Master,
            FerryPartitioner::FERRY_PART_ALL => Partitioner::All,
            FerryPartitioner::FERRY_PART_BLOCK => Partitioner::block(),
            FerryPartitioner::FERRY_PART_BISECTION => Partitioner::Bisection,
        };
        let part = Partitioning::new(&d.space, &w.group, &p)?;
        let flow = match flow {
            FerryFlow::FERRY_FLOW_NONE => DataFlow::None,
            FerryFlow::FERRY_FLOW_PRESERVE => DataFlow::Preserve,
            FerryFlow::FERRY_FLOW_INIT => DataFlow::Init,
        };
        let op = (reduce != 0).then(|| op_of(op));
        d.c.switch_to(w.world.transport(), &part, flow, op)
    })
}

/// This rank's mapping `n` of `data` (valid until the next switch): the address of its first
/// element in `*base`, its global index box `[from[d], to[d])` and element strides per
/// dimension (x, y, z; arrays of 3, unused dimensions 0..1 with stride 0). Any out-pointer
/// may be NULL.
#[no_mangle]
pub extern "C" fn ferry_data_mapping(
    data: *mut FerryData,
    n: c_int,
    base: *mut *mut c_void,
    from: *mut i64,
    to: *mut i64,
    strides: *mut u64,
) -> c_int {
    guard("ferry_data_mapping", || {
        let d = data_mut(data, "ferry_data_mapping")?;
        let n = usize::try_from(n)
            .map_err(|_| Error::invalid("ferry_data_mapping", format!("mapping {n}")))?;
        let m = d.c.raw_map(n)?;
        let dims = d.space.dims();
        if !base.is_null() {
            put(base, m.base.cast::<c_void>(), "ferry_data_mapping", "base")?;
        }
        for i in 0..3 {
            let (f, t, s) = if i < dims {
                (m.from[i], m.to[i], m.strides[i] as u64)
            } else {
                (0, 1, 0)
            };
            // SAFETY: non-null out arrays of 3 elements (API contract).
            unsafe {
                if !from.is_null() {
                    from.add(i).write(f);
                }
                if !to.is_null() {
                    to.add(i).write(t);
                }
                if !strides.is_null() {
                    strides.add(i).write(s);
                }
            }
        }
        Ok(())
    })
}

/// Number of mappings this rank holds of `data`, in `*count`.
#[no_mangle]
pub extern "C" fn ferry_data_mapping_count(data: *mut FerryData, count: *mut c_int) -> c_int {
    guard("ferry_data_mapping_count", || {
        let d = data_mut(data, "ferry_data_mapping_count")?;
        put(
            count,
            d.c.num_mappings() as c_int,
            "ferry_data_mapping_count",
            "count",
        )
    })
}

/// Frees a container (all ranks, same order as creation is not required).
#[no_mangle]
pub extern "C" fn ferry_data_free(data: *mut FerryData) -> c_int {
    guard("ferry_data_free", || {
        if data.is_null() {
            return Err(null_arg("ferry_data_free", "data"));
        }
        // SAFETY: from ferry_data_new, freed once.
        drop(unsafe { Box::from_raw(data) });
        Ok(())
    })
}

/// Status of the last failed call on this thread (`FERRY_OK` if none failed yet).
#[no_mangle]
pub extern "C" fn ferry_last_status() -> FerryStatus {
    last_status()
}

/// Message of the last failed call on this thread: names the rank, the operation and the
/// cause. Empty if none failed. Valid until the next failing call on this thread.
#[no_mangle]
pub extern "C" fn ferry_last_error() -> *const c_char {
    last_message()
}

/// A static description of a status code.
#[no_mangle]
pub extern "C" fn ferry_status_string(status: c_int) -> *const c_char {
    let s: &'static [u8] = match status {
        0 => b"ok\0",
        -1 => b"peer failed\0",
        -2 => b"timed out\0",
        -3 => b"protocol violation\0",
        -4 => b"configuration error\0",
        -5 => b"invalid argument\0",
        -6 => b"I/O error\0",
        -7 => b"resource exhausted\0",
        -8 => b"unsupported\0",
        -9 => b"MPI error\0",
        -10 => b"communicator revoked\0",
        -11 => b"internal error\0",
        _ => b"unknown status\0",
    };
    s.as_ptr().cast::<c_char>()
}
