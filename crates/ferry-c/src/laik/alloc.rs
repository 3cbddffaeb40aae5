//! LAIK's allocator interface (`data.h`): allocator objects with LAIK's public layout, the
//! predefined `laik_allocator_def`, and a container's allocator (`laik_set_allocator`,
//! `laik_get_allocator`).
//!
//! A container records the allocator it is given and returns it, as LAIK does. With the
//! default allocator the mappings are the data layer's own memory. With an allocator the
//! program set, every mapping the program sees comes from the allocator's `malloc` (called
//! with the container and the mapping's size in bytes), as in LAIK: after each switch to
//! another partitioning the previous mappings go back through its `free` and new ones are
//! allocated; the data layer keeps its own copy, which the container fills from the
//! allocator's memory before a switch and writes back to it after one (docs/C-API.md).
//! Memory the program provided (`laik_data_provide_memory`) still serves mapping 0.

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

use ferry_core::{Error, Result};

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

/// Mapping memory a container got from a program's allocator.
pub(crate) struct AllocMaps {
    /// Partitioning (id) the memory was allocated for.
    part: Option<u64>,
    /// Address and size in bytes of each mapping's memory (NULL for a mapping served by the
    /// program's provided memory).
    maps: Vec<(*mut u8, usize)>,
    /// The allocator the memory came from (whose `free` takes it back).
    from: *mut LaikAllocator,
}

impl Default for AllocMaps {
    fn default() -> Self {
        AllocMaps {
            part: None,
            maps: Vec::new(),
            from: null_mut(),
        }
    }
}

impl LaikData {
    /// The program's allocator, if it set one (the default allocator leaves mappings in the
    /// data layer's memory).
    fn own_allocator(&self) -> Option<&LaikAllocator> {
        if self.allocator == default_allocator() {
            return None;
        }
        // SAFETY: allocators live until the process ends (LAIK has no call to free one).
        unsafe { self.allocator.as_ref() }
    }

    /// Bytes of the data layer's mapping `i` (its box under its strides).
    fn map_bytes(&mut self, i: usize) -> Result<(*mut u8, usize)> {
        let m = self.c.raw_map(i)?;
        let mut elems = 1usize;
        for d in 0..3 {
            let ext = (m.to[d] - m.from[d]).max(0) as usize;
            if ext == 0 {
                return Ok((m.base, 0));
            }
            elems += (ext - 1) * m.strides[d];
        }
        Ok((m.base, elems * self.elem.size()))
    }

    /// The allocator's memory serving mapping `i`, if any.
    pub(crate) fn alloc_base(&self, i: usize) -> Option<*mut u8> {
        self.alloc_maps
            .maps
            .get(i)
            .map(|m| m.0)
            .filter(|p| !p.is_null())
    }

    /// Copies what the program wrote in the allocator's memory into the data layer's mappings
    /// (before a switch reads them).
    pub(crate) fn alloc_sync_in(&mut self) -> Result<()> {
        for i in 0..self.alloc_maps.maps.len().min(self.c.num_mappings()) {
            let (p, bytes) = self.alloc_maps.maps[i];
            if p.is_null() {
                continue;
            }
            let (base, need) = self.map_bytes(i)?;
            // SAFETY: the allocation holds `bytes` bytes and the mapping `need` (the same
            // partitioning's sizes); distinct allocations.
            unsafe { std::ptr::copy_nonoverlapping(p, base, bytes.min(need)) };
        }
        Ok(())
    }

    /// After a switch: on a new partitioning, returns the previous mappings to the allocator
    /// and allocates the new ones; then writes the data layer's values into them.
    pub(crate) fn alloc_sync_out(&mut self, op: &'static str) -> Result<()> {
        let Some(a) = self.own_allocator() else {
            // Back to the default allocator: blocks of an earlier one (whose values the switch
            // took in) go back to it.
            self.alloc_release();
            return Ok(());
        };
        let (malloc, policy) = (a.malloc, a.policy);
        let id = self.part.as_ref().map(|p| p.id());
        if self.alloc_maps.part != id || self.alloc_maps.maps.len() != self.c.num_mappings() {
            self.alloc_release();
            let malloc = malloc.ok_or_else(|| {
                Error::invalid(op, format!("`{}`: the allocator has no malloc", self.name))
            })?;
            let user0 = self.user_map0()?.is_some();
            let d: *mut LaikData = self;
            let mut maps = Vec::new();
            for i in 0..self.c.num_mappings() {
                let (_, bytes) = self.map_bytes(i)?;
                if bytes == 0 || (i == 0 && user0) {
                    maps.push((std::ptr::null_mut(), 0));
                    continue;
                }
                let p = malloc(d, bytes).cast::<u8>();
                if p.is_null() {
                    self.alloc_maps.maps = maps;
                    self.alloc_maps.from = self.allocator;
                    self.alloc_release();
                    return Err(Error::invalid(
                        op,
                        format!(
                            "`{}`: the allocator returned NULL for mapping {i} of {bytes} \
                             bytes (policy {policy})",
                            self.name
                        ),
                    ));
                }
                maps.push((p, bytes));
            }
            self.alloc_maps = AllocMaps {
                part: id,
                maps,
                from: self.allocator,
            };
        }
        for i in 0..self.alloc_maps.maps.len() {
            let (p, bytes) = self.alloc_maps.maps[i];
            if p.is_null() {
                continue;
            }
            let (base, _) = self.map_bytes(i)?;
            // SAFETY: as in alloc_sync_in, in the other direction.
            unsafe { std::ptr::copy_nonoverlapping(base, p, bytes) };
        }
        Ok(())
    }

    /// Returns every mapping's memory to the allocator's `free` (kept if it has none).
    pub(crate) fn alloc_release(&mut self) {
        let maps = std::mem::take(&mut self.alloc_maps.maps);
        self.alloc_maps.part = None;
        let d: *mut LaikData = self;
        // SAFETY: allocators live until the process ends.
        let free = unsafe { self.alloc_maps.from.as_ref() }.and_then(|a| a.free);
        if let Some(f) = free {
            for (p, _) in maps {
                if !p.is_null() {
                    f(d, p.cast::<c_void>());
                }
            }
        }
    }
}
