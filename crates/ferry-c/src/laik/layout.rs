//! LAIK's layout interface (`data.h`): the public `struct _Laik_Layout` (dimensions, number
//! of allocations, element count and the functions a layout implements), `laik_init_layout`
//! for layouts a program defines, and LAIK's lexicographic layout objects
//! (`laik_new_layout_lex` over `n` ranges, one section per range with x fastest, with
//! `laik_layout_lex_stride` and `laik_offset`). How a container honours a layout a factory
//! returns is in `layout_user.rs`.

use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_uint, CString};
use std::sync::Mutex;

use ferry_core::{Error, Result};

use super::data::LaikMapping;
use super::part::{LaikIndex, LaikRange, LaikSpace};
use super::{obj, run};

/// `laik_layout_section_t`: the section holding an index, -1 if none.
pub type SectionFn = unsafe extern "C" fn(*mut LaikLayout, *mut LaikIndex) -> c_int;
/// `laik_layout_mapno_t`: the allocation (mapping) number of section `n`.
pub type MapnoFn = unsafe extern "C" fn(*mut LaikLayout, c_int) -> c_int;
/// `laik_layout_offset_t`: the element offset of an index in section `n`.
pub type OffsetFn = unsafe extern "C" fn(*mut LaikLayout, c_int, *mut LaikIndex) -> i64;
/// `laik_layout_reuse_t`: whether section `n` can reuse section `nold` of an old layout.
pub type ReuseFn = unsafe extern "C" fn(*mut LaikLayout, c_int, *mut LaikLayout, c_int) -> bool;
/// `laik_layout_describe_t`: a description for debug output.
pub type DescribeFn = unsafe extern "C" fn(*mut LaikLayout) -> *mut c_char;
/// `laik_layout_pack_t` and `laik_layout_unpack_t`: (un)pack the elements of a range of a
/// mapping from index `idx` on, into / out of a buffer of `size` bytes; returns the count.
pub type PackFn = unsafe extern "C" fn(
    *mut LaikMapping,
    *mut LaikRange,
    *mut LaikIndex,
    *mut c_char,
    c_uint,
) -> c_uint;
/// `laik_layout_copy_t`: copy a range from one mapping to another.
pub type CopyFn = unsafe extern "C" fn(*mut LaikRange, *mut LaikMapping, *mut LaikMapping);

/// `struct _Laik_Layout` of laik.h, field by field.
#[repr(C)]
pub struct LaikLayout {
    /// Dimensions of the index space laid out.
    pub dims: c_int,
    /// Number of allocations (mappings) the layout needs.
    pub map_count: c_int,
    /// Number of elements the layout covers.
    pub count: u64,
    /// Section of an index.
    pub section: Option<SectionFn>,
    /// Allocation number of a section.
    pub mapno: Option<MapnoFn>,
    /// Offset of an index in a section.
    pub offset: Option<OffsetFn>,
    /// Reuse of an old layout's allocation.
    pub reuse: Option<ReuseFn>,
    /// Description for debug output.
    pub describe: Option<DescribeFn>,
    /// Packing into a buffer.
    pub pack: Option<PackFn>,
    /// Unpacking from a buffer.
    pub unpack: Option<PackFn>,
    /// Copying between mappings.
    pub copy: Option<CopyFn>,
}

/// LAIK's lexicographic layout: the public header followed by the ranges of its sections.
#[repr(C)]
struct LexLayout {
    h: LaikLayout,
    ranges: Vec<LaikRange>,
    /// The last description handed out (`describe` returns a pointer into it).
    text: CString,
}

/// Addresses of the lexicographic layouts this library made: a layout pointer is one of them
/// or a program's own (whose header is all ferry may read).
static LEX: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn lex_set<R>(f: impl FnOnce(&mut HashSet<usize>) -> R) -> R {
    let mut g = LEX.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(HashSet::new))
}

/// Whether `l` is a lexicographic layout of this library.
pub(crate) fn is_lex(l: *mut LaikLayout) -> bool {
    lex_set(|s| s.contains(&(l as usize)))
}

fn lex<'a>(l: *mut LaikLayout, op: &'static str) -> Result<&'a mut LexLayout> {
    if l.is_null() {
        return Err(crate::ffi::null_arg(op, "layout"));
    }
    if !is_lex(l) {
        return Err(Error::invalid(
            op,
            "the layout is not a lexicographic layout of laik_new_layout_lex",
        ));
    }
    // SAFETY: registered pointers are leaked LexLayout boxes whose first field is the header.
    Ok(unsafe { &mut *l.cast::<LexLayout>() })
}

fn space_dims(s: *mut LaikSpace) -> usize {
    // SAFETY: spaces live until the process ends; NULL is taken as 1d.
    unsafe { s.as_ref() }.map_or(1, |s| s.dims.clamp(1, 3) as usize)
}

impl LexLayout {
    /// The range of section `n`.
    fn section(&self, n: c_int, op: &'static str) -> Result<&LaikRange> {
        usize::try_from(n)
            .ok()
            .and_then(|k| self.ranges.get(k))
            .ok_or_else(|| {
                Error::invalid(
                    op,
                    format!("section {n} of a layout of {}", self.ranges.len()),
                )
            })
    }

    /// Element strides of x, y, z in section `n` (x fastest; dimensions beyond the space's
    /// count as extent 1).
    fn strides(&self, n: c_int, op: &'static str) -> Result<(usize, [i64; 3])> {
        let r = self.section(n, op)?;
        Ok((space_dims(r.space), lex_strides_of(r)))
    }
}

/// The x-fastest strides of a range.
fn lex_strides_of(r: &LaikRange) -> [i64; 3] {
    let dims = space_dims(r.space);
    let ext = |d: usize| {
        if d < dims {
            (r.to.i[d] - r.from.i[d]).max(0)
        } else {
            1
        }
    };
    [1, ext(0), ext(0) * ext(1)]
}

fn range_count(r: &LaikRange) -> u64 {
    let s = lex_strides_of(r);
    let dims = space_dims(r.space);
    let last = (r.to.i[dims - 1] - r.from.i[dims - 1]).max(0);
    (s[dims - 1] * last) as u64
}

unsafe extern "C" fn section_lex(l: *mut LaikLayout, idx: *mut LaikIndex) -> c_int {
    run("laik_layout_section (lex)", || {
        let ll = lex(l, "laik_layout_section (lex)")?;
        let i = obj(idx, "laik_layout_section (lex)", "index")?;
        Ok(ll
            .ranges
            .iter()
            .position(|r| {
                (0..space_dims(r.space)).all(|d| (r.from.i[d]..r.to.i[d]).contains(&i.i[d]))
            })
            .map_or(-1, |k| k as c_int))
    })
}

unsafe extern "C" fn mapno_lex(l: *mut LaikLayout, n: c_int) -> c_int {
    run("laik_layout_mapno (lex)", || {
        // One allocation per section.
        lex(l, "laik_layout_mapno (lex)")?.section(n, "laik_layout_mapno (lex)")?;
        Ok(n)
    })
}

unsafe extern "C" fn offset_lex(l: *mut LaikLayout, n: c_int, idx: *mut LaikIndex) -> i64 {
    run("laik_offset", || {
        let op = "laik_offset";
        let ll = lex(l, op)?;
        let i = obj(idx, op, "index")?;
        let (dims, s) = ll.strides(n, op)?;
        let from = ll.section(n, op)?.from.i;
        Ok((0..dims).map(|d| (i.i[d] - from[d]) * s[d]).sum())
    })
}

/// Section `n` can use the allocation of section `nold` of `old` if its range lies within
/// that section's: it then takes over the old range (and its element count), so offsets follow
/// the old allocation, as LAIK's lexicographic layout does.
unsafe extern "C" fn reuse_lex(
    l: *mut LaikLayout,
    n: c_int,
    old: *mut LaikLayout,
    nold: c_int,
) -> bool {
    run("laik_layout_reuse (lex)", || {
        let op = "laik_layout_reuse (lex)";
        let old_range = *lex(old, op)?.section(nold, op)?;
        let ll = lex(l, op)?;
        let new_range = *ll.section(n, op)?;
        let dims = space_dims(new_range.space);
        let within = (0..dims).all(|d| {
            new_range.from.i[d] >= old_range.from.i[d] && new_range.to.i[d] <= old_range.to.i[d]
        });
        if within {
            // The header is public: a program may have changed `count`, so saturate.
            ll.h.count =
                ll.h.count
                    .saturating_sub(range_count(&new_range))
                    .saturating_add(range_count(&old_range));
            ll.ranges[n as usize] = old_range;
        }
        Ok(within)
    })
}

unsafe extern "C" fn describe_lex(l: *mut LaikLayout) -> *mut c_char {
    run("laik_layout_describe (lex)", || {
        let ll = lex(l, "laik_layout_describe (lex)")?;
        let strides = ll
            .ranges
            .iter()
            .map(|r| {
                let s = lex_strides_of(r);
                format!("{}/{}/{}", s[0], s[1], s[2])
            })
            .collect::<Vec<_>>()
            .join(", ");
        let t = format!(
            "lex ({}d, {} maps, strides {strides})",
            ll.h.dims, ll.h.map_count
        );
        ll.text = CString::new(t).unwrap_or_default();
        Ok(ll.text.as_ptr().cast_mut())
    })
}

/// LAIK's lexicographic layout (x fastest) covering the `n` ranges at `ranges`, one section
/// (and allocation) per range.
#[no_mangle]
pub extern "C" fn laik_new_layout_lex(n: c_int, ranges: *mut LaikRange) -> *mut LaikLayout {
    run("laik_new_layout_lex", || {
        let k = usize::try_from(n)
            .map_err(|_| Error::invalid("laik_new_layout_lex", format!("{n} ranges")))?;
        let ranges = if k == 0 {
            Vec::new()
        } else {
            if ranges.is_null() {
                return Err(crate::ffi::null_arg("laik_new_layout_lex", "ranges"));
            }
            // SAFETY: LAIK's contract: `ranges` holds `n` ranges.
            unsafe { std::slice::from_raw_parts(ranges, k) }.to_vec()
        };
        let dims = ranges.first().map_or(1, |r| space_dims(r.space)) as c_int;
        let count = ranges.iter().map(range_count).sum();
        let l = Box::into_raw(Box::new(LexLayout {
            h: LaikLayout {
                dims,
                map_count: n,
                count,
                section: Some(section_lex),
                mapno: Some(mapno_lex),
                offset: Some(offset_lex),
                reuse: Some(reuse_lex),
                describe: Some(describe_lex),
                pack: Some(super::layout_user::laik_layout_pack_gen),
                unpack: Some(super::layout_user::laik_layout_unpack_gen),
                copy: Some(super::layout_user::laik_layout_copy_gen),
            },
            ranges,
            text: CString::default(),
        }))
        .cast::<LaikLayout>();
        lex_set(|s| s.insert(l as usize));
        Ok(l)
    })
}

/// The stride of dimension `d` in section (mapping) `n` of a lexicographic layout.
#[no_mangle]
pub extern "C" fn laik_layout_lex_stride(l: *mut LaikLayout, n: c_int, d: c_int) -> u64 {
    run("laik_layout_lex_stride", || {
        let op = "laik_layout_lex_stride";
        let (_, s) = lex(l, op)?.strides(n, op)?;
        let k = usize::try_from(d)
            .ok()
            .filter(|&k| k < 3)
            .ok_or_else(|| Error::invalid(op, format!("dimension {d}")))?;
        Ok(s[k] as u64)
    })
}

/// The offset (in elements) of global index `idx` in section `section` of a layout: the
/// layout's own `offset` function.
#[no_mangle]
pub extern "C" fn laik_offset(l: *mut LaikLayout, section: c_int, idx: *mut LaikIndex) -> i64 {
    run("laik_offset", || {
        let lay = obj(l, "laik_offset", "layout")?;
        let f = lay
            .offset
            .ok_or_else(|| Error::invalid("laik_offset", "the layout has no offset function"))?;
        // SAFETY: the layout's own function, called with the layout it belongs to.
        Ok(unsafe { f(l, section, idx) })
    })
}

thread_local! {
    /// Text of the description of layouts without their own `describe`.
    static UNSPECIFIED: std::cell::RefCell<CString> = std::cell::RefCell::new(CString::default());
}

/// The description of a layout that brings no `describe` function: `unspecified Nd`.
unsafe extern "C" fn describe_gen(l: *mut LaikLayout) -> *mut c_char {
    // SAFETY: a layout header from the program, or NULL.
    let dims = unsafe { l.as_ref() }.map_or(0, |h| h.dims);
    UNSPECIFIED.with(|t| {
        *t.borrow_mut() = CString::new(format!("unspecified {dims}d")).unwrap_or_default();
        t.borrow().as_ptr().cast_mut()
    })
}

/// Fills the header of a program's own layout. `offset` and `mapno` are required (LAIK
/// asserts them); without `pack`, `unpack` or `copy` the generic versions, which go through
/// the mappings' offsets, are set (always with `LAIK_LAYOUT_GENERIC` set in the environment),
/// and without `describe` one printing `unspecified Nd`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn laik_init_layout(
    l: *mut LaikLayout,
    dims: c_int,
    map_count: c_int,
    count: u64,
    section: Option<SectionFn>,
    mapno: Option<MapnoFn>,
    offset: Option<OffsetFn>,
    reuse: Option<ReuseFn>,
    describe: Option<DescribeFn>,
    pack: Option<PackFn>,
    unpack: Option<PackFn>,
    copy: Option<CopyFn>,
) {
    run("laik_init_layout", || {
        let op = "laik_init_layout";
        let h = obj(l, op, "layout")?;
        if offset.is_none() || mapno.is_none() {
            return Err(Error::invalid(
                op,
                "a layout needs its offset and mapno functions",
            ));
        }
        if !(1..=3).contains(&dims) || map_count < 0 {
            return Err(Error::invalid(
                op,
                format!("{dims} dimensions, {map_count} allocations"),
            ));
        }
        let generic = std::env::var_os("LAIK_LAYOUT_GENERIC").is_some();
        let pick = |f: Option<PackFn>, g: PackFn| if generic { Some(g) } else { f.or(Some(g)) };
        *h = LaikLayout {
            dims,
            map_count,
            count,
            section,
            mapno,
            offset,
            reuse,
            describe: describe.or(Some(describe_gen)),
            pack: pick(pack, super::layout_user::laik_layout_pack_gen),
            unpack: pick(unpack, super::layout_user::laik_layout_unpack_gen),
            copy: if generic {
                Some(super::layout_user::laik_layout_copy_gen)
            } else {
                copy.or(Some(super::layout_user::laik_layout_copy_gen))
            },
        };
        Ok(())
    })
}
