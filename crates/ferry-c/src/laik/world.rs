//! The remaining calls of LAIK's `core.h`, `program.h`, `space.h` and `ext.h` about the world
//! and its processes: replacing the world (`laik_set_world`), the instance's id string
//! (`laik_get_guid`), the command line kept for a relaunch (`laik_set_args`), index
//! translation on a partitioning (`laik_index_global2local`) and LAIK's external agents
//! (`laik_ext_*`, `laik_get_failed`).

use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::OnceLock;

use ferry_core::{Error, ErrorKind, Result};

use super::core::{LaikGroup, LaikInstance};
use super::part::{LaikIndex, LaikPartitioning};
use super::{obj, run};

/// LAIK's `laik_create_group` makes a group without members ("yet invalid") that a backend
/// then fills through LAIK's internal group fields; a program has no call to fill it. Ferry
/// makes groups complete (world, shrink, union, clone), so the call is LAIK's fatal error.
#[no_mangle]
pub extern "C" fn laik_create_group(inst: *mut LaikInstance, maxsize: c_int) -> *mut LaikGroup {
    run("laik_create_group", || {
        obj(inst, "laik_create_group", "instance")?;
        Err(
            Error::new(ErrorKind::Unsupported, "laik_create_group").with_detail(format!(
                "an empty group (at most {maxsize} members) to be filled by a backend through \
             LAIK's internal group fields; make groups with laik_world, \
             laik_new_shrinked_group, laik_new_union_group or laik_clone_group"
            )),
        )
    })
}

/// Makes `g` the world of the instance (collective over the processes of the current world):
/// as in LAIK, nothing happens if `g` already is the world, otherwise `laik_world` returns
/// `g` from now on and the epoch advances. Processes outside `g` are no longer managed
/// (`laik_is_managed` is false for them).
#[no_mangle]
pub extern "C" fn laik_set_world(inst: *mut LaikInstance, g: *mut LaikGroup) {
    run("laik_set_world", || {
        let op = "laik_set_world";
        let i = obj(inst, op, "instance")?;
        let grp = obj(g, op, "group")?;
        if i.world_group == g {
            return Ok(());
        }
        if grp.inst != inst {
            return Err(Error::invalid(op, "a group of another instance"));
        }
        i.world_group = g;
        i.epoch += 1;
        Ok(())
    })
}

/// The instance's id string: the decimal location id of this process (its rank when the job
/// started), which stays the same for the process's lifetime.
#[no_mangle]
pub extern "C" fn laik_get_guid(inst: *mut LaikInstance) -> *mut c_char {
    static GUID: OnceLock<CString> = OnceLock::new();
    run("laik_get_guid", || {
        let i = obj(inst, "laik_get_guid", "instance")?;
        let rank = i.rank;
        let s = GUID.get_or_init(|| CString::new(rank.to_string()).unwrap_or_default());
        Ok(s.as_ptr().cast_mut())
    })
}

/// The command line LAIK keeps for relaunching processes: LAIK only records it, and so does
/// ferry (its launcher starts a replacement with the command line `ferry run` was given).
#[no_mangle]
pub extern "C" fn laik_set_args(inst: *mut LaikInstance, argc: c_int, argv: *mut *mut c_char) {
    run("laik_set_args", || {
        let i = obj(inst, "laik_set_args", "instance")?;
        if argc < 0 || (argc > 0 && argv.is_null()) {
            return Err(Error::invalid(
                "laik_set_args",
                format!("{argc} arguments at {argv:?}"),
            ));
        }
        i.args = (argc, argv);
        Ok(())
    })
}

/// Whether `global` lies in one of this process's ranges of `p`; if so `local` is its index
/// in the memory of the mapping holding that range (relative to the box of the mapping's
/// ranges, as the data layer lays a mapping out, and as `laik_global2local_1d` counts).
/// LAIK declares the call but leaves it unimplemented (it answers true without setting
/// `local`); ferry answers it.
#[no_mangle]
pub extern "C" fn laik_index_global2local(
    p: *mut LaikPartitioning,
    global: *mut LaikIndex,
    local: *mut LaikIndex,
) -> bool {
    run("laik_index_global2local", || {
        let op = "laik_index_global2local";
        let pt = obj(p, op, "partitioning")?;
        let g = obj(global, op, "global index")?;
        // SAFETY: the instance outlives every handle.
        let rank = unsafe { &*pt.inst }.rank;
        let dims = pt.part.space().dims();
        let mut idx = [0i64; 3];
        idx[..dims].copy_from_slice(&g.i[..dims]);
        let l = ferry_data::Layout::new(&pt.part, rank, &ferry_data::LayoutOrder::Lexicographic)?;
        let Some(k) = l.ranges.iter().position(|r| r.contains(&idx)) else {
            return Ok(false);
        };
        let from = l.mappings[l.range_mapping[k]].range.from();
        if !local.is_null() {
            let mut li = [0i64; 3];
            for d in 0..dims {
                li[d] = idx[d] - from[d];
            }
            // SAFETY: non-null out-parameter for a Laik_Index.
            unsafe { local.write(LaikIndex { i: li }) };
        }
        Ok(true)
    })
}

fn no_agents(op: &'static str) -> Error {
    Error::new(ErrorKind::Unsupported, op).with_detail(
        "LAIK's external agents (ext.h) are not provided: ferry detects failed processes \
         itself (docs/FAULT-TOLERANCE.md) and resizes through `ferry ctl` and \
         laik_allow_world_resize",
    )
}

/// `laik_agent_init` of LAIK's `agent.h`.
pub type AgentInit = extern "C" fn(c_int, *mut *mut c_char) -> *mut c_void;

#[no_mangle]
pub extern "C" fn laik_ext_load_agent_from_file(
    _inst: *mut LaikInstance,
    _path: *mut c_char,
    _argc: c_int,
    _argv: *mut *mut c_char,
) {
    run("laik_ext_load_agent_from_file", || -> Result<()> {
        Err(no_agents("laik_ext_load_agent_from_file"))
    })
}

#[no_mangle]
pub extern "C" fn laik_ext_load_agent_from_function(
    _inst: *mut LaikInstance,
    _f: Option<AgentInit>,
    _argc: c_int,
    _argv: *mut *mut c_char,
) {
    run("laik_ext_load_agent_from_function", || -> Result<()> {
        Err(no_agents("laik_ext_load_agent_from_function"))
    })
}

/// Sets up the (empty) list of agents: with no agent loaded, as in LAIK, there is nothing
/// else to do.
#[no_mangle]
pub extern "C" fn laik_ext_init(inst: *mut LaikInstance) {
    run("laik_ext_init", || {
        obj(inst, "laik_ext_init", "instance").map(|_| ())
    })
}

/// Detaches the loaded agents: none can be loaded, so nothing is detached.
#[no_mangle]
pub extern "C" fn laik_ext_cleanup(inst: *mut LaikInstance) {
    run("laik_ext_cleanup", || {
        obj(inst, "laik_ext_cleanup", "instance").map(|_| ())
    })
}

/// The failed nodes the loaded agents report: with no agent loaded, as in LAIK, none
/// (`*nfailed` is 0 and the buffer is untouched).
#[no_mangle]
pub extern "C" fn laik_get_failed(
    inst: *mut LaikInstance,
    nfailed: *mut c_int,
    _failed: *mut *mut c_int,
    _max: c_int,
) {
    run("laik_get_failed", || {
        obj(inst, "laik_get_failed", "instance")?;
        super::out(nfailed, 0);
        Ok(())
    })
}
