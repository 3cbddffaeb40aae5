//! LAIK's reduction operations as the data layer's (`flow_of`, LAIK's bitwise ones for
//! integer types only), and reductions over elements of program-registered types
//! (`laik_type_set_init`, `laik_type_set_reduce`): any `Laik_ReductionOperation` on such a
//! container calls the program's functions with that operation, as LAIK does.
//!
//! The container holds the elements as bytes (see `bytes.rs`); every range of a partitioning
//! is a whole number of elements there, and the data layer's transition folds whole rows of
//! intersections of such ranges, so the program's function always sees whole elements. The
//! data layer's shortcut for All -> All with a reduction (an all-reduce through the
//! collectives) could cut the byte array anywhere, so that one switch is made as two:
//! reduce onto the group's first member, then copy to everybody.

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use ferry_core::{Error, ErrorKind, Result};
use ferry_data::{DataFlow, Partitioner, Partitioning};

use super::data::LaikType;
use super::run;
use crate::typed::{AnyContainer, ByteReduce, Elem, Op, ReduceFn};

/// `void init(void* base, int count, int op)` (LAIK's `laik_init_t`): neutral elements.
pub type InitFn = extern "C" fn(*mut c_void, c_int, c_int);

/// A type handle's address with the functions registered for it.
type Entry = (usize, Option<InitFn>, Option<ReduceFn>);

/// The functions registered per type (keyed by the type handle's address; registered types
/// live until the process ends).
static CALLBACKS: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn with_entry<R>(ty: *mut LaikType, f: impl FnOnce(&mut Entry) -> R) -> R {
    let mut cbs = CALLBACKS.lock().unwrap_or_else(|p| p.into_inner());
    let key = ty as usize;
    let k = match cbs.iter().position(|e| e.0 == key) {
        Some(k) => k,
        None => {
            cbs.push((key, None, None));
            cbs.len() - 1
        }
    };
    f(&mut cbs[k])
}

fn registered(ty: *mut LaikType, op: &'static str) -> Result<()> {
    if super::data::registered_size(ty, op)?.is_none() {
        return Err(Error::invalid(
            op,
            "LAIK's predefined types have their own reductions; register a type with \
             laik_type_register",
        ));
    }
    Ok(())
}

/// The function giving elements of `ty` the neutral element of an operation (Init flow).
#[no_mangle]
pub extern "C" fn laik_type_set_init(ty: *mut LaikType, init: Option<InitFn>) {
    run("laik_type_set_init", || {
        registered(ty, "laik_type_set_init")?;
        with_entry(ty, |e| e.1 = init);
        Ok(())
    })
}

/// The function combining elements of `ty` (`out = in1 op in2`, `count` elements).
#[no_mangle]
pub extern "C" fn laik_type_set_reduce(ty: *mut LaikType, reduce: Option<ReduceFn>) {
    run("laik_type_set_reduce", || {
        registered(ty, "laik_type_set_reduce")?;
        with_entry(ty, |e| e.2 = reduce);
        Ok(())
    })
}

/// One step of a switch of a registered-type container: a partitioning of the program's
/// space, the flow and the operation for the data layer.
pub(crate) type Step = (Partitioning, DataFlow, Option<Op>);

/// An init function with the operation to pass it.
pub(crate) type Init = (InitFn, c_int);

/// The steps switching a container of `ty` (elements of `size` bytes, called `name`) from
/// `from` to `to` with LAIK's `(flow, redop)` (both non-zero), and the init function to run
/// over the new mappings afterwards (Init flow).
pub(crate) fn steps(
    ty: *mut LaikType,
    size: usize,
    name: &str,
    from: Option<&Partitioning>,
    to: &Partitioning,
    (flow, redop): (c_int, c_int),
    op: &'static str,
) -> Result<(Vec<Step>, Option<Init>)> {
    let (init, reduce) = with_entry(ty, |e| (e.1, e.2));
    let missing = |what: &str| {
        Error::new(ErrorKind::Unsupported, op).with_detail(format!(
            "reduction {redop} over `{name}`, whose elements are of a registered type of \
             {size} bytes without {what}"
        ))
    };
    match flow {
        // Init: nothing moves; the new mappings get the neutral element.
        2 => {
            let f = init.ok_or_else(|| missing("an init function (laik_type_set_init)"))?;
            Ok((vec![(to.clone(), DataFlow::None, None)], Some((f, redop))))
        }
        1 => {
            let f = reduce.ok_or_else(|| missing("a reduce function (laik_type_set_reduce)"))?;
            let o = Some(Op::Bytes(ByteReduce {
                f,
                size,
                code: redop,
            }));
            if from.is_some_and(|p| p.is_replicated()) && to.is_replicated() {
                let first = Partitioning::new(to.space(), to.group(), &Partitioner::Master)?;
                return Ok((
                    vec![
                        (first, DataFlow::Preserve, o),
                        (to.clone(), DataFlow::Preserve, None),
                    ],
                    None,
                ));
            }
            Ok((vec![(to.clone(), DataFlow::Preserve, o)], None))
        }
        _ => Err(Error::invalid(op, format!("data flow {flow}"))),
    }
}

/// Calls `init` over every element the container holds now (row by row: rows are whole
/// elements, padding between rows is left alone).
pub(crate) fn init_all(
    c: &mut AnyContainer,
    size: usize,
    dims: usize,
    init: (InitFn, c_int),
) -> Result<()> {
    for m in 0..c.num_mappings() {
        let raw = c.raw_map(m)?;
        let ext = |d: usize| {
            if d < dims {
                (raw.to[d] - raw.from[d]).max(0) as usize
            } else {
                1
            }
        };
        let count = ext(0) / size;
        for z in 0..ext(2) {
            for y in 0..ext(1) {
                let off = y * raw.strides[1] + z * raw.strides[2];
                // SAFETY: the row lies inside the mapping's allocation (its box and strides
                // come from the data layer's layout of that allocation).
                let row = unsafe { raw.base.add(off) };
                (init.0)(row.cast(), count as c_int, init.1);
            }
        }
    }
    Ok(())
}

/// `LAIK_RO_Any`: the copies of an index are equal, any one of them serves.
const RO_ANY: c_int = 7;
/// `LAIK_RO_Single`: an index has one copy only.
const RO_SINGLE: c_int = 8;

/// The operation a switch runs for LAIK's `redop`: `LAIK_RO_Any` and `LAIK_RO_Single` combine
/// nothing (one copy is taken, as without an operation), so they run as `LAIK_RO_None`.
pub(crate) fn combining(redop: c_int) -> c_int {
    match redop {
        RO_ANY | RO_SINGLE => 0,
        r => r,
    }
}

/// LAIK defines `LAIK_RO_And` and `LAIK_RO_Or` (bitwise) for its integer types only; a
/// container of float or double elements gets LAIK's error for an unsupported reduction.
pub(crate) fn bitwise_ok(elem: Elem, name: &str, op: &'static str) -> Result<()> {
    if matches!(elem, Elem::F64 | Elem::F32) {
        return Err(
            Error::new(ferry_core::ErrorKind::Unsupported, op).with_detail(format!(
                "bitwise reduction (LAIK_RO_And / LAIK_RO_Or) over `{name}`, whose elements \
                 are floating point (LAIK defines them for integer types only)"
            )),
        );
    }
    Ok(())
}

/// `Laik_DataFlow` and `Laik_ReductionOperation` to the data layer's flow and operation.
pub(crate) fn flow_of(
    flow: c_int,
    redop: c_int,
    op: &'static str,
) -> Result<(DataFlow, Option<Op>)> {
    let redop = combining(redop);
    let f = match flow {
        0 => DataFlow::None,
        1 => DataFlow::Preserve,
        2 => DataFlow::Init,
        _ => return Err(Error::invalid(op, format!("data flow {flow}"))),
    };
    let o = match redop {
        0 => None,
        1 => Some(Op::Sum),
        2 => Some(Op::Prod),
        3 => Some(Op::Min),
        4 => Some(Op::Max),
        5 => Some(Op::And),
        6 => Some(Op::Or),
        _ => {
            return Err(Error::new(ferry_core::ErrorKind::Unsupported, op)
                .with_detail(format!("reduction operation {redop}")))
        }
    };
    Ok(match f {
        DataFlow::None => (DataFlow::None, None),
        _ => (f, o),
    })
}
