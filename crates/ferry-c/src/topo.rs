//! Virtual topologies of the C API (X6): a Cartesian grid or a distributed graph laid over the
//! world, and the neighbour collectives along its edges (as `MPI_Cart_create`,
//! `MPI_Cart_coords`, `MPI_Cart_shift`, `MPI_Dist_graph_create_adjacent`,
//! `MPI_Neighbor_allgather`, `MPI_Neighbor_alltoall`). `include/ferry.h` is generated from this
//! file and `api.rs`.

use std::ffi::{c_int, c_void};

use ferry_coll::{Cartesian, Graph, Topology};
use ferry_core::{Error, Result};

use crate::api::{bytes, bytes_mut, world_mut, FerryWorld};
use crate::ffi::{guard, null_arg};

/// The rank reported where a grid ends (`ferry_cart_shift`), like `MPI_PROC_NULL`.
pub const FERRY_PROC_NULL: c_int = -1;

/// `n` C ints from `p` as non-negative values, or an error naming `what`.
fn ints(p: *const c_int, n: c_int, op: &'static str, what: &str) -> Result<Vec<usize>> {
    let n =
        usize::try_from(n).map_err(|_| Error::invalid(op, format!("negative number of {what}")))?;
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(null_arg(op, what));
    }
    // SAFETY: the caller passes `n` readable ints at `p` (non-null, checked above).
    let v = unsafe { std::slice::from_raw_parts(p, n) };
    v.iter()
        .map(|&x| {
            usize::try_from(x)
                .map_err(|_| Error::invalid(op, format!("negative entry {x} in {what}")))
        })
        .collect()
}

fn set_topology(w: &mut FerryWorld, topo: Topology) -> Result<()> {
    let rank = w.world.rank();
    w.group = w
        .group
        .clone()
        .with_topology(topo)
        .map_err(|e| e.or_rank(rank))?;
    Ok(())
}

fn grid<'a>(w: &'a FerryWorld, op: &'static str) -> Result<&'a Cartesian> {
    match w.group.topology() {
        Some(Topology::Cartesian(c)) => Ok(c),
        _ => Err(Error::invalid(
            op,
            "the world has no Cartesian topology (ferry_cart_create)",
        )
        .on_rank(w.world.rank())),
    }
}

fn c_rank(r: Option<usize>) -> c_int {
    r.map_or(FERRY_PROC_NULL, |r| r as c_int)
}

/// Lays the ranks out on a Cartesian grid of `ndims` dimensions with extents `dims` (their
/// product is the number of ranks) and `periods[d] != 0` for a dimension that wraps around.
/// Row-major, no reordering: a rank is its grid index. Local, but every rank declares the
/// same grid before its next collective; the collectives then keep to the grid's chain.
#[no_mangle]
pub extern "C" fn ferry_cart_create(
    world: *mut FerryWorld,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
) -> c_int {
    const OP: &str = "ferry_cart_create";
    guard(OP, || {
        let w = world_mut(world, OP)?;
        let d = ints(dims, ndims, OP, "dims")?;
        let p: Vec<bool> = ints(periods, ndims, OP, "periods")?
            .into_iter()
            .map(|x| x != 0)
            .collect();
        let cart = Cartesian::new(&d, &p).map_err(|e| e.or_rank(w.world.rank()))?;
        set_topology(w, Topology::Cartesian(cart))
    })
}

/// This rank's coordinates on the grid in `coords[0..ndims]` (`maxdims` entries available).
#[no_mangle]
pub extern "C" fn ferry_cart_coords(
    world: *mut FerryWorld,
    maxdims: c_int,
    coords: *mut c_int,
) -> c_int {
    const OP: &str = "ferry_cart_coords";
    guard(OP, || {
        let w = world_mut(world, OP)?;
        let c = grid(w, OP)?
            .coords(w.world.rank())
            .map_err(|e| e.on_rank(w.world.rank()))?;
        let cap = usize::try_from(maxdims).unwrap_or(0);
        if cap < c.len() {
            return Err(Error::invalid(
                OP,
                format!("room for {maxdims} coordinates, the grid has {}", c.len()),
            )
            .on_rank(w.world.rank()));
        }
        if coords.is_null() {
            return Err(null_arg(OP, "coords"));
        }
        for (i, x) in c.iter().enumerate() {
            // SAFETY: `coords` is non-null with at least `maxdims >= c.len()` writable ints.
            unsafe { coords.add(i).write(*x as c_int) };
        }
        Ok(())
    })
}

/// The ranks `disp` steps behind (`*source`) and ahead (`*dest`) of this one along dimension
/// `dim`; `FERRY_PROC_NULL` past the edge of a non-periodic dimension.
#[no_mangle]
pub extern "C" fn ferry_cart_shift(
    world: *mut FerryWorld,
    dim: c_int,
    disp: c_int,
    source: *mut c_int,
    dest: *mut c_int,
) -> c_int {
    const OP: &str = "ferry_cart_shift";
    guard(OP, || {
        let w = world_mut(world, OP)?;
        let rank = w.world.rank();
        let dim = usize::try_from(dim)
            .map_err(|_| Error::invalid(OP, format!("dimension {dim}")).on_rank(rank))?;
        let (s, d) = grid(w, OP)?
            .shift(rank, dim, disp as isize)
            .map_err(|e| e.on_rank(rank))?;
        if source.is_null() || dest.is_null() {
            return Err(null_arg(OP, "source or dest"));
        }
        // SAFETY: both out-parameters are non-null (checked above) and point to ints.
        unsafe {
            source.write(c_rank(s));
            dest.write(c_rank(d));
        }
        Ok(())
    })
}

/// Gives this rank the edges of a distributed graph: it receives from the `nsources` ranks in
/// `sources` and sends to the `ndests` ranks in `dests` in the neighbour collectives. Local;
/// the ranks' edges must agree (an edge a->b is in a's `dests` and b's `sources`).
#[no_mangle]
pub extern "C" fn ferry_graph_create(
    world: *mut FerryWorld,
    nsources: c_int,
    sources: *const c_int,
    ndests: c_int,
    dests: *const c_int,
) -> c_int {
    const OP: &str = "ferry_graph_create";
    guard(OP, || {
        let w = world_mut(world, OP)?;
        let s = ints(sources, nsources, OP, "sources")?;
        let d = ints(dests, ndests, OP, "dests")?;
        let g = Graph::new(s, d).map_err(|e| e.or_rank(w.world.rank()))?;
        set_topology(w, Topology::Graph(g))
    })
}

/// Number of source slots (`*nsources`: blocks `ferry_neighbor_allgather` and
/// `ferry_neighbor_alltoall` deliver) and destination slots (`*ndests`: blocks
/// `ferry_neighbor_alltoall` sends) of this rank. A grid has two of each per dimension
/// (behind, ahead), present or not.
#[no_mangle]
pub extern "C" fn ferry_neighbor_count(
    world: *mut FerryWorld,
    nsources: *mut c_int,
    ndests: *mut c_int,
) -> c_int {
    const OP: &str = "ferry_neighbor_count";
    guard(OP, || {
        let w = world_mut(world, OP)?;
        let (s, d) = slots(w, OP)?;
        if nsources.is_null() || ndests.is_null() {
            return Err(null_arg(OP, "nsources or ndests"));
        }
        // SAFETY: both out-parameters are non-null (checked above) and point to ints.
        unsafe {
            nsources.write(s as c_int);
            ndests.write(d as c_int);
        }
        Ok(())
    })
}

fn slots(w: &FerryWorld, op: &'static str) -> Result<(usize, usize)> {
    let rank = w.world.rank();
    let topo = w.group.topology().ok_or_else(|| {
        Error::invalid(
            op,
            "the world has no topology (ferry_cart_create, ferry_graph_create)",
        )
        .on_rank(rank)
    })?;
    let s = topo.sources(rank).map_err(|e| e.on_rank(rank))?.len();
    let d = topo.destinations(rank).map_err(|e| e.on_rank(rank))?.len();
    Ok((s, d))
}

/// Copies the blocks per source slot into `recv` (`nsources * len` bytes); a slot without a
/// neighbour (past a grid's edge) is left as it was. Every block must be `len` bytes.
fn place(
    w: &FerryWorld,
    blocks: Vec<Option<Vec<u8>>>,
    len: usize,
    recv: *mut c_void,
    op: &'static str,
) -> Result<()> {
    let total = blocks.len().checked_mul(len).ok_or_else(|| {
        Error::invalid(
            op,
            format!("{} blocks of {len} bytes overflow", blocks.len()),
        )
        .on_rank(w.world.rank())
    })?;
    let out = bytes_mut(recv, total, op)?;
    for (i, b) in blocks.iter().enumerate() {
        if let Some(b) = b {
            if b.len() != len {
                return Err(Error::invalid(
                    op,
                    format!(
                        "source slot {i} sent {} bytes, this rank expects {len}",
                        b.len()
                    ),
                )
                .on_rank(w.world.rank()));
            }
            out[i * len..(i + 1) * len].copy_from_slice(b);
        }
    }
    Ok(())
}

/// Sends `len` bytes of `send` to every destination and receives one block of `len` bytes per
/// source slot into `recv` (`nsources * len` bytes, slot order; slots without a neighbour are
/// left untouched). Only the topology's neighbours are contacted.
#[no_mangle]
pub extern "C" fn ferry_neighbor_allgather(
    world: *mut FerryWorld,
    send: *const c_void,
    len: usize,
    recv: *mut c_void,
) -> c_int {
    const OP: &str = "ferry_neighbor_allgather";
    guard(OP, || {
        let w = world_mut(world, OP)?;
        let mine = bytes(send, len, OP)?;
        let blocks = ferry_coll::neighbor_allgather(w.world.transport(), &w.group, mine)?;
        place(w, blocks, len, recv, OP)
    })
}

/// Sends block `k` of `send` (`ndests * len` bytes) to the `k`-th destination slot and
/// receives one block of `len` bytes per source slot into `recv` (`nsources * len` bytes;
/// slots without a neighbour are left untouched).
#[no_mangle]
pub extern "C" fn ferry_neighbor_alltoall(
    world: *mut FerryWorld,
    send: *const c_void,
    len: usize,
    recv: *mut c_void,
) -> c_int {
    const OP: &str = "ferry_neighbor_alltoall";
    guard(OP, || {
        let w = world_mut(world, OP)?;
        let (_, d) = slots(w, OP)?;
        let total = d.checked_mul(len).ok_or_else(|| {
            Error::invalid(OP, format!("{d} blocks of {len} bytes overflow"))
                .on_rank(w.world.rank())
        })?;
        let all = bytes(send, total, OP)?;
        let parts: Vec<Vec<u8>> = (0..d)
            .map(|k| all[k * len..(k + 1) * len].to_vec())
            .collect();
        let blocks = ferry_coll::neighbor_alltoall(w.world.transport(), &w.group, &parts)?;
        place(w, blocks, len, recv, OP)
    })
}
