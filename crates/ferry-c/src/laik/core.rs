//! Instance, groups, phases, resize points, logging, time and profiling.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::io::Write;
use std::ptr::null_mut;
use std::time::Instant;

use ferry_coll::Group;
use ferry_core::{Error, Result};
use ferry_data::Instance;
use ferry_facade::resize::Resizer;
use ferry_facade::World;

use super::data::LaikData;
use super::{obj, run};

/// The process's LAIK instance.
pub struct LaikInstance {
    pub(crate) world: Option<World>,
    pub(crate) data: Instance,
    pub(crate) rank: usize,
    pub(crate) world_group: *mut LaikGroup,
    pub(crate) phase: c_int,
    /// Name and data the program gave with the phase (`laik_set_phase`), returned as given.
    phase_name: *const c_char,
    phase_data: *mut c_void,
    pub(crate) iteration: c_int,
    pub(crate) epoch: u32,
    resizer: Resizer,
    /// Live containers (a migrated partitioning moves the containers that use it).
    pub(crate) datas: Vec<*mut LaikData>,
    /// Group of the latest switch: the processes still working together at the end.
    pub(crate) last_group: Option<Group>,
    /// Seconds spent in container switches (LAIK's total and backend time).
    pub(crate) switch_secs: f64,
    /// `laik_mylocation`'s string, made on first use.
    location: Option<std::ffi::CString>,
    /// The world's location strings by location id once `laik_sync_location` ran (a
    /// key-value store of this instance), null before.
    pub(crate) locations: *mut super::kvs::LaikKvs,
    /// Group handles made so far (a handle's `gid` is its number).
    groups_made: c_int,
    /// The space store and the handles registered under its names (see `spaces.rs`).
    pub(crate) space_store: ferry_data::space_store::SpaceStore,
    pub(crate) named_spaces: Vec<(String, *mut super::part::LaikSpace)>,
    pub(crate) log_level: c_int,
    /// Message being built by laik_log_begin / laik_log_append (level, text).
    log_line: Option<(c_int, String)>,
    pub(crate) profile: Option<Profile>,
    /// The command line the program gave `laik_set_args` (kept, as LAIK keeps it).
    pub(crate) args: (c_int, *mut *mut c_char),
}

/// A group of processes. `repr(C)` with LAIK's leading fields (`inst`, `gid`, `size`,
/// `myid`): `laik-internal.h` declares them, and LAIK's test programs read `g->myid` and
/// `g->size` directly. A group never changes after it is made, so the fields stay true.
#[repr(C)]
pub struct LaikGroup {
    pub(crate) inst: *mut LaikInstance,
    gid: c_int,
    size: c_int,
    pub(crate) myid: c_int,
    pub(crate) group: Group,
    pub(crate) parent: *mut LaikGroup,
    /// The member `laik_Master` assigns to and `laik_get_master` names (`laik_set_master`).
    pub(crate) master: c_int,
}

/// Profiling state of the instance (`laik_enable_profiling*`).
pub(crate) struct Profile {
    file: String,
    user: f64,
    started: Option<Instant>,
}

static mut INSTANCE: *mut LaikInstance = null_mut();

/// World rank of this process once LAIK is initialised (for error messages).
pub(crate) fn current_rank() -> Option<usize> {
    // SAFETY: INSTANCE is written once by laik_init on the program's thread and read here;
    // LAIK programs call into the library from one thread.
    let p = unsafe { INSTANCE };
    // SAFETY: a non-null INSTANCE points to the leaked instance.
    unsafe { p.as_ref() }.map(|i| i.rank)
}

impl LaikInstance {
    /// The transport of the instance.
    pub(crate) fn transport(&mut self) -> Result<&mut dyn ferry_core::Transport> {
        match self.world.as_mut() {
            Some(w) => Ok(w.transport()),
            None => Err(Error::invalid("laik", "the instance was finalized")),
        }
    }

    /// A new group handle of this instance.
    pub(crate) fn new_group(&mut self, group: Group, parent: *mut LaikGroup) -> *mut LaikGroup {
        let myid = group.index_of(self.rank).map_or(-1, |i| i as c_int);
        self.groups_made += 1;
        Box::into_raw(Box::new(LaikGroup {
            inst: self,
            gid: self.groups_made,
            size: group.size() as c_int,
            myid,
            group,
            parent,
            master: 0,
        }))
    }
}

/// LAIK's log threshold from `LAIK_LOG` (`[n|s]level[:from[-to]]`, default: errors only).
pub(crate) fn log_level_from_env() -> c_int {
    let Ok(v) = std::env::var("LAIK_LOG") else {
        return 4;
    };
    let digits: String = v
        .trim_start_matches(['n', 's'])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap_or(4)
}

fn init() -> Result<*mut LaikInstance> {
    let world = ferry_facade::init()?;
    let rank = world.rank();
    let data = world.data_instance()?;
    let resizer = world.resizer();
    let inst = Box::into_raw(Box::new(LaikInstance {
        world: Some(world),
        data,
        rank,
        world_group: null_mut(),
        phase: 0,
        phase_name: std::ptr::null(),
        phase_data: null_mut(),
        iteration: 0,
        epoch: 0,
        resizer,
        datas: Vec::new(),
        last_group: None,
        switch_secs: 0.0,
        location: None,
        locations: null_mut(),
        groups_made: 0,
        space_store: ferry_data::space_store::SpaceStore::new(),
        named_spaces: Vec::new(),
        log_level: log_level_from_env(),
        log_line: None,
        profile: None,
        args: (0, null_mut()),
    }));
    // SAFETY: just leaked; the instance lives until the process ends.
    let i = unsafe { &mut *inst };
    // SAFETY: single writer at initialisation (see current_rank).
    unsafe { INSTANCE = inst };
    // Members of the initial world return at once; spares of an elastic job wait here until a
    // resize point admits them (they start at that point's phase).
    let world = i
        .world
        .as_mut()
        .ok_or_else(|| Error::invalid("laik_init", "no world"))?;
    let (joined, phase) = i.resizer.join_world(world.transport())?;
    if joined.my_index.is_none() {
        // A spare that was never admitted: the job ended without it.
        if let Some(w) = i.world.take() {
            w.finish()?;
        }
        std::process::exit(0);
    }
    let parent = if joined.previous.members() != joined.group.members() {
        i.new_group(joined.previous.clone(), null_mut())
    } else {
        null_mut()
    };
    i.world_group = i.new_group(joined.group, parent);
    i.phase = phase as c_int;
    i.epoch = joined.epoch;
    Ok(inst)
}

/// Starts LAIK over ferry (the backend and job come from `ferry run`).
#[no_mangle]
pub extern "C" fn laik_init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> *mut LaikInstance {
    run("laik_init", || {
        line_buffered_stdout();
        super::part::init_statics();
        init()
    })
}

extern "C" {
    /// C's standard output stream (`FILE*`).
    static mut stdout: *mut c_void;
    fn setvbuf(stream: *mut c_void, buf: *mut c_char, mode: c_int, size: usize) -> c_int;
}

/// Makes C's stdout line buffered, as Rust's is. Under the launcher stdout is a pipe, which C
/// buffers fully: a process's lines then reach the launcher only when it exits, so when the
/// printing role moves between processes (a shrink removes the master, which prints on) the
/// lines of two processes arrive in the order the processes end instead of the order they
/// were printed.
fn line_buffered_stdout() {
    const IOLBF: c_int = 1;
    // SAFETY: `stdout` is the C library's stream, valid for the whole process; setvbuf with a
    // NULL buffer lets the library allocate one. LAIK programs call laik_init before printing.
    unsafe {
        setvbuf(stdout, null_mut(), IOLBF, 0);
    }
}

/// Ends LAIK: the members of the current world meet (so nobody still needs data from this
/// process), then the transport shuts down.
#[no_mangle]
pub extern "C" fn laik_finalize(inst: *mut LaikInstance) {
    run("laik_finalize", || {
        let i = obj(inst, "laik_finalize", "instance")?;
        let _ = std::io::stdout().flush();
        // The processes of the latest switch meet before shutting down; a process outside
        // that group (removed by a shrink or a resize) leaves at once, as in LAIK, and its
        // transport's finish still delivers what it owes.
        // SAFETY: the world group handle lives as long as the instance.
        let g = match i.last_group.clone() {
            Some(g) => g,
            None => unsafe { &*i.world_group }.group.clone(),
        };
        if g.index_of(i.rank).is_some() {
            if let Some(w) = i.world.as_mut() {
                i.data.finalize_in(w.transport(), &g)?;
            }
        }
        if let Some(w) = i.world.take() {
            w.finish()?;
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_world(inst: *mut LaikInstance) -> *mut LaikGroup {
    run("laik_world", || {
        Ok(obj(inst, "laik_world", "instance")?.world_group)
    })
}

#[no_mangle]
pub extern "C" fn laik_size(g: *mut LaikGroup) -> c_int {
    run("laik_size", || {
        Ok(obj(g, "laik_size", "group")?.group.size() as c_int)
    })
}

#[no_mangle]
pub extern "C" fn laik_myid(g: *mut LaikGroup) -> c_int {
    run("laik_myid", || Ok(obj(g, "laik_myid", "group")?.myid))
}

#[no_mangle]
pub extern "C" fn laik_inst(g: *mut LaikGroup) -> *mut LaikInstance {
    run("laik_inst", || Ok(obj(g, "laik_inst", "group")?.inst))
}

/// A group of `g` without the members at the `len` indexes of `list` (renumbered densely).
#[no_mangle]
pub extern "C" fn laik_new_shrinked_group(
    g: *mut LaikGroup,
    len: c_int,
    list: *mut c_int,
) -> *mut LaikGroup {
    run("laik_new_shrinked_group", || {
        let grp = obj(g, "laik_new_shrinked_group", "group")?;
        let n = usize::try_from(len).unwrap_or(0);
        let mut removed = Vec::with_capacity(n);
        for k in 0..n {
            // SAFETY: the caller passes `len` ints in `list` (non-null when len > 0).
            let v = unsafe { *list.add(k) };
            let idx = usize::try_from(v).map_err(|_| {
                Error::invalid("laik_new_shrinked_group", format!("group index {v}"))
            })?;
            removed.push(idx);
        }
        let i = obj(grp.inst, "laik_new_shrinked_group", "instance")?;
        let shrunk = i.data.shrink(&grp.group, &removed)?;
        Ok(i.new_group(shrunk, g))
    })
}

#[no_mangle]
pub extern "C" fn laik_group_parent(g: *mut LaikGroup) -> *mut LaikGroup {
    run("laik_group_parent", || {
        Ok(obj(g, "laik_group_parent", "group")?.parent)
    })
}

/// Groups stay valid until the process ends (partitionings refer to them); releasing one only
/// checks the handle.
#[no_mangle]
pub extern "C" fn laik_release_group(g: *mut LaikGroup) {
    run("laik_release_group", || {
        obj(g, "laik_release_group", "group").map(|_| ())
    })
}

/// A resize point at `phase` (collective over the current world): spares of `ferry run
/// --spares` join and processes named by `ferry ctl NAME remove` leave. Returns the world
/// after the point (a new group, whose parent is the old world, if it changed).
#[no_mangle]
pub extern "C" fn laik_allow_world_resize(inst: *mut LaikInstance, phase: c_int) -> *mut LaikGroup {
    run("laik_allow_world_resize", || {
        let i = obj(inst, "laik_allow_world_resize", "instance")?;
        i.phase = phase;
        let old = i.world_group;
        // SAFETY: group handles live until the process ends.
        let wg = unsafe { &*old };
        if wg.myid < 0 {
            return Ok(old);
        }
        let group = wg.group.clone();
        let epoch = i.epoch;
        let world = i
            .world
            .as_mut()
            .ok_or_else(|| Error::invalid("laik_allow_world_resize", "instance finalized"))?;
        let r = i
            .resizer
            .allow_world_resize(world.transport(), &group, epoch, i64::from(phase))?;
        if !r.changed {
            return Ok(old);
        }
        i.epoch = r.epoch;
        let g = i.new_group(r.group, old);
        i.world_group = g;
        Ok(g)
    })
}

/// Ends a resize: the old world (parent of the current one) is no longer used, so the
/// current world forgets it (as in LAIK, `laik_group_parent` returns NULL afterwards).
#[no_mangle]
pub extern "C" fn laik_finish_world_resize(inst: *mut LaikInstance) {
    run("laik_finish_world_resize", || {
        let i = obj(inst, "laik_finish_world_resize", "instance")?;
        obj(i.world_group, "laik_finish_world_resize", "world")?.parent = null_mut();
        Ok(())
    })
}

/// This process's location id: its rank in the job.
#[no_mangle]
pub extern "C" fn laik_mylocationid(inst: *mut LaikInstance) -> c_int {
    run("laik_mylocationid", || {
        Ok(obj(inst, "laik_mylocationid", "instance")?.rank as c_int)
    })
}

/// This process's location string, `host:pid` (valid until the process ends).
#[no_mangle]
pub extern "C" fn laik_mylocation(inst: *mut LaikInstance) -> *mut c_char {
    run("laik_mylocation", || {
        let i = obj(inst, "laik_mylocation", "instance")?;
        if i.location.is_none() {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "localhost".to_string());
            let text = format!("{host}:{}", std::process::id());
            i.location = std::ffi::CString::new(text).ok();
        }
        Ok(i.location
            .as_ref()
            .map_or(null_mut(), |c| c.as_ptr().cast_mut()))
    })
}

/// Location id (job rank) of member `id` of `g` (-1 if there is no such member).
#[no_mangle]
pub extern "C" fn laik_group_locationid(g: *mut LaikGroup, id: c_int) -> c_int {
    run("laik_group_locationid", || {
        let grp = obj(g, "laik_group_locationid", "group")?;
        Ok(usize::try_from(id)
            .ok()
            .filter(|&k| k < grp.group.size())
            .map_or(-1, |k| grp.group.member(k) as c_int))
    })
}

/// The master of a group: member 0 unless `laik_set_master` chose another.
#[no_mangle]
pub extern "C" fn laik_get_master(g: *mut LaikGroup) -> c_int {
    run("laik_get_master", || {
        Ok(obj(g, "laik_get_master", "group")?.master)
    })
}

#[no_mangle]
pub extern "C" fn laik_is_master(g: *mut LaikGroup) -> bool {
    run("laik_is_master", || {
        let grp = obj(g, "laik_is_master", "group")?;
        Ok(grp.myid == grp.master)
    })
}

/// Makes member `id` the master of `g` (the owner under `laik_Master` on this group, as in
/// LAIK); false, changing nothing, if `g` has no member `id`. Every process of the group must
/// make the same call, since each computes partitionings on its own.
#[no_mangle]
pub extern "C" fn laik_set_master(g: *mut LaikGroup, id: c_int) -> bool {
    run("laik_set_master", || {
        let grp = obj(g, "laik_set_master", "group")?;
        let ok = usize::try_from(id).is_ok_and(|k| k < grp.group.size());
        if ok {
            grp.master = id;
        }
        Ok(ok)
    })
}

/// Whether this process is in the current world.
#[no_mangle]
pub extern "C" fn laik_is_managed(inst: *mut LaikInstance) -> bool {
    run("laik_is_managed", || {
        let i = obj(inst, "laik_is_managed", "instance")?;
        Ok(obj(i.world_group, "laik_is_managed", "world")?.myid >= 0)
    })
}

#[no_mangle]
pub extern "C" fn laik_epoch(inst: *mut LaikInstance) -> c_int {
    run("laik_epoch", || {
        Ok(obj(inst, "laik_epoch", "instance")?.epoch as c_int)
    })
}

#[no_mangle]
pub extern "C" fn laik_phase(inst: *mut LaikInstance) -> c_int {
    run("laik_phase", || {
        Ok(obj(inst, "laik_phase", "instance")?.phase)
    })
}

#[no_mangle]
pub extern "C" fn laik_set_phase(
    inst: *mut LaikInstance,
    n: c_int,
    name: *const c_char,
    data: *mut c_void,
) {
    run("laik_set_phase", || {
        let i = obj(inst, "laik_set_phase", "instance")?;
        i.phase = n;
        i.phase_name = name;
        i.phase_data = data;
        Ok(())
    })
}

/// The phase number, name and data of the latest `laik_set_phase` (0, NULL and NULL before
/// the first); NULL outputs are skipped.
#[no_mangle]
pub extern "C" fn laik_get_phase(
    inst: *mut LaikInstance,
    n: *mut c_int,
    name: *mut *const c_char,
    data: *mut *mut c_void,
) {
    run("laik_get_phase", || {
        let i = obj(inst, "laik_get_phase", "instance")?;
        super::out(n, i.phase);
        super::out(name, i.phase_name);
        super::out(data, i.phase_data);
        Ok(())
    })
}

/// The iteration number of the latest `laik_set_iteration` (0 after `laik_iter_reset`).
#[no_mangle]
pub extern "C" fn laik_get_iteration(inst: *mut LaikInstance) -> c_int {
    run("laik_get_iteration", || {
        Ok(obj(inst, "laik_get_iteration", "instance")?.iteration)
    })
}

#[no_mangle]
pub extern "C" fn laik_set_iteration(inst: *mut LaikInstance, iter: c_int) {
    run("laik_set_iteration", || {
        obj(inst, "laik_set_iteration", "instance")?.iteration = iter;
        Ok(())
    })
}

/// Wall-clock time in seconds.
#[no_mangle]
pub extern "C" fn laik_wtime() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn log_threshold() -> c_int {
    // SAFETY: see current_rank.
    let p = unsafe { INSTANCE };
    // SAFETY: a non-null INSTANCE points to the leaked instance.
    unsafe { p.as_ref() }.map_or_else(log_level_from_env, |i| i.log_level)
}

/// Whether messages of `level` are logged (LAIK_LOG threshold; errors by default).
#[no_mangle]
pub extern "C" fn laik_log_shown(level: c_int) -> bool {
    level >= log_threshold()
}

#[no_mangle]
pub extern "C" fn laik_set_loglevel(level: c_int) {
    // SAFETY: see current_rank.
    let p = unsafe { INSTANCE };
    // SAFETY: a non-null INSTANCE points to the leaked instance, used from one thread.
    if let Some(i) = unsafe { p.as_mut() } {
        i.log_level = level;
    }
}

/// Writes one log message to stderr (the `laik_log` inline function formats it); a message
/// of level `LAIK_LL_Panic` ends the process like LAIK does.
#[no_mangle]
pub extern "C" fn laik_log_write(level: c_int, text: *const c_char) {
    let msg = if text.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated string from the inline laik_log.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    };
    let prefix = super::logging::prefix(super::logging::level_tag(level));
    let _ = writeln!(std::io::stderr(), "{prefix}: {}", msg.trim_end());
    if level >= 5 {
        super::die(
            "laik_log",
            crate::api::FerryStatus::FERRY_ERR_INTERNAL,
            &msg,
        );
    }
}

fn with_instance<R>(f: impl FnOnce(&mut LaikInstance) -> R) -> Option<R> {
    // SAFETY: see current_rank.
    let p = unsafe { INSTANCE };
    // SAFETY: a non-null INSTANCE points to the leaked instance, used from one thread.
    unsafe { p.as_mut() }.map(f)
}

/// Starts a log message of `level` built piecewise (`laik_log_append`, `laik_log_flush`);
/// returns whether it will be shown.
#[no_mangle]
pub extern "C" fn laik_log_begin(level: c_int) -> bool {
    let shown = laik_log_shown(level);
    with_instance(|i| i.log_line = shown.then(|| (level, String::new())));
    shown
}

/// Appends text to the message started by `laik_log_begin` (the inline `laik_log_append`
/// formats it).
#[no_mangle]
pub extern "C" fn laik_log_append_text(text: *const c_char) {
    if text.is_null() {
        return;
    }
    // SAFETY: a NUL-terminated string from the inline formatter.
    let t = unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned();
    with_instance(|i| {
        if let Some((_, line)) = i.log_line.as_mut() {
            line.push_str(&t);
        }
    });
}

/// Writes the message started by `laik_log_begin`.
#[no_mangle]
pub extern "C" fn laik_log_flush_text() {
    if let Some(Some((level, line))) = with_instance(|i| i.log_line.take()) {
        if let Ok(c) = std::ffi::CString::new(line) {
            laik_log_write(level, c.as_ptr());
        }
    }
}

/// Seconds this process spent in LAIK calls that communicate (container switches).
#[no_mangle]
pub extern "C" fn laik_get_total_time() -> f64 {
    with_instance(|i| i.switch_secs).unwrap_or(0.0)
}

/// Seconds measured between `laik_profile_user_start` and `laik_profile_user_stop` since
/// profiling was enabled or reset (0 without profiling).
#[no_mangle]
pub extern "C" fn laik_get_user_time() -> f64 {
    with_instance(|i| i.profile.as_ref().map_or(0.0, |p| p.user)).unwrap_or(0.0)
}

/// Seconds spent communicating: every switch is one batched exchange, so this equals
/// `laik_get_total_time`.
#[no_mangle]
pub extern "C" fn laik_get_backend_time() -> f64 {
    laik_get_total_time()
}

/// Restarts the iteration count (profiling and log prefixes).
#[no_mangle]
pub extern "C" fn laik_iter_reset(inst: *mut LaikInstance) {
    run("laik_iter_reset", || {
        obj(inst, "laik_iter_reset", "instance")?.iteration = 0;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_panic(msg: *const c_char) {
    laik_log_write(5, msg);
}

/// Profiling: accumulated user time per iteration, appended to the named file by
/// `laik_writeout_profile`.
#[no_mangle]
pub extern "C" fn laik_enable_profiling_file(inst: *mut LaikInstance, filename: *const c_char) {
    run("laik_enable_profiling_file", || {
        let i = obj(inst, "laik_enable_profiling_file", "instance")?;
        if filename.is_null() {
            return Err(crate::ffi::null_arg(
                "laik_enable_profiling_file",
                "filename",
            ));
        }
        // SAFETY: NUL-terminated file name from the program.
        let f = unsafe { CStr::from_ptr(filename) }
            .to_string_lossy()
            .into_owned();
        i.profile = Some(Profile {
            file: f,
            user: 0.0,
            started: None,
        });
        Ok(())
    })
}

/// Profiling without a file: user time is measured, `laik_writeout_profile` writes nothing.
#[no_mangle]
pub extern "C" fn laik_enable_profiling(inst: *mut LaikInstance) {
    run("laik_enable_profiling", || {
        let i = obj(inst, "laik_enable_profiling", "instance")?;
        if i.profile.is_none() {
            i.profile = Some(Profile {
                file: String::new(),
                user: 0.0,
                started: None,
            });
        }
        Ok(())
    })
}

/// Stops writing profiles to the file.
#[no_mangle]
pub extern "C" fn laik_close_profiling_file(inst: *mut LaikInstance) {
    run("laik_close_profiling_file", || {
        if let Some(p) = obj(inst, "laik_close_profiling_file", "instance")?
            .profile
            .as_mut()
        {
            p.file.clear();
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_reset_profiling(inst: *mut LaikInstance) {
    run("laik_reset_profiling", || {
        if let Some(p) = obj(inst, "laik_reset_profiling", "instance")?
            .profile
            .as_mut()
        {
            p.user = 0.0;
            p.started = None;
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_profile_user_start(inst: *mut LaikInstance) {
    run("laik_profile_user_start", || {
        if let Some(p) = obj(inst, "laik_profile_user_start", "instance")?
            .profile
            .as_mut()
        {
            p.started = Some(Instant::now());
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn laik_profile_user_stop(inst: *mut LaikInstance) {
    run("laik_profile_user_stop", || {
        if let Some(p) = obj(inst, "laik_profile_user_stop", "instance")?
            .profile
            .as_mut()
        {
            if let Some(s) = p.started.take() {
                p.user += s.elapsed().as_secs_f64();
            }
        }
        Ok(())
    })
}

/// Appends `text` to the profiling file, if profiling to a file is on (`laik_profile_printf`
/// in laik.h formats it).
#[no_mangle]
pub extern "C" fn laik_profile_write_text(text: *const c_char) {
    run("laik_profile_printf", || {
        if text.is_null() {
            return Err(Error::invalid("laik_profile_printf", "NULL text"));
        }
        // SAFETY: a NUL-terminated string from laik.h's formatting buffer.
        let t = unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: see current_rank.
        let p = unsafe { INSTANCE };
        // SAFETY: a non-null INSTANCE points to the leaked instance, used from one thread.
        let Some(i) = (unsafe { p.as_mut() }) else {
            return Ok(());
        };
        let Some(prof) = i.profile.as_ref().filter(|p| !p.file.is_empty()) else {
            return Ok(());
        };
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&prof.file)
            .map_err(|e| Error::io("laik_profile_printf", e))?;
        f.write_all(t.as_bytes())
            .map_err(|e| Error::io("laik_profile_printf", e))
    })
}

/// Appends `iteration rank user-seconds` to the profiling file, if profiling is on.
#[no_mangle]
pub extern "C" fn laik_writeout_profile() {
    run("laik_writeout_profile", || {
        // SAFETY: see current_rank.
        let p = unsafe { INSTANCE };
        // SAFETY: a non-null INSTANCE points to the leaked instance, used from one thread.
        let Some(i) = (unsafe { p.as_mut() }) else {
            return Ok(());
        };
        let Some(prof) = i.profile.as_ref().filter(|p| !p.file.is_empty()) else {
            return Ok(());
        };
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&prof.file)
            .map_err(|e| Error::io("laik_writeout_profile", e))?;
        writeln!(f, "{} {} {:.6}", i.iteration, i.rank, prof.user)
            .map_err(|e| Error::io("laik_writeout_profile", e))?;
        Ok(())
    })
}
