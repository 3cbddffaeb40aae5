//! LAIK's lexicographic layout objects (`data.h`): `laik_new_layout_lex` over `n` ranges, one
//! section (and mapping) per range with x fastest, and the queries of such a layout
//! (`laik_layout_lex_stride`, `laik_offset`). Containers lay their mappings out
//! lexicographically themselves; these objects describe that layout to the program.

use std::ffi::c_int;

use ferry_core::{Error, Result};

use super::part::{LaikIndex, LaikRange, LaikSpace};
use super::{obj, run};

/// A lexicographic layout: the ranges of its sections.
pub struct LaikLayout {
    ranges: Vec<LaikRange>,
}

fn space_dims(s: *mut LaikSpace) -> usize {
    // SAFETY: spaces live until the process ends; NULL is taken as 1d.
    unsafe { s.as_ref() }.map_or(1, |s| s.dims.clamp(1, 3) as usize)
}

impl LaikLayout {
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
        let dims = space_dims(r.space);
        let ext = |d: usize| {
            if d < dims {
                (r.to.i[d] - r.from.i[d]).max(0)
            } else {
                1
            }
        };
        Ok((dims, [1, ext(0), ext(0) * ext(1)]))
    }
}

/// LAIK's lexicographic layout (x fastest) covering the `n` ranges at `ranges`, one section
/// per range.
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
        Ok(Box::into_raw(Box::new(LaikLayout { ranges })))
    })
}

/// The stride of dimension `d` in section (mapping) `n` of a lexicographic layout.
#[no_mangle]
pub extern "C" fn laik_layout_lex_stride(l: *mut LaikLayout, n: c_int, d: c_int) -> u64 {
    run("laik_layout_lex_stride", || {
        let op = "laik_layout_lex_stride";
        let (_, s) = obj(l, op, "layout")?.strides(n, op)?;
        let k = usize::try_from(d)
            .ok()
            .filter(|&k| k < 3)
            .ok_or_else(|| Error::invalid(op, format!("dimension {d}")))?;
        Ok(s[k] as u64)
    })
}

/// The offset (in elements) of global index `idx` in section `section` of a layout.
#[no_mangle]
pub extern "C" fn laik_offset(l: *mut LaikLayout, section: c_int, idx: *mut LaikIndex) -> i64 {
    run("laik_offset", || {
        let op = "laik_offset";
        let lay = obj(l, op, "layout")?;
        let i = obj(idx, op, "index")?;
        let (dims, s) = lay.strides(section, op)?;
        let from = lay.section(section, op)?.from.i;
        Ok((0..dims).map(|d| (i.i[d] - from[d]) * s[d]).sum())
    })
}
