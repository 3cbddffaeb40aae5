//! Index spaces, indexes and ranges (`laik_new_space*`, `laik_range_*` of LAIK's space.h).

use std::ffi::{c_char, c_int, CStr};

use ferry_core::{Error, Result};
use ferry_data::Space;

use super::core::LaikInstance;
use super::part::{LaikIndex, LaikRange, LaikSpace};
use super::{obj, out, run};

fn new_space(inst: *mut LaikInstance, space: Result<Space>) -> Result<*mut LaikSpace> {
    obj(inst, "laik_new_space", "instance")?;
    Ok(LaikSpace::boxed(inst, space?, ""))
}

fn extent(v: i64, op: &'static str) -> Result<u64> {
    u64::try_from(v).map_err(|_| Error::invalid(op, format!("negative space size {v}")))
}

/// A space without a size (LAIK's "invalid" space): `laik_change_space_1d/2d/3d` gives it
/// its dimensions and extent; partitionings and containers over it fail until then.
#[no_mangle]
pub extern "C" fn laik_new_space(inst: *mut LaikInstance) -> *mut LaikSpace {
    run("laik_new_space", || {
        let s = new_space(inst, Space::new1(1))?;
        // SAFETY: just created by new_space; handles live until the process ends.
        let sp = unsafe { &mut *s };
        sp.unsized_ = true;
        sp.dims = 0;
        sp.range.to = LaikIndex::default();
        Ok(s)
    })
}

#[no_mangle]
pub extern "C" fn laik_new_space_1d(inst: *mut LaikInstance, s1: i64) -> *mut LaikSpace {
    run("laik_new_space_1d", || {
        new_space(inst, Space::new1(extent(s1, "laik_new_space_1d")?))
    })
}

#[no_mangle]
pub extern "C" fn laik_new_space_2d(inst: *mut LaikInstance, s1: i64, s2: i64) -> *mut LaikSpace {
    run("laik_new_space_2d", || {
        let op = "laik_new_space_2d";
        new_space(inst, Space::new2(extent(s1, op)?, extent(s2, op)?))
    })
}

#[no_mangle]
pub extern "C" fn laik_new_space_3d(
    inst: *mut LaikInstance,
    s1: i64,
    s2: i64,
    s3: i64,
) -> *mut LaikSpace {
    run("laik_new_space_3d", || {
        let op = "laik_new_space_3d";
        new_space(
            inst,
            Space::new3(extent(s1, op)?, extent(s2, op)?, extent(s3, op)?),
        )
    })
}

/// Spaces stay valid until the process ends (partitionings and containers refer to them).
#[no_mangle]
pub extern "C" fn laik_free_space(s: *mut LaikSpace) {
    run("laik_free_space", || {
        obj(s, "laik_free_space", "space").map(|_| ())
    })
}

#[no_mangle]
pub extern "C" fn laik_set_space_name(s: *mut LaikSpace, name: *mut c_char) {
    run("laik_set_space_name", || {
        let sp = obj(s, "laik_set_space_name", "space")?;
        if !name.is_null() {
            // SAFETY: NUL-terminated name from the program.
            let n = unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned();
            sp.set_name(&n);
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_space_getdimensions(s: *mut LaikSpace) -> c_int {
    run("laik_space_getdimensions", || {
        Ok(obj(s, "laik_space_getdimensions", "space")?.dims)
    })
}

#[no_mangle]
pub extern "C" fn laik_space_size(s: *const LaikSpace) -> u64 {
    run("laik_space_size", || {
        let sp = obj(s.cast_mut(), "laik_space_size", "space")?;
        Ok(if sp.unsized_ { 0 } else { sp.space.size() })
    })
}

#[no_mangle]
pub extern "C" fn laik_index_init(i: *mut LaikIndex, i1: i64, i2: i64, i3: i64) {
    out(i, LaikIndex { i: [i1, i2, i3] });
}

#[no_mangle]
pub extern "C" fn laik_range_init_1d(r: *mut LaikRange, s: *mut LaikSpace, from: i64, to: i64) {
    out(
        r,
        LaikRange {
            space: s,
            from: LaikIndex { i: [from, 0, 0] },
            to: LaikIndex { i: [to, 0, 0] },
        },
    );
}

#[no_mangle]
pub extern "C" fn laik_range_size(r: *const LaikRange) -> u64 {
    run("laik_range_size", || {
        let r = obj(r.cast_mut(), "laik_range_size", "range")?;
        // SAFETY: the range's space pointer is a live space handle or NULL.
        let dims = unsafe { r.space.as_ref() }.map_or(1, |s| s.space.dims());
        let mut n: u64 = 1;
        for d in 0..dims {
            n = n.saturating_mul(u64::try_from(r.to.i[d] - r.from.i[d]).unwrap_or(0));
        }
        Ok(n)
    })
}
