//! Reservations, transitions computed ahead, action sequences and memory layouts.

use std::ffi::c_int;
use std::sync::Arc;

use ferry_core::{Error, Result};
use ferry_data::{LayoutOrder, Partitioning, Space};

use super::core::LaikGroup;
use super::data::LaikData;
use super::part::{LaikIndex, LaikPartitioning, LaikRange, LaikSpace};
use super::reduce::flow_of;
use super::{obj, run};

/// A set of partitionings to size a container's memory for.
pub struct LaikReservation {
    data: *mut LaikData,
    parts: Vec<Partitioning>,
}

/// A switch between two partitionings, computed ahead (`laik_calc_transition`).
pub struct LaikTransition {
    to: Partitioning,
    to_handle: *mut LaikPartitioning,
    group: *mut LaikGroup,
    flow: c_int,
    redop: c_int,
}

impl LaikTransition {
    /// The target partitioning's name, the flow and the operation (`laik_log_Transition`).
    pub(crate) fn parts(&self) -> (String, c_int, c_int) {
        // SAFETY: partitionings outlive the transitions made from them (LAIK's contract).
        let name = unsafe { self.to_handle.as_ref() }.map_or(String::new(), |p| p.name.clone());
        (name, self.flow, self.redop)
    }
}

impl LaikActionSeq {
    /// The sequence's transition and the name of its container (`laik_log_ActionSeq`).
    pub(crate) fn parts(&self) -> (*mut LaikTransition, String) {
        // SAFETY: containers outlive the action sequences made for them (LAIK's contract).
        let name = unsafe { self.data.as_ref() }.map_or(String::new(), |d| d.name.clone());
        (self.t, name)
    }
}

/// A transition bound to a container (`laik_calc_actions`), or an empty sequence
/// (`laik_aseq_new`: both pointers NULL), whose execution does nothing.
pub struct LaikActionSeq {
    data: *mut LaikData,
    t: *mut LaikTransition,
}

/// An empty action sequence of instance `inst` (LAIK's `laik_aseq_new`). LAIK records the
/// actions of transitions into such a sequence internally; a program has no call that records
/// into it, so it stays empty: `laik_exec_actions` on it does nothing, `laik_log_ActionSeq`
/// describes it as empty, `laik_aseq_free` frees it.
#[no_mangle]
pub extern "C" fn laik_aseq_new(inst: *mut super::core::LaikInstance) -> *mut LaikActionSeq {
    run("laik_aseq_new", || {
        obj(inst, "laik_aseq_new", "instance")?;
        Ok(Box::into_raw(Box::new(LaikActionSeq {
            data: std::ptr::null_mut(),
            t: std::ptr::null_mut(),
        })))
    })
}

#[no_mangle]
pub extern "C" fn laik_reservation_new(d: *mut LaikData) -> *mut LaikReservation {
    run("laik_reservation_new", || {
        obj(d, "laik_reservation_new", "data")?;
        Ok(Box::into_raw(Box::new(LaikReservation {
            data: d,
            parts: Vec::new(),
        })))
    })
}

#[no_mangle]
pub extern "C" fn laik_reservation_add(r: *mut LaikReservation, p: *mut LaikPartitioning) {
    run("laik_reservation_add", || {
        let res = obj(r, "laik_reservation_add", "reservation")?;
        let pt = obj(p, "laik_reservation_add", "partitioning")?;
        res.parts.push(pt.part.clone());
        Ok(())
    })
}

/// Sizes the container's memory for every partitioning of the reservation, so switches among
/// them do not allocate (and mappings keep their addresses).
#[no_mangle]
pub extern "C" fn laik_reservation_alloc(r: *mut LaikReservation) {
    run("laik_reservation_alloc", || {
        let res = obj(r, "laik_reservation_alloc", "reservation")?;
        let data = obj(res.data, "laik_reservation_alloc", "data")?;
        // A partitioning and its halo share one placement (LAIK allocates the reservation
        // once for both), so a mapping keeps its address across switches among them.
        let inner = res
            .parts
            .iter()
            .map(|p| data.inner(p))
            .collect::<Result<Vec<_>>>()?;
        if let [a, b] = &inner[..] {
            if a.is_halo_pair(b) || b.is_halo_pair(a) {
                data.c.share_layout(a, b)?;
            }
        }
        let parts: Vec<&Partitioning> = inner.iter().collect();
        data.c.reserve(&parts)
    })
}

#[no_mangle]
pub extern "C" fn laik_reservation_free(r: *mut LaikReservation) {
    run("laik_reservation_free", || {
        if !r.is_null() {
            // SAFETY: from laik_reservation_new, freed once.
            drop(unsafe { Box::from_raw(r) });
        }
        Ok(())
    })
}

/// The reservation's memory is the container's own (sized by `laik_reservation_alloc`).
#[no_mangle]
pub extern "C" fn laik_data_use_reservation(d: *mut LaikData, r: *mut LaikReservation) {
    run("laik_data_use_reservation", || {
        let data = obj(d, "laik_data_use_reservation", "data")?;
        let res = obj(r, "laik_data_use_reservation", "reservation")?;
        if res.data != d {
            return Err(Error::invalid(
                "laik_data_use_reservation",
                format!(
                    "reservation made for another container than `{}`",
                    data.name
                ),
            ));
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_calc_transition(
    space: *mut LaikSpace,
    from_p: *mut LaikPartitioning,
    to_p: *mut LaikPartitioning,
    flow: c_int,
    red_op: c_int,
) -> *mut LaikTransition {
    run("laik_calc_transition", || {
        let op = "laik_calc_transition";
        let sp = obj(space, op, "space")?;
        let from = obj(from_p, op, "from partitioning")?;
        let to = obj(to_p, op, "to partitioning")?;
        flow_of(flow, red_op, op)?;
        let same = |s: &Space| *s == sp.space;
        if !same(from.part.space()) || !same(to.part.space()) {
            return Err(Error::invalid(op, "partitionings of another space"));
        }
        Ok(Box::into_raw(Box::new(LaikTransition {
            to: to.part.clone(),
            to_handle: to_p,
            group: to.group,
            flow,
            redop: red_op,
        })))
    })
}

#[no_mangle]
pub extern "C" fn laik_free_transition(t: *mut LaikTransition) {
    run("laik_free_transition", || {
        if !t.is_null() {
            // SAFETY: from laik_calc_transition, freed once.
            drop(unsafe { Box::from_raw(t) });
        }
        Ok(())
    })
}

/// Runs a transition on `d` (which must be in the transition's source partitioning). The
/// container keeps the bound plan, so repeating a transition does no planning.
#[no_mangle]
pub extern "C" fn laik_exec_transition(d: *mut LaikData, t: *mut LaikTransition) {
    run("laik_exec_transition", || {
        let data = obj(d, "laik_exec_transition", "data")?;
        let tr = obj(t, "laik_exec_transition", "transition")?;
        let to = tr.to.clone();
        data.switch(
            &to,
            tr.to_handle,
            tr.group,
            tr.flow,
            tr.redop,
            "laik_exec_transition",
        )
    })
}

#[no_mangle]
pub extern "C" fn laik_calc_actions(
    d: *mut LaikData,
    t: *mut LaikTransition,
    _from_res: *mut LaikReservation,
    _to_res: *mut LaikReservation,
) -> *mut LaikActionSeq {
    run("laik_calc_actions", || {
        obj(d, "laik_calc_actions", "data")?;
        obj(t, "laik_calc_actions", "transition")?;
        Ok(Box::into_raw(Box::new(LaikActionSeq { data: d, t })))
    })
}

#[no_mangle]
pub extern "C" fn laik_exec_actions(a: *mut LaikActionSeq) {
    run("laik_exec_actions", || {
        let s = obj(a, "laik_exec_actions", "action sequence")?;
        if s.t.is_null() {
            // An empty sequence (laik_aseq_new) has nothing to run.
            return Ok(());
        }
        laik_exec_transition(s.data, s.t);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_aseq_free(a: *mut LaikActionSeq) {
    run("laik_aseq_free", || {
        if !a.is_null() {
            // SAFETY: from laik_calc_actions, freed once.
            drop(unsafe { Box::from_raw(a) });
        }
        Ok(())
    })
}

/// Lays out the container's mappings with the layouts of `factory`, asked for each mapping's
/// box: lexicographic layouts and strided layouts of the program's own are honoured, other
/// layouts are a fatal error (`layout_user.rs`). Containers of registered types are held as
/// bytes, which only the lexicographic layout describes.
#[no_mangle]
pub extern "C" fn laik_data_set_layout_factory(
    d: *mut LaikData,
    factory: Option<super::layout_user::LayoutFactory>,
) {
    run("laik_data_set_layout_factory", || {
        let op = "laik_data_set_layout_factory";
        let data = obj(d, op, "data")?;
        let f = factory.ok_or_else(|| crate::ffi::null_arg(op, "factory"))?;
        if data.is_registered_type() {
            // SAFETY: spaces live until the process ends.
            let sp = unsafe { &*data.space };
            let r = sp.space.range();
            let mut range = LaikRange {
                space: data.space,
                from: LaikIndex { i: r.from() },
                to: LaikIndex { i: r.to() },
            };
            let l = f(1, &mut range);
            if l.is_null() {
                return Err(Error::invalid(op, "the layout factory returned NULL"));
            }
            if !super::layout::is_lex(l) {
                return Err(Error::invalid(
                    op,
                    "unsupported: a layout of the program's own for a container of a \
                     registered type (ferry holds those as bytes, laid out lexicographically)",
                ));
            }
            return data.c.set_layout_order(LayoutOrder::Custom(Arc::new(
                ferry_data::partitioning::lex_strides,
            )));
        }
        let order = super::layout_user::factory_order(f, data.space, op)?;
        data.c.set_layout_order(order)
    })
}
