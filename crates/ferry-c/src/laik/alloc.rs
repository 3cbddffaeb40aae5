//! LAIK's allocator interface (`data.h`): allocator objects with LAIK's public layout, the
//! predefined `laik_allocator_def`, and a container's allocator (`laik_set_allocator`,
//! `laik_get_allocator`).
//!
//! A container records the allocator it is given and returns it, as LAIK does; its mappings'
//! memory is the data layer's own (or the program's, `laik_data_provide_memory`), not memory
//! from the allocator's functions (docs/C-API.md).

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

use ferry_core::Result;

use super::data::LaikData;
use super::{obj, run};

/// `Laik_malloc_t`.
pub type MallocFn = extern "C" fn(*mut LaikData, usize) -> *mut c_void;
/// `Laik_free_t`.
pub type FreeFn = extern "C" fn(*mut LaikData, *mut c_void);
/// `Laik_realloc_t`.
pub type ReallocFn = extern "C" fn(*mut LaikData, *mut c_void, usize) -> *mut c_void;
/// The `unmap` notification of `struct _Laik_Allocator`.
pub type UnmapFn = extern "C" fn(*mut LaikData, *mut c_void, usize);

/// `Laik_MemoryPolicy`: `LAIK_MP_None`.
const MP_NONE: c_int = 0;
/// `LAIK_MP_NewAllocOnRepartition`.
const MP_NEW_ALLOC_ON_REPARTITION: c_int = 1;

/// `struct _Laik_Allocator` of laik.h: public in LAIK, so programs may read and set fields.
#[repr(C)]
pub struct LaikAllocator {
    pub policy: c_int,
    pub malloc: Option<MallocFn>,
    pub free: Option<FreeFn>,
    pub realloc: Option<ReallocFn>,
    pub unmap: Option<UnmapFn>,
}

extern "C" {
    fn malloc(size: usize) -> *mut c_void;
    fn free(p: *mut c_void);
}

extern "C" fn def_malloc(_d: *mut LaikData, size: usize) -> *mut c_void {
    // SAFETY: C's malloc, any size.
    unsafe { malloc(size) }
}

extern "C" fn def_free(_d: *mut LaikData, p: *mut c_void) {
    // SAFETY: `p` came from def_malloc (C's malloc) or is NULL (the allocator's contract).
    unsafe { free(p) }
}

/// `laik_allocator_def`: the allocator every container starts with (set at `laik_init`).
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static mut laik_allocator_def: *mut LaikAllocator = null_mut();

/// Makes `laik_allocator_def` (at `laik_init`).
pub(crate) fn init_statics() {
    let a = laik_new_allocator_def();
    // SAFETY: written once at initialisation, before the program can read it.
    unsafe { laik_allocator_def = a };
}

/// The allocator a new container records.
pub(crate) fn default_allocator() -> *mut LaikAllocator {
    // SAFETY: written once at laik_init, read-only afterwards (one program thread).
    unsafe { laik_allocator_def }
}

/// An allocator with the given functions and policy `LAIK_MP_None`, as LAIK makes it. The
/// object lives until the process ends (LAIK has no call to free one).
#[no_mangle]
pub extern "C" fn laik_new_allocator(
    malloc: Option<MallocFn>,
    free: Option<FreeFn>,
    realloc: Option<ReallocFn>,
) -> *mut LaikAllocator {
    Box::into_raw(Box::new(LaikAllocator {
        policy: MP_NONE,
        malloc,
        free,
        realloc,
        unmap: None,
    }))
}

/// An allocator over C's malloc and free with policy `LAIK_MP_NewAllocOnRepartition`.
#[no_mangle]
pub extern "C" fn laik_new_allocator_def() -> *mut LaikAllocator {
    let a = laik_new_allocator(Some(def_malloc), Some(def_free), None);
    // SAFETY: just allocated above.
    unsafe { (*a).policy = MP_NEW_ALLOC_ON_REPARTITION };
    a
}

#[no_mangle]
pub extern "C" fn laik_set_allocator(d: *mut LaikData, a: *mut LaikAllocator) {
    run("laik_set_allocator", || -> Result<()> {
        obj(d, "laik_set_allocator", "data")?.allocator = a;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_get_allocator(d: *mut LaikData) -> *mut LaikAllocator {
    run("laik_get_allocator", || {
        Ok(obj(d, "laik_get_allocator", "data")?.allocator)
    })
}
