//! LAIK's space store: named index spaces shared by the processes of the world
//! (`laik_spacestore_set/get`, `laik_sync_spaces`, `laik_change_space_*`), over the data
//! layer's [`ferry_data::space_store::SpaceStore`].
//!
//! A space put into the store by this process stays registered under its name; a sync
//! updates every registered handle to the store's view, and a change of a registered space is
//! written to the store for the next sync. A name this process has no handle for gets one on
//! its first `laik_spacestore_get`.

use std::ffi::{c_char, CStr};
use std::ptr::null_mut;

use ferry_core::{Error, Result};
use ferry_data::{Range, Space};

use super::core::LaikInstance;
use super::part::LaikSpace;
use super::{obj, run};

fn name_of(p: *const c_char, op: &'static str) -> Result<String> {
    if p.is_null() {
        return Err(crate::ffi::null_arg(op, "name"));
    }
    // SAFETY: a NUL-terminated name from the program.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Puts `s` into the store under its name (visible to the others after the next sync).
#[no_mangle]
pub extern "C" fn laik_spacestore_set(s: *mut LaikSpace) {
    run("laik_spacestore_set", || {
        let sp = obj(s, "laik_spacestore_set", "space")?;
        if sp.name.is_empty() {
            return Err(Error::invalid(
                "laik_spacestore_set",
                "the space has no name",
            ));
        }
        let i = obj(sp.inst, "laik_spacestore_set", "instance")?;
        i.space_store.set(&sp.name, &sp.space)?;
        let name = sp.name.clone();
        i.named_spaces.retain(|(n, _)| *n != name);
        i.named_spaces.push((name, s));
        Ok(())
    })
}

/// The space called `name` as this process sees it (NULL if the store has none).
#[no_mangle]
pub extern "C" fn laik_spacestore_get(
    inst: *mut LaikInstance,
    name: *const c_char,
) -> *mut LaikSpace {
    run("laik_spacestore_get", || {
        let i = obj(inst, "laik_spacestore_get", "instance")?;
        let name = name_of(name, "laik_spacestore_get")?;
        if let Some((_, h)) = i.named_spaces.iter().find(|(n, _)| *n == name) {
            return Ok(*h);
        }
        Ok(match i.space_store.get(&name)? {
            Some(space) => {
                let h = LaikSpace::boxed(inst, space, &name);
                i.named_spaces.push((name, h));
                h
            }
            None => null_mut(),
        })
    })
}

/// Makes every process's store changes visible to all processes of the world (collective).
#[no_mangle]
pub extern "C" fn laik_sync_spaces(inst: *mut LaikInstance) {
    run("laik_sync_spaces", || {
        let i = obj(inst, "laik_sync_spaces", "instance")?;
        // SAFETY: group handles live until the process ends.
        let g = unsafe { &*i.world_group }.group.clone();
        let world = i
            .world
            .as_mut()
            .ok_or_else(|| Error::invalid("laik_sync_spaces", "instance finalized"))?;
        i.space_store.sync(world.transport(), &g)?;
        for (name, h) in &i.named_spaces {
            if let Some(space) = i.space_store.get(name)? {
                obj(*h, "laik_sync_spaces", "space")?.set(space);
            }
        }
        Ok(())
    })
}

fn change(
    s: *mut LaikSpace,
    dims: usize,
    from: [i64; 3],
    to: [i64; 3],
    op: &'static str,
) -> Result<()> {
    let sp = obj(s, op, "space")?;
    if !sp.unsized_ && sp.space.dims() != dims {
        return Err(Error::invalid(op, format!("a {}d space", sp.space.dims())));
    }
    let space = Space::from_range(Range::from_corners(dims, from, to)?)?;
    sp.set(space);
    let i = obj(sp.inst, op, "instance")?;
    if i.named_spaces.iter().any(|(n, h)| *h == s && *n == sp.name) {
        i.space_store.set(&sp.name, &space)?;
    }
    Ok(())
}

/// Changes a 1d space to `[from1, to1)` (a stored space is updated in the store too).
#[no_mangle]
pub extern "C" fn laik_change_space_1d(s: *mut LaikSpace, from1: i64, to1: i64) {
    run("laik_change_space_1d", || {
        change(s, 1, [from1, 0, 0], [to1, 1, 1], "laik_change_space_1d")
    })
}

#[no_mangle]
pub extern "C" fn laik_change_space_2d(
    s: *mut LaikSpace,
    from1: i64,
    to1: i64,
    from2: i64,
    to2: i64,
) {
    run("laik_change_space_2d", || {
        change(
            s,
            2,
            [from1, from2, 0],
            [to1, to2, 1],
            "laik_change_space_2d",
        )
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn laik_change_space_3d(
    s: *mut LaikSpace,
    from1: i64,
    to1: i64,
    from2: i64,
    to2: i64,
    from3: i64,
    to3: i64,
) {
    run("laik_change_space_3d", || {
        change(
            s,
            3,
            [from1, from2, from3],
            [to1, to2, to3],
            "laik_change_space_3d",
        )
    })
}
