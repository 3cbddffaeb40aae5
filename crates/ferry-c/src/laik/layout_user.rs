//! Layouts from a container's layout factory (`laik_data_set_layout_factory`), and LAIK's
//! generic layout functions over mappings (`laik_layout_pack_gen`, `_unpack_gen`,
//! `_copy_gen`, `laik_data_copy`).
//!
//! Ferry's data layer lays a mapping out by element strides per dimension. A layout the
//! factory returns is honoured when its `offset` function is such a layout over the mapping's
//! box: 0 at the box's first index and, for every index, the sum of the index's distance from
//! it times one non-negative stride per dimension, without two indexes sharing an offset
//! (lexicographic in any dimension order, with or without padding). The container's mappings
//! then use those strides, so every element sits where the layout's `offset` says, and the
//! data layer moves the elements itself; a layout's `pack`, `unpack` and `copy` would give the
//! same bytes (LAIK's contract: packing follows the lexicographic order of the range), so
//! they are not called. Any other layout (a section per range, a permutation, a space-filling
//! curve) is LAIK's fatal error naming the layout and the index where it leaves the strides.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, CStr};
use std::sync::{Arc, Mutex};

use ferry_core::{Error, Result};
use ferry_data::{LayoutOrder, Range};

use super::data::LaikMapping;
use super::layout::{is_lex, LaikLayout};
use super::part::{LaikIndex, LaikRange, LaikSpace};
use super::{obj, run};

/// A mapping box (first and one-past-last index), the key of remembered strides.
type BoxKey = ([i64; 3], [i64; 3]);

/// `laik_layout_factory_t`.
pub type LayoutFactory = extern "C" fn(c_int, *mut LaikRange) -> *mut LaikLayout;

fn range_dims(r: &LaikRange) -> usize {
    // SAFETY: spaces live until the process ends; NULL is taken as 1d.
    unsafe { r.space.as_ref() }.map_or(1, |s| s.dims.clamp(1, 3) as usize)
}

/// The next index of `r` after `idx` in lexicographic order (x fastest); false at the end.
fn next_lex(r: &LaikRange, idx: &mut [i64; 3]) -> bool {
    let dims = range_dims(r);
    for (d, i) in idx.iter_mut().enumerate().take(dims) {
        *i += 1;
        if *i < r.to.i[d] {
            return true;
        }
        *i = r.from.i[d];
    }
    false
}

fn empty(r: &LaikRange) -> bool {
    (0..range_dims(r)).any(|d| r.from.i[d] >= r.to.i[d])
}

fn addr(m: &LaikMapping, idx: &[i64; 3], dims: usize, op: &'static str) -> Result<*mut u8> {
    m.addr(idx, dims).ok_or_else(|| {
        Error::invalid(
            op,
            format!(
                "index {:?} is outside the mapping",
                &idx[..dims.clamp(1, 3)]
            ),
        )
    })
}

/// Moves elements between a mapping and a buffer in lexicographic order from `idx` on, as
/// many whole elements as `size` bytes hold; `idx` is left at the next index (the range's
/// end when all are done). Returns the number of elements moved.
fn move_elems(
    m: *mut LaikMapping,
    r: *mut LaikRange,
    idx: *mut LaikIndex,
    buf: *mut c_char,
    size: c_uint,
    pack: bool,
    op: &'static str,
) -> Result<c_uint> {
    let m = obj(m, op, "mapping")?;
    let r = *obj(r, op, "range")?;
    let idx = obj(idx, op, "index")?;
    if buf.is_null() {
        return Err(crate::ffi::null_arg(op, "buffer"));
    }
    let dims = range_dims(&r);
    let es = m.elem_size();
    if empty(&r) || (0..dims).all(|d| idx.i[d] == r.to.i[d]) {
        return Ok(0);
    }
    let mut left = size as usize;
    let mut count: c_uint = 0;
    let mut at = buf.cast::<u8>();
    while left >= es {
        let p = addr(m, &idx.i, dims, op)?;
        // SAFETY: `p` addresses one element inside the mapping (checked against its box) and
        // `at` one inside the program's buffer of `size` bytes (LAIK's contract); they do not
        // overlap (a buffer is not the mapping's memory).
        unsafe {
            if pack {
                std::ptr::copy_nonoverlapping(p, at, es);
            } else {
                std::ptr::copy_nonoverlapping(at, p, es);
            }
            at = at.add(es);
        }
        left -= es;
        count += 1;
        if !next_lex(&r, &mut idx.i) {
            idx.i = r.to.i;
            break;
        }
    }
    Ok(count)
}

/// Packs elements of range `r` of mapping `m` from index `idx` on into `buf` (at most `size`
/// bytes) in lexicographic order; returns the count, 0 when `idx` is at the range's end.
#[no_mangle]
pub unsafe extern "C" fn laik_layout_pack_gen(
    m: *mut LaikMapping,
    r: *mut LaikRange,
    idx: *mut LaikIndex,
    buf: *mut c_char,
    size: c_uint,
) -> c_uint {
    run("laik_layout_pack_gen", || {
        move_elems(m, r, idx, buf, size, true, "laik_layout_pack_gen")
    })
}

/// Unpacks elements packed by `laik_layout_pack_gen` from `buf` (`size` bytes) into range `r`
/// of mapping `m` from index `idx` on; returns the count.
#[no_mangle]
pub unsafe extern "C" fn laik_layout_unpack_gen(
    m: *mut LaikMapping,
    r: *mut LaikRange,
    idx: *mut LaikIndex,
    buf: *mut c_char,
    size: c_uint,
) -> c_uint {
    run("laik_layout_unpack_gen", || {
        move_elems(m, r, idx, buf, size, false, "laik_layout_unpack_gen")
    })
}

fn copy_range(
    r: *mut LaikRange,
    from: *mut LaikMapping,
    to: *mut LaikMapping,
    op: &'static str,
) -> Result<()> {
    let r = *obj(r, op, "range")?;
    let f = obj(from, op, "source mapping")?;
    let f_size = f.elem_size();
    let t = obj(to, op, "target mapping")?;
    if f_size != t.elem_size() {
        return Err(Error::invalid(
            op,
            format!(
                "elements of {f_size} bytes copied to elements of {} bytes",
                t.elem_size()
            ),
        ));
    }
    if empty(&r) {
        return Ok(());
    }
    let dims = range_dims(&r);
    let mut idx = r.from.i;
    loop {
        // SAFETY: `from` and `to` are distinct live mappings (checked by obj); re-borrowed for
        // each element.
        let (fp, tp) = unsafe { (addr(&*from, &idx, dims, op)?, addr(&*to, &idx, dims, op)?) };
        // SAFETY: both addresses lie inside their mappings (checked); `copy` allows the two
        // mappings to be one.
        unsafe { std::ptr::copy(fp, tp, f_size) };
        if !next_lex(&r, &mut idx) {
            return Ok(());
        }
    }
}

/// Copies the elements of range `r` from mapping `from` to mapping `to`, each at its own
/// place in each mapping.
#[no_mangle]
pub unsafe extern "C" fn laik_layout_copy_gen(
    r: *mut LaikRange,
    from: *mut LaikMapping,
    to: *mut LaikMapping,
) {
    run("laik_layout_copy_gen", || {
        copy_range(r, from, to, "laik_layout_copy_gen")
    })
}

/// LAIK's copy of a range between two mappings of containers of one element type.
#[no_mangle]
pub extern "C" fn laik_data_copy(r: *mut LaikRange, from: *mut LaikMapping, to: *mut LaikMapping) {
    run("laik_data_copy", || {
        copy_range(r, from, to, "laik_data_copy")
    })
}

/// The description a layout gives of itself, for error messages.
fn describe(l: *mut LaikLayout) -> String {
    // SAFETY: a layout header from the program's factory.
    let Some(f) = (unsafe { l.as_ref() }).and_then(|h| h.describe) else {
        return "(no description)".into();
    };
    // SAFETY: the layout's own function, called with its layout.
    let p = unsafe { f(l) };
    if p.is_null() {
        return "(no description)".into();
    }
    // SAFETY: describe returns a NUL-terminated string (LAIK's contract).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Element strides of box `b` under the layout `l` (one section), checked index by index.
fn strides_of(l: *mut LaikLayout, b: &LaikRange, op: &'static str) -> Result<[usize; 3]> {
    let h = obj(l, op, "layout")?;
    let dims = range_dims(b);
    let what = || format!("layout '{}'", describe(l));
    if h.dims as usize != dims || h.map_count != 1 {
        return Err(Error::invalid(
            op,
            format!(
                "{} has {} dimensions and {} allocations for one {dims}d range",
                what(),
                h.dims,
                h.map_count
            ),
        ));
    }
    let f = h
        .offset
        .ok_or_else(|| Error::invalid(op, format!("{} has no offset function", what())))?;
    let off = |i: [i64; 3]| {
        let mut idx = LaikIndex { i };
        // SAFETY: the layout's own function, called with its layout, section 0 and an index
        // of the range the layout was made for.
        unsafe { f(l, 0, &mut idx) }
    };
    let ext = |d: usize| (b.to.i[d] - b.from.i[d]).max(0);
    let first = off(b.from.i);
    if first != 0 {
        return Err(Error::invalid(
            op,
            format!(
                "{} puts the first index of {:?}..{:?} at offset {first}, not 0",
                what(),
                &b.from.i[..dims],
                &b.to.i[..dims]
            ),
        ));
    }
    let mut strides = [0i64; 3];
    let mut reach = 1i64;
    for d in 0..dims {
        if ext(d) > 1 {
            let mut i = b.from.i;
            i[d] += 1;
            strides[d] = off(i);
        } else {
            // A dimension of extent 1 never moves the offset; any stride lays it out.
            strides[d] = reach;
        }
        reach = reach.max(strides[d] * ext(d).max(1));
    }
    // Strides must be non-negative and never let two indexes meet: ordered by stride, each
    // one clears the whole extent of the dimensions below it.
    let mut order: Vec<usize> = (0..dims).filter(|&d| ext(d) > 1).collect();
    order.sort_by_key(|&d| strides[d]);
    let mut span = 1i64;
    for &d in &order {
        if strides[d] < span {
            return Err(Error::invalid(
                op,
                format!(
                    "{} is not a strided layout ferry can hold: dimension {d} has stride {} \
                     over a span of {span}",
                    what(),
                    strides[d]
                ),
            ));
        }
        span = strides[d] * ext(d);
    }
    if ext(0) > 0 && (0..dims).all(|d| ext(d) > 0) {
        let mut i = b.from.i;
        loop {
            let want: i64 = (0..dims).map(|d| (i[d] - b.from.i[d]) * strides[d]).sum();
            let got = off(i);
            if got != want {
                return Err(Error::invalid(
                    op,
                    format!(
                        "{} is not a strided layout ferry can hold: index {:?} is at offset \
                         {got}, strides {:?} give {want}",
                        what(),
                        &i[..dims],
                        &strides[..dims]
                    ),
                ));
            }
            if !next_lex(b, &mut i) {
                break;
            }
        }
    }
    Ok(strides.map(|s| s as usize))
}

/// The layout order of a container whose factory is `f`, over space `space`: for each
/// mapping box, the factory's layout of that box (lexicographic layouts of this library take
/// the lexicographic strides), checked and remembered per box. The factory's answer for the
/// whole space is checked at once, so a layout ferry cannot hold is reported when the factory
/// is set.
pub(crate) fn factory_order(
    f: LayoutFactory,
    space: *mut LaikSpace,
    op: &'static str,
) -> Result<LayoutOrder> {
    let whole = {
        let sp = obj(space, op, "space")?;
        let r = sp.space.range();
        LaikRange {
            space,
            from: LaikIndex { i: r.from() },
            to: LaikIndex { i: r.to() },
        }
    };
    let ask = move |b: &LaikRange| -> Result<[usize; 3]> {
        let mut r = *b;
        let l = f(1, &mut r);
        if l.is_null() {
            return Err(Error::invalid(op, "the layout factory returned NULL"));
        }
        if is_lex(l) {
            return Ok(lex_strides(b));
        }
        strides_of(l, b, op)
    };
    ask(&whole)?;
    let space_addr = space as usize;
    let cache: Mutex<HashMap<BoxKey, [usize; 3]>> = Mutex::new(HashMap::new());
    Ok(LayoutOrder::Custom(Arc::new(move |r: &Range| {
        let key = (r.from(), r.to());
        if let Some(s) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return *s;
        }
        let b = LaikRange {
            space: space_addr as *mut LaikSpace,
            from: LaikIndex { i: key.0 },
            to: LaikIndex { i: key.1 },
        };
        match ask(&b) {
            Ok(s) => {
                cache
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, s);
                s
            }
            // The data layer asks for strides without a way to fail: the layout error is
            // LAIK's fatal error, reported with the operation and cause.
            Err(e) => super::die(
                op,
                crate::api::FerryStatus::FERRY_ERR_INVALID_ARGUMENT,
                &e.to_string(),
            ),
        }
    })))
}

/// The x-fastest strides of box `b` (the lexicographic layouts of this library).
fn lex_strides(b: &LaikRange) -> [usize; 3] {
    let dims = range_dims(b);
    let ext = |d: usize| {
        if d < dims {
            (b.to.i[d] - b.from.i[d]).max(0) as usize
        } else {
            1
        }
    };
    [1, ext(0), ext(0) * ext(1)]
}
