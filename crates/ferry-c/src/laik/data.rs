//! Data containers: switches, mappings, user memory, reservations, transitions, layouts.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::null_mut;

use ferry_core::{Error, Result};
use ferry_data::{DataFlow, Partitioning};

use super::bytes::Bytes;
use super::core::{LaikGroup, LaikInstance};
use super::part::{LaikPartitioning, LaikSpace};
use super::reduce::{bitwise_ok, combining, flow_of};
use super::{obj, out, run};
use crate::typed::{AnyContainer, Elem, Op, RawMap};

mod index;

/// An element type: one of LAIK's predefined ones, or one registered by the program
/// (`laik_type_register`: a name and a size; ferry moves such elements as opaque bytes).
pub struct LaikType {
    elem: Elem,
    registered: Option<(String, usize)>,
}

static mut T_CHAR: LaikType = LaikType {
    elem: Elem::I8,
    registered: None,
};
static mut T_INT32: LaikType = LaikType {
    elem: Elem::I32,
    registered: None,
};
static mut T_INT64: LaikType = LaikType {
    elem: Elem::I64,
    registered: None,
};
static mut T_UCHAR: LaikType = LaikType {
    elem: Elem::U8,
    registered: None,
};
static mut T_UINT32: LaikType = LaikType {
    elem: Elem::U32,
    registered: None,
};
static mut T_UINT64: LaikType = LaikType {
    elem: Elem::U64,
    registered: None,
};
static mut T_FLOAT: LaikType = LaikType {
    elem: Elem::F32,
    registered: None,
};
static mut T_DOUBLE: LaikType = LaikType {
    elem: Elem::F64,
    registered: None,
};

macro_rules! type_handles {
    ($($name:ident => $target:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "` of laik.h.")]
            #[no_mangle]
            #[allow(non_upper_case_globals)]
            pub static mut $name: *mut LaikType = null_mut();
        )*
        /// Points the predefined type handles at their objects (at `laik_init`).
        pub(crate) fn init_types() {
            // SAFETY: written once at initialisation; the targets are process-long statics.
            unsafe { $( $name = &raw mut $target; )* }
        }
    };
}

type_handles! {
    laik_Char => T_CHAR,
    laik_Int32 => T_INT32,
    laik_Int64 => T_INT64,
    laik_UChar => T_UCHAR,
    laik_UInt32 => T_UINT32,
    laik_UInt64 => T_UINT64,
    laik_Float => T_FLOAT,
    laik_Double => T_DOUBLE,
}

/// A program-defined element type of `size` bytes. Containers of it switch like any other;
/// a reduction over them calls the program's functions (`laik_type_set_reduce`, and
/// `laik_type_set_init` for the Init flow), and is an error without them.
#[no_mangle]
pub extern "C" fn laik_type_register(name: *const c_char, size: c_int) -> *mut LaikType {
    run("laik_type_register", || {
        let n = if name.is_null() {
            "type".to_string()
        } else {
            // SAFETY: NUL-terminated name from the program.
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        };
        let size = usize::try_from(size)
            .ok()
            .filter(|&s| s > 0)
            .ok_or_else(|| Error::invalid("laik_type_register", format!("size {size}")))?;
        Ok(Box::into_raw(Box::new(LaikType {
            elem: Elem::U8,
            registered: Some((n, size)),
        })))
    })
}

/// The element size of `ty` if the program registered it, `None` for LAIK's own types.
pub(crate) fn registered_size(ty: *mut LaikType, op: &'static str) -> Result<Option<usize>> {
    Ok(obj(ty, op, "type")?.registered.as_ref().map(|r| r.1))
}

/// One mapping handed out to C (`Laik_Mapping`): which container and which mapping number.
pub struct LaikMapping {
    map_no: c_int,
    raw: RawMap,
    /// Bytes per element.
    elem_size: usize,
}

impl LaikMapping {
    /// Bytes per element of the mapping's container.
    pub(crate) fn elem_size(&self) -> usize {
        self.elem_size
    }

    /// Address of global index `idx` (first `dims` coordinates), `None` outside the box.
    pub(crate) fn addr(&self, idx: &[i64; 3], dims: usize) -> Option<*mut u8> {
        let mut off = 0usize;
        for (d, &i) in idx.iter().enumerate().take(dims) {
            if i < self.raw.from[d] || i >= self.raw.to[d] {
                return None;
            }
            off += (i - self.raw.from[d]) as usize * self.raw.strides[d];
        }
        // The box's elements lie in the mapping's memory (the data layer's allocation).
        Some(self.raw.base.wrapping_add(off * self.elem_size))
    }
}

/// Memory the program provided for mapping 0.
struct UserMem {
    ptr: *mut u8,
    /// Bytes the program provided.
    cap: usize,
    /// `laik_set_map_memory`: only for the partitioning current at registration.
    /// `laik_data_provide_memory`: `None`, for every partitioning whose mapping 0 fits.
    part_id: Option<u64>,
}

/// A container.
pub struct LaikData {
    inst: *mut LaikInstance,
    pub(crate) space: *mut LaikSpace,
    pub(crate) elem: Elem,
    pub(crate) name: String,
    pub(crate) c: AnyContainer,
    active: *mut LaikPartitioning,
    group: *mut LaikGroup,
    /// Boxed: C keeps `Laik_Mapping*` pointers, which must not move when the vector grows.
    #[allow(clippy::vec_box)]
    maps: Vec<Box<LaikMapping>>,
    user_mem: Option<UserMem>,
    /// Set for containers of a registered type (name and element size): see [`Bytes`].
    registered: Option<(String, usize)>,
    /// The element type (its reduction functions, for a registered type).
    ty: *mut LaikType,
    /// How a container of a registered type is held, `None` for LAIK's predefined types.
    bytes: Option<Bytes>,
    /// The program's current partitioning (the container itself holds the byte twin of it
    /// when `bytes` is set).
    pub(crate) part: Option<Partitioning>,
    /// The allocator the program set (`laik_set_allocator`), recorded as LAIK records it.
    pub(crate) allocator: *mut super::alloc::LaikAllocator,
    /// Mapping memory from a program's allocator (`alloc.rs`).
    pub(crate) alloc_maps: super::alloc::AllocMaps,
}

impl LaikData {
    fn inst(&self) -> &'static mut LaikInstance {
        // SAFETY: the instance is leaked at laik_init and outlives every container.
        unsafe { &mut *self.inst }
    }

    /// The program's memory and the container's mapping 0 with the bytes to mirror, if the
    /// program provided memory that serves mapping 0 of the current partitioning.
    pub(crate) fn user_map0(&mut self) -> Result<Option<(*mut u8, *mut u8, usize)>> {
        let Some((ptr, cap, part_id)) = self.user_mem.as_ref().map(|u| (u.ptr, u.cap, u.part_id))
        else {
            return Ok(None);
        };
        let Some(id) = self.part.as_ref().map(|p| p.id()) else {
            return Ok(None);
        };
        if part_id.is_some_and(|p| p != id) || self.c.num_mappings() == 0 {
            return Ok(None);
        }
        let (base, need) = self.map0_bytes()?;
        // Mapping 0 of a later partitioning may be larger than what the program provided:
        // then the container's own memory serves it, as for a container without such memory.
        Ok((need <= cap).then_some((ptr, base, need)))
    }

    /// Address and size in bytes of the container's mapping 0 (which must exist).
    fn map0_bytes(&mut self) -> Result<(*mut u8, usize)> {
        let m = self.c.raw_map(0)?;
        let need = (0..self.dims())
            .map(|i| (m.to[i] - m.from[i]).max(0) as usize)
            .product::<usize>()
            * self.elem.size();
        Ok((m.base, need))
    }

    /// Copies the program's memory into the container while it serves mapping 0.
    fn sync_in(&mut self) -> Result<()> {
        if let Some((user, map, bytes)) = self.user_map0()? {
            // SAFETY: both regions hold at least `bytes` bytes (user_map0 checked the program's
            // size against the mapping's) and belong to different allocations.
            unsafe { std::ptr::copy_nonoverlapping(user, map, bytes) };
        }
        Ok(())
    }

    /// Copies the container's mapping 0 into the program's memory after a switch to a
    /// partitioning it serves.
    fn sync_out(&mut self) -> Result<()> {
        if let Some((user, map, bytes)) = self.user_map0()? {
            // SAFETY: as in sync_in, in the other direction.
            unsafe { std::ptr::copy_nonoverlapping(map, user, bytes) };
        }
        Ok(())
    }

    /// Switches to `to` (the partitioning behind handle `handle` of group `group`).
    pub(crate) fn switch(
        &mut self,
        to: &Partitioning,
        handle: *mut LaikPartitioning,
        group: *mut LaikGroup,
        flow: c_int,
        redop: c_int,
        op: &'static str,
    ) -> Result<()> {
        let redop = combining(redop);
        // The neutral byte of a bitwise reduction with the Init flow: the data layer's Init
        // knows the neutral elements of its built-in operations only.
        let mut fill = None;
        let (steps, init) = match &self.registered {
            Some((_, size)) if flow != 0 && redop != 0 => super::reduce::steps(
                self.ty,
                *size,
                &self.name,
                self.part.as_ref(),
                to,
                (flow, redop),
                op,
            )?,
            _ => {
                let (f, o) = flow_of(flow, redop, op)?;
                if let Some(b @ (Op::And | Op::Or)) = o {
                    bitwise_ok(self.elem, &self.name, op)?;
                    if f == DataFlow::Init {
                        fill = Some(if b == Op::And { 0xff } else { 0 });
                        (vec![(to.clone(), DataFlow::None, None)], None)
                    } else {
                        (vec![(to.clone(), f, o)], None)
                    }
                } else {
                    (vec![(to.clone(), f, o)], None)
                }
            }
        };
        self.sync_in()?;
        self.alloc_sync_in()?;
        let started = std::time::Instant::now();
        for (p, f, o) in steps {
            let inner = self.inner(&p)?;
            let t = self.inst().transport()?;
            self.c
                .switch_to(t, &inner, f, o)
                .map_err(|e| e.context(format!("{op} of `{}`", self.name)))?;
        }
        if let Some(byte) = fill {
            self.c.fill_bytes(byte)?;
        }
        if let (Some(i), Some(b)) = (init, &self.bytes) {
            let dims = b.space.dims();
            super::reduce::init_all(&mut self.c, b.size, dims, i)?;
        }
        self.part = Some(to.clone());
        self.inst().switch_secs += started.elapsed().as_secs_f64();
        self.active = handle;
        self.group = group;
        self.inst().last_group = Some(to.group().clone());
        self.maps.clear();
        self.sync_out()?;
        self.alloc_sync_out(op)
    }

    /// Mapping `n` of the current partitioning, if this process has it.
    fn mapping(&mut self, n: c_int) -> Result<Option<&mut LaikMapping>> {
        let Ok(i) = usize::try_from(n) else {
            return Ok(None);
        };
        if self.c.partitioning().is_none() || i >= self.c.num_mappings() {
            return Ok(None);
        }
        let mut raw = self.c.raw_map(i)?;
        if let Some(b) = &self.bytes {
            raw = b.to_elements(raw);
        }
        if let Some(p) = self.alloc_base(i) {
            raw.base = p;
        }
        if i == 0 {
            if let Some((user, _, _)) = self.user_map0()? {
                raw.base = user;
            }
        }
        let elem_size = self.elem_size();
        while self.maps.len() <= i {
            let no = self.maps.len() as c_int;
            self.maps.push(Box::new(LaikMapping {
                map_no: no,
                raw,
                elem_size,
            }));
        }
        self.maps[i].raw = raw;
        Ok(Some(&mut self.maps[i]))
    }

    fn dims(&self) -> usize {
        // SAFETY: spaces live until the process ends.
        unsafe { &*self.space }.space.dims()
    }

    /// Whether the container holds elements of a program-registered type (as bytes).
    pub(crate) fn is_registered_type(&self) -> bool {
        self.bytes.is_some()
    }

    /// Size of one element in bytes.
    pub(crate) fn elem_size(&self) -> usize {
        self.bytes.as_ref().map_or(self.elem.size(), |b| b.size)
    }

    /// The partitioning the container itself is switched to for the program's `p`.
    pub(crate) fn inner(&mut self, p: &Partitioning) -> Result<Partitioning> {
        match &mut self.bytes {
            Some(b) => b.twin(p),
            None => Ok(p.clone()),
        }
    }
}

fn new_data(space: *mut LaikSpace, ty: *mut LaikType, op: &'static str) -> Result<*mut LaikData> {
    let sp = obj(space, op, "space")?;
    sp.sized(op)?;
    let t = obj(ty, op, "type")?;
    let inst = obj(sp.inst, op, "instance")?;
    let name = format!("data-{}", inst.datas.len());
    let bytes = match &t.registered {
        Some((_, size)) => Some(Bytes::new(&sp.space, *size, op)?),
        None => None,
    };
    let space_of_c = bytes.as_ref().map_or(sp.space, |b| b.space);
    let c = AnyContainer::new(&mut inst.data, t.elem, &name, &space_of_c);
    let d = Box::into_raw(Box::new(LaikData {
        inst: sp.inst,
        space,
        elem: t.elem,
        name,
        c,
        active: null_mut(),
        group: null_mut(),
        maps: Vec::new(),
        user_mem: None,
        registered: t.registered.clone(),
        ty,
        bytes,
        part: None,
        allocator: super::alloc::default_allocator(),
        alloc_maps: Default::default(),
    }));
    inst.datas.push(d);
    Ok(d)
}

#[no_mangle]
pub extern "C" fn laik_new_data(space: *mut LaikSpace, ty: *mut LaikType) -> *mut LaikData {
    run("laik_new_data", || new_data(space, ty, "laik_new_data"))
}

#[no_mangle]
pub extern "C" fn laik_new_data_1d(
    inst: *mut LaikInstance,
    ty: *mut LaikType,
    s1: i64,
) -> *mut LaikData {
    let s = super::index_space::laik_new_space_1d(inst, s1);
    laik_new_data(s, ty)
}

#[no_mangle]
pub extern "C" fn laik_new_data_2d(
    inst: *mut LaikInstance,
    ty: *mut LaikType,
    s1: i64,
    s2: i64,
) -> *mut LaikData {
    let s = super::index_space::laik_new_space_2d(inst, s1, s2);
    laik_new_data(s, ty)
}

#[no_mangle]
pub extern "C" fn laik_data_set_name(d: *mut LaikData, name: *mut c_char) {
    run("laik_data_set_name", || {
        let data = obj(d, "laik_data_set_name", "data")?;
        if !name.is_null() {
            // SAFETY: NUL-terminated name from the program.
            data.name = unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned();
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_data_get_space(d: *mut LaikData) -> *mut LaikSpace {
    run("laik_data_get_space", || {
        Ok(obj(d, "laik_data_get_space", "data")?.space)
    })
}

/// The group the container is currently distributed over (NULL before its first switch).
#[no_mangle]
pub extern "C" fn laik_data_get_group(d: *mut LaikData) -> *mut LaikGroup {
    run("laik_data_get_group", || {
        Ok(obj(d, "laik_data_get_group", "data")?.group)
    })
}

#[no_mangle]
pub extern "C" fn laik_data_get_inst(d: *mut LaikData) -> *mut LaikInstance {
    run("laik_data_get_inst", || {
        Ok(obj(d, "laik_data_get_inst", "data")?.inst)
    })
}

#[no_mangle]
pub extern "C" fn laik_data_get_partitioning(d: *mut LaikData) -> *mut LaikPartitioning {
    run("laik_data_get_partitioning", || {
        Ok(obj(d, "laik_data_get_partitioning", "data")?.active)
    })
}

/// This process's range number `n` of the container's current partitioning (NULL if the
/// container has none or this process has fewer ranges).
#[no_mangle]
pub extern "C" fn laik_data_range(d: *mut LaikData, n: c_int) -> *mut super::custom::LaikTaskRange {
    run("laik_data_range", || {
        let p = obj(d, "laik_data_range", "data")?.active;
        if p.is_null() {
            return Ok(null_mut());
        }
        Ok(super::part::range_n(p, n, "laik_data_range")?.map_or(null_mut(), |(_, t)| t))
    })
}

#[no_mangle]
pub extern "C" fn laik_free(d: *mut LaikData) {
    run("laik_free", || {
        let data = obj(d, "laik_free", "data")?;
        data.alloc_release();
        data.inst().datas.retain(|&x| x != d);
        // SAFETY: from laik_new_data (Box::into_raw), freed once by the program.
        drop(unsafe { Box::from_raw(d) });
        Ok(())
    })
}

/// Switches `d` to `to_p` with data flow `flow` and reduction `red_op` (collective over the
/// processes of both partitionings).
#[no_mangle]
pub extern "C" fn laik_switchto_partitioning(
    d: *mut LaikData,
    to_p: *mut LaikPartitioning,
    flow: c_int,
    red_op: c_int,
) {
    run("laik_switchto_partitioning", || {
        let op = "laik_switchto_partitioning";
        let data = obj(d, op, "data")?;
        let p = obj(to_p, op, "partitioning")?;
        let part = p.part.clone();
        data.switch(&part, to_p, p.group, flow, red_op, op)
    })
}

/// Switches `d` to its current partitioning with another data flow (e.g. Preserve + Sum on
/// an All partitioning: an all-reduce).
#[no_mangle]
pub extern "C" fn laik_switchto_flow(d: *mut LaikData, flow: c_int, red_op: c_int) {
    run("laik_switchto_flow", || {
        let op = "laik_switchto_flow";
        let data = obj(d, op, "data")?;
        let part = data
            .part
            .clone()
            .ok_or_else(|| Error::invalid(op, format!("`{}` has no partitioning", data.name)))?;
        let (handle, group) = (data.active, data.group);
        data.switch(&part, handle, group, flow, red_op, op)
    })
}

#[no_mangle]
pub extern "C" fn laik_switchto_new_partitioning(
    d: *mut LaikData,
    g: *mut LaikGroup,
    pr: *mut super::part::LaikPartitioner,
    flow: c_int,
    red_op: c_int,
) -> *mut LaikPartitioning {
    let space = laik_data_get_space(d);
    let p = super::part::laik_new_partitioning(pr, g, space, null_mut());
    laik_switchto_partitioning(d, p, flow, red_op);
    p
}

/// Gives `d` its first partitioning without communication.
#[no_mangle]
pub extern "C" fn laik_set_initial_partitioning(d: *mut LaikData, p: *mut LaikPartitioning) {
    run("laik_set_initial_partitioning", || {
        let op = "laik_set_initial_partitioning";
        let data = obj(d, op, "data")?;
        let pt = obj(p, op, "partitioning")?;
        if data.part.is_some() {
            return Err(Error::invalid(
                op,
                format!("`{}` already has a partitioning", data.name),
            ));
        }
        let part = pt.part.clone();
        // The program's memory (laik_data_provide_memory) holds the initial values: keep
        // them rather than overwrite them with the new mapping's.
        let provided = data.user_mem.take();
        data.switch(&part, p, pt.group, 0, 0, op)?;
        if let Some(u) = &provided {
            // As in LAIK, memory provided for the initial mapping must hold it.
            if u.part_id.is_none() && data.c.num_mappings() > 0 {
                let (_, need) = data.map0_bytes()?;
                if need > u.cap {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "`{}`: {} bytes provided (laik_data_provide_memory) for a \
                             mapping 0 of {need} bytes",
                            data.name, u.cap
                        ),
                    ));
                }
            }
        }
        data.user_mem = provided;
        data.sync_in()
    })
}

/// Provides `size` bytes at `start` as the memory of mapping 0 from the next
/// `laik_set_initial_partitioning` (whose values it holds) or switch on, for every
/// partitioning whose mapping 0 fits: the program reads and writes the container there.
#[no_mangle]
pub extern "C" fn laik_data_provide_memory(d: *mut LaikData, start: *mut c_void, size: u64) {
    run("laik_data_provide_memory", || {
        let op = "laik_data_provide_memory";
        let data = obj(d, op, "data")?;
        let cap = usize::try_from(size)
            .ok()
            .filter(|&c| c > 0 && !start.is_null())
            .ok_or_else(|| Error::invalid(op, format!("{size} bytes at {start:?}")))?;
        data.user_mem = Some(UserMem {
            ptr: start.cast::<u8>(),
            cap,
            part_id: None,
        });
        data.maps.clear();
        Ok(())
    })
}

/// Uses the program's memory at `start` (`size` bytes) as mapping `n` of the current
/// partitioning: its contents are the container's values there, and the container's values
/// are written back to it whenever the container returns to this partitioning.
#[no_mangle]
pub extern "C" fn laik_set_map_memory(d: *mut LaikData, n: c_int, start: *mut c_void, size: u64) {
    run("laik_set_map_memory", || {
        let op = "laik_set_map_memory";
        let data = obj(d, op, "data")?;
        if n != 0 {
            return Err(Error::new(ferry_core::ErrorKind::Unsupported, op)
                .with_detail(format!("memory for mapping {n} (only mapping 0)")));
        }
        let id =
            data.part.as_ref().map(|p| p.id()).ok_or_else(|| {
                Error::invalid(op, format!("`{}` has no partitioning", data.name))
            })?;
        let m = data.c.raw_map(0)?;
        let elems: u64 = (0..data.dims())
            .map(|i| (m.to[i] - m.from[i]) as u64)
            .product();
        let need = elems as usize * data.elem.size();
        if start.is_null() || (size as usize) < need {
            return Err(Error::invalid(
                op,
                format!("{size} bytes at {start:?} for a mapping of {need} bytes"),
            ));
        }
        data.user_mem = Some(UserMem {
            ptr: start.cast::<u8>(),
            cap: need,
            part_id: Some(id),
        });
        data.sync_in()
    })
}

#[no_mangle]
pub extern "C" fn laik_fill_double(d: *mut LaikData, v: f64) {
    run("laik_fill_double", || {
        let data = obj(d, "laik_fill_double", "data")?;
        if data.elem != Elem::F64 {
            return Err(Error::invalid(
                "laik_fill_double",
                "container of another type",
            ));
        }
        for i in 0..data.c.num_mappings() {
            if let Some(m) = data.mapping(i as c_int)? {
                let r = m.raw;
                let n: usize = (0..3)
                    .map(|k| (r.to[k] - r.from[k]).max(1) as usize)
                    .product();
                // SAFETY: the mapping holds n doubles (a lexicographic or custom layout covers
                // its box one-to-one).
                unsafe { std::slice::from_raw_parts_mut(r.base.cast::<f64>(), n) }.fill(v);
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_get_map(d: *mut LaikData, n: c_int) -> *mut LaikMapping {
    run("laik_get_map", || {
        let data = obj(d, "laik_get_map", "data")?;
        Ok(data
            .mapping(n)?
            .map_or(null_mut(), |m| m as *mut LaikMapping))
    })
}

fn ext(r: &RawMap, d: usize) -> u64 {
    (r.to[d] - r.from[d]).max(0) as u64
}

/// Mapping `n` of a 1d container: address of its first element and element count (NULL and
/// 0 if this process has no such mapping).
#[no_mangle]
pub extern "C" fn laik_get_map_1d(
    d: *mut LaikData,
    n: c_int,
    base: *mut *mut c_void,
    count: *mut u64,
) -> *mut LaikMapping {
    run("laik_get_map_1d", || {
        let data = obj(d, "laik_get_map_1d", "data")?;
        match data.mapping(n)? {
            Some(m) => {
                out(base, m.raw.base.cast::<c_void>());
                out(count, ext(&m.raw, 0));
                Ok(m as *mut LaikMapping)
            }
            None => {
                out(base, null_mut());
                out(count, 0);
                Ok(null_mut())
            }
        }
    })
}

/// Mapping `n` of a 2d container: element (x, y) is at `base + y * ystride + x`.
#[no_mangle]
pub extern "C" fn laik_get_map_2d(
    d: *mut LaikData,
    n: c_int,
    base: *mut *mut c_void,
    ysize: *mut u64,
    ystride: *mut u64,
    xsize: *mut u64,
) -> *mut LaikMapping {
    run("laik_get_map_2d", || {
        let data = obj(d, "laik_get_map_2d", "data")?;
        match data.mapping(n)? {
            Some(m) => {
                out(base, m.raw.base.cast::<c_void>());
                out(ysize, ext(&m.raw, 1));
                out(ystride, m.raw.strides[1] as u64);
                out(xsize, ext(&m.raw, 0));
                Ok(m as *mut LaikMapping)
            }
            None => {
                out(base, null_mut());
                out(ysize, 0);
                out(ystride, 0);
                out(xsize, 0);
                Ok(null_mut())
            }
        }
    })
}

/// Mapping `n` of a 3d container: element (x, y, z) is at `base + z * zstride + y * ystride +
/// x`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn laik_get_map_3d(
    d: *mut LaikData,
    n: c_int,
    base: *mut *mut c_void,
    zsize: *mut u64,
    zstride: *mut u64,
    ysize: *mut u64,
    ystride: *mut u64,
    xsize: *mut u64,
) -> *mut LaikMapping {
    run("laik_get_map_3d", || {
        let data = obj(d, "laik_get_map_3d", "data")?;
        match data.mapping(n)? {
            Some(m) => {
                out(base, m.raw.base.cast::<c_void>());
                out(zsize, ext(&m.raw, 2));
                out(zstride, m.raw.strides[2] as u64);
                out(ysize, ext(&m.raw, 1));
                out(ystride, m.raw.strides[1] as u64);
                out(xsize, ext(&m.raw, 0));
                Ok(m as *mut LaikMapping)
            }
            None => {
                for p in [zsize, zstride, ysize, ystride, xsize] {
                    out(p, 0);
                }
                out(base, null_mut());
                Ok(null_mut())
            }
        }
    })
}

/// Containers that used `p` before `laik_partitioning_migrate` follow it to the new group.
pub(crate) fn follow_migration(p: &mut LaikPartitioning, old_id: u64) -> Result<()> {
    let pp: *mut LaikPartitioning = p;
    // SAFETY: the instance outlives every handle.
    let inst = unsafe { &mut *p.inst };
    for &d in inst.datas.clone().iter() {
        // SAFETY: `datas` holds live containers only (laik_free removes them).
        let data = unsafe { &mut *d };
        if data.part.as_ref().map(|x| x.id()) == Some(old_id) {
            let part = p.part.clone();
            data.switch(&part, pp, p.group, 1, 0, "laik_partitioning_migrate")?;
        }
    }
    Ok(())
}
