//! Algorithm choice by message size and group size (M4, 000 §7.2.2).

use ferry_core::{Element, Error, Result, Transport};

use crate::comm::{Buf, Ctx};
use crate::op::ReduceOp;
use crate::{linear, Algorithm, CollOptions, ReduceOrder};

fn unsupported(coll: &'static str, alg: Algorithm) -> Error {
    Error::invalid(
        coll,
        format!("algorithm {alg:?} is not available for {coll}"),
    )
}

pub(crate) fn barrier(t: &mut dyn Transport, c: &Ctx<'_>, opts: &CollOptions) -> Result<()> {
    match opts.algorithm {
        Algorithm::Auto | Algorithm::Linear => linear::barrier(t, c),
        a => Err(unsupported("barrier", a)),
    }
}

pub(crate) fn broadcast(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    buf: &mut Buf<'_>,
    opts: &CollOptions,
) -> Result<()> {
    match opts.algorithm {
        Algorithm::Auto | Algorithm::Linear => linear::broadcast(t, c, root, buf),
        a => Err(unsupported("broadcast", a)),
    }
}

pub(crate) fn reduce<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    data: &mut [T],
    op: &ReduceOp<T>,
    opts: &CollOptions,
) -> Result<()> {
    match opts.algorithm {
        Algorithm::Auto | Algorithm::Linear | Algorithm::Master => {
            linear::reduce(t, c, root, data, op)
        }
        a => Err(unsupported("reduce", a)),
    }
}

pub(crate) fn allreduce<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    data: &mut [T],
    op: &ReduceOp<T>,
    opts: &CollOptions,
) -> Result<()> {
    let _ = ReduceOrder::Auto;
    match opts.algorithm {
        Algorithm::Auto | Algorithm::Linear | Algorithm::Master => {
            linear::allreduce_master(t, c, 0, data, op)
        }
        Algorithm::Direct => linear::allreduce_direct(t, c, data, op),
        a => Err(unsupported("allreduce", a)),
    }
}

pub(crate) fn gather(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    send: &[u8],
    opts: &CollOptions,
) -> Result<Option<Vec<Vec<u8>>>> {
    match opts.algorithm {
        Algorithm::Auto | Algorithm::Linear => linear::gather(t, c, root, send),
        a => Err(unsupported("gather", a)),
    }
}

pub(crate) fn scatter(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    parts: Option<&[Vec<u8>]>,
    opts: &CollOptions,
) -> Result<Vec<u8>> {
    match opts.algorithm {
        Algorithm::Auto | Algorithm::Linear => linear::scatter(t, c, root, parts),
        a => Err(unsupported("scatter", a)),
    }
}

pub(crate) fn allgather(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    send: &[u8],
    opts: &CollOptions,
) -> Result<Vec<Vec<u8>>> {
    match opts.algorithm {
        Algorithm::Auto | Algorithm::Direct => linear::allgather_direct(t, c, send),
        Algorithm::Linear | Algorithm::Master => linear::allgather_master(t, c, send),
        a => Err(unsupported("allgather", a)),
    }
}

pub(crate) fn alltoall(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    parts: &[Vec<u8>],
    opts: &CollOptions,
) -> Result<Vec<Vec<u8>>> {
    match opts.algorithm {
        Algorithm::Auto | Algorithm::Direct | Algorithm::Linear => {
            linear::alltoall_direct(t, c, parts)
        }
        Algorithm::Pairwise => linear::alltoall_pairwise(t, c, parts),
        a => Err(unsupported("alltoall", a)),
    }
}
