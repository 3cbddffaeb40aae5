//! Index translation and element addresses in a container's mappings: LAIK's
//! `laik_global2local_*`, `laik_local2global_*`, `laik_maplocal2global_1d`,
//! `laik_get_map_addr` and `laik_map_get_mapNo`.

use std::ffi::{c_char, c_int};
use std::ptr::null_mut;

use ferry_core::{Error, Result};

use super::{LaikData, LaikMapping};
use crate::laik::part::LaikIndex;
use crate::laik::{obj, out, run};
use crate::typed::RawMap;

/// Offset (elements) of global index `idx` in mapping `r`, if it lies in its box.
fn offset_in(r: &RawMap, idx: &[i64; 3], dims: usize) -> Option<usize> {
    let mut off = 0usize;
    for (d, &g) in idx.iter().enumerate().take(dims) {
        if g < r.from[d] || g >= r.to[d] {
            return None;
        }
        off += (g - r.from[d]) as usize * r.strides[d];
    }
    Some(off)
}

/// Address of global index `idx` in mapping `n` (NULL if it is not there).
#[no_mangle]
pub extern "C" fn laik_get_map_addr(
    d: *mut LaikData,
    n: c_int,
    idx: *mut LaikIndex,
) -> *mut c_char {
    run("laik_get_map_addr", || {
        let data = obj(d, "laik_get_map_addr", "data")?;
        let i = obj(idx, "laik_get_map_addr", "index")?.i;
        let (dims, size) = (data.dims(), data.elem_size());
        Ok(match data.mapping(n)? {
            // SAFETY: the offset lies inside the mapping (checked against its box).
            Some(m) => offset_in(&m.raw, &i, dims).map_or(null_mut(), |o| unsafe {
                m.raw.base.add(o * size).cast::<c_char>()
            }),
            None => null_mut(),
        })
    })
}

/// The mapping holding global 1d index `gidx` and its offset there.
fn find_1d(data: &mut LaikData, gidx: i64) -> Result<Option<(c_int, u64, *mut LaikMapping)>> {
    for n in 0..data.c.num_mappings() as c_int {
        if let Some(m) = data.mapping(n)? {
            if gidx >= m.raw.from[0] && gidx < m.raw.to[0] {
                return Ok(Some((
                    n,
                    (gidx - m.raw.from[0]) as u64,
                    m as *mut LaikMapping,
                )));
            }
        }
    }
    Ok(None)
}

#[no_mangle]
pub extern "C" fn laik_global2local_1d(
    d: *mut LaikData,
    gidx: i64,
    lidx: *mut u64,
) -> *mut LaikMapping {
    run("laik_global2local_1d", || {
        let data = obj(d, "laik_global2local_1d", "data")?;
        Ok(match find_1d(data, gidx)? {
            Some((_, off, m)) => {
                out(lidx, off);
                m
            }
            None => null_mut(),
        })
    })
}

#[no_mangle]
pub extern "C" fn laik_global2maplocal_1d(
    d: *mut LaikData,
    gidx: i64,
    map_no: *mut c_int,
    lidx: *mut u64,
) -> *mut LaikMapping {
    run("laik_global2maplocal_1d", || {
        let data = obj(d, "laik_global2maplocal_1d", "data")?;
        Ok(match find_1d(data, gidx)? {
            Some((n, off, m)) => {
                out(map_no, n);
                out(lidx, off);
                m
            }
            None => {
                out(map_no, -1);
                null_mut()
            }
        })
    })
}

/// Global index of local index `li` of mapping `map_no`, for the call named `op`. A process
/// without that mapping (one that holds nothing) has no local index to translate: fatal, as
/// LAIK asserts.
fn maplocal2global(op: &'static str, d: *mut LaikData, map_no: c_int, li: u64) -> i64 {
    run(op, || {
        let data = obj(d, op, "data")?;
        let m = data.mapping(map_no)?.ok_or_else(|| {
            let why = if map_no == 0 {
                " (it holds no element)"
            } else {
                ""
            };
            Error::invalid(op, format!("no mapping {map_no} on this process{why}"))
        })?;
        Ok(m.raw.from[0] + li as i64)
    })
}

#[no_mangle]
pub extern "C" fn laik_maplocal2global_1d(d: *mut LaikData, map_no: c_int, li: u64) -> i64 {
    maplocal2global("laik_maplocal2global_1d", d, map_no, li)
}

#[no_mangle]
pub extern "C" fn laik_local2global_1d(d: *mut LaikData, off: u64) -> i64 {
    maplocal2global("laik_local2global_1d", d, 0, off)
}

/// The mapping holding global 2d index (`gx`, `gy`) and the index's local coordinates there
/// (NULL if no mapping of this process holds it).
#[no_mangle]
pub extern "C" fn laik_global2local_2d(
    d: *mut LaikData,
    gx: i64,
    gy: i64,
    lx: *mut i64,
    ly: *mut i64,
) -> *mut LaikMapping {
    run("laik_global2local_2d", || {
        let data = obj(d, "laik_global2local_2d", "data")?;
        for n in 0..data.c.num_mappings() as c_int {
            if let Some(m) = data.mapping(n)? {
                let r = m.raw;
                if (r.from[0]..r.to[0]).contains(&gx) && (r.from[1]..r.to[1]).contains(&gy) {
                    out(lx, gx - r.from[0]);
                    out(ly, gy - r.from[1]);
                    return Ok(m as *mut LaikMapping);
                }
            }
        }
        Ok(null_mut())
    })
}

/// Global coordinates of local 2d index (`lx`, `ly`) of mapping 0; false if it lies outside.
#[no_mangle]
pub extern "C" fn laik_local2global1_2d(
    d: *mut LaikData,
    lx: i64,
    ly: i64,
    gx: *mut i64,
    gy: *mut i64,
) -> bool {
    run("laik_local2global1_2d", || {
        let data = obj(d, "laik_local2global1_2d", "data")?;
        let Some(m) = data.mapping(0)? else {
            return Ok(false);
        };
        let r = m.raw;
        if lx < 0 || ly < 0 || lx >= r.to[0] - r.from[0] || ly >= r.to[1] - r.from[1] {
            return Ok(false);
        }
        out(gx, r.from[0] + lx);
        out(gy, r.from[1] + ly);
        Ok(true)
    })
}

#[no_mangle]
pub extern "C" fn laik_map_get_mapNo(map: *const LaikMapping) -> c_int {
    run("laik_map_get_mapNo", || {
        Ok(obj(map.cast_mut(), "laik_map_get_mapNo", "mapping")?.map_no)
    })
}
