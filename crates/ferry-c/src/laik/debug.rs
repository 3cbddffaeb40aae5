//! LAIK's debug printers (`debug.h`): each appends a description of a value to the log
//! message being built with `laik_log_begin` / `laik_log_append` (nothing if no message is
//! being built, as when its level is not shown).

use std::ffi::{c_char, c_int, CStr, CString};

use super::data::LaikType;
use super::part::{LaikIndex, LaikPartitioning, LaikRange, LaikSpace};
use super::plan::{LaikActionSeq, LaikTransition};
use super::ranges::LaikRangeList;

fn append(text: String) {
    if let Ok(c) = CString::new(text) {
        super::core::laik_log_append_text(c.as_ptr());
    }
}

fn index_text(dims: usize, idx: &LaikIndex) -> String {
    idx.i[..dims.clamp(1, 3)]
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join("/")
}

fn space_dims(s: *mut LaikSpace) -> usize {
    // SAFETY: spaces live until the process ends; NULL gives 1.
    unsafe { s.as_ref() }.map_or(1, |s| s.dims.max(1) as usize)
}

fn range_text(r: &LaikRange) -> String {
    let d = space_dims(r.space);
    format!("[{};{}[", index_text(d, &r.from), index_text(d, &r.to))
}

/// `[a, b, c]`.
#[no_mangle]
pub extern "C" fn laik_log_IntList(len: c_int, list: *const c_int) {
    let n = usize::try_from(len).unwrap_or(0);
    let items: &[c_int] = if list.is_null() || n == 0 {
        &[]
    } else {
        // SAFETY: LAIK's contract: `list` has `len` entries.
        unsafe { std::slice::from_raw_parts(list, n) }
    };
    let body = items
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    append(format!("[{body}]"));
}

/// A count with a K/M/G suffix above 10 000 (e.g. `12 K`).
#[no_mangle]
pub extern "C" fn laik_log_PrettyInt(v: u64) {
    let text = match v {
        0..=9_999 => v.to_string(),
        10_000..=9_999_999 => format!("{} K", v / 1_000),
        10_000_000..=9_999_999_999 => format!("{} M", v / 1_000_000),
        _ => format!("{} G", v / 1_000_000_000),
    };
    append(text);
}

/// `name[from;to[`.
#[no_mangle]
pub extern "C" fn laik_log_Space(s: *mut LaikSpace) {
    // SAFETY: spaces live until the process ends.
    let Some(sp) = (unsafe { s.as_ref() }) else {
        append("(no space)".into());
        return;
    };
    append(format!("{}{}", sp.name, range_text(&sp.range)));
}

/// `i1/i2/i3` (the first `dims` coordinates).
#[no_mangle]
pub extern "C" fn laik_log_Index(dims: c_int, idx: *const LaikIndex) {
    // SAFETY: an index of the program, or NULL.
    let Some(i) = (unsafe { idx.as_ref() }) else {
        append("(no index)".into());
        return;
    };
    append(index_text(usize::try_from(dims).unwrap_or(1), i));
}

/// `[from;to[`.
#[no_mangle]
pub extern "C" fn laik_log_Range(r: *const LaikRange) {
    // SAFETY: a range of the program, or NULL.
    match unsafe { r.as_ref() } {
        Some(r) => append(range_text(r)),
        None => append("(no range)".into()),
    }
}

fn reduction_name(op: c_int) -> String {
    match op {
        0 => "none".to_string(),
        1 => "sum".into(),
        2 => "prod".into(),
        3 => "min".into(),
        4 => "max".into(),
        5 => "bitwise and".into(),
        6 => "bitwise or".into(),
        7 => "any".into(),
        8 => "single".into(),
        100 => "custom".into(),
        o => format!("unknown reduction {o}"),
    }
}

fn flow_name(flow: c_int) -> String {
    match flow {
        0 => "none".to_string(),
        1 => "preserve".into(),
        2 => "init".into(),
        f => format!("unknown data flow {f}"),
    }
}

/// The operation's name (`sum`, `prod`, ...).
#[no_mangle]
pub extern "C" fn laik_log_Reduction(op: c_int) {
    append(reduction_name(op));
}

/// The flow's name (`none`, `preserve`, `init`).
#[no_mangle]
pub extern "C" fn laik_log_DataFlow(flow: c_int) {
    append(flow_name(flow));
}

/// `name: T0 [from;to[, T1 [from;to[ ...`.
#[no_mangle]
pub extern "C" fn laik_log_Partitioning(p: *mut LaikPartitioning) {
    // SAFETY: a partitioning handle of this library, or NULL.
    let Some(pt) = (unsafe { p.as_ref() }) else {
        append("(no partitioning)".into());
        return;
    };
    let ranges = pt
        .ranges
        .iter()
        .map(|t| format!("T{} {}", t.task(), range_text(t.range())))
        .collect::<Vec<_>>()
        .join(", ");
    append(format!("{}: {ranges}", pt.name));
}

/// `T0 [from;to[, T1 [from;to[ ...` (the ranges of a frozen list).
#[no_mangle]
pub extern "C" fn laik_log_RangeList(list: *mut LaikRangeList) {
    // SAFETY: a range list of this library, or NULL.
    let Some(l) = (unsafe { list.as_ref() }) else {
        append("(no range list)".into());
        return;
    };
    let ranges = l
        .task_ranges()
        .iter()
        .map(|t| format!("T{} {}", t.task(), range_text(t.range())))
        .collect::<Vec<_>>()
        .join(", ");
    append(format!("{} ranges: {ranges}", l.task_ranges().len()));
}

/// `transition to 'NAME' (flow preserve, reduction sum)`: ferry's transition holds its target
/// partitioning, flow and operation; the steps are planned by the data layer.
#[no_mangle]
pub extern "C" fn laik_log_Transition(t: *mut LaikTransition, _show_actions: bool) {
    // SAFETY: a transition of this library, or NULL.
    let Some(tr) = (unsafe { t.as_ref() }) else {
        append("(no transition)".into());
        return;
    };
    let (to, flow, red) = tr.parts();
    append(format!(
        "transition to '{to}' (flow {}, reduction {})",
        flow_name(flow),
        reduction_name(red)
    ));
}

/// `actions for TRANSITION on 'DATA'`: ferry's action sequences are opaque (the container's
/// bound plan runs them), so there are no single actions to list.
#[no_mangle]
pub extern "C" fn laik_log_ActionSeq(a: *mut LaikActionSeq, _show_details: bool) {
    // SAFETY: an action sequence of this library, or NULL.
    let Some(seq) = (unsafe { a.as_ref() }) else {
        append("(no action sequence)".into());
        return;
    };
    let (t, data) = seq.parts();
    if t.is_null() {
        append("empty action sequence".into());
        return;
    }
    append("actions for ".into());
    laik_log_Transition(t, false);
    append(format!(" on '{data}'"));
}

/// At level 1: `TITLE:` and the sequence if `changed`, `TITLE: nothing changed` otherwise.
#[no_mangle]
pub extern "C" fn laik_log_ActionSeqIfChanged(
    changed: bool,
    a: *mut LaikActionSeq,
    title: *const c_char,
) {
    if !super::core::laik_log_begin(1) {
        return;
    }
    if !title.is_null() {
        // SAFETY: a NUL-terminated title from the program.
        append(
            unsafe { CStr::from_ptr(title) }
                .to_string_lossy()
                .into_owned(),
        );
    }
    if changed {
        append(":\n".into());
        laik_log_ActionSeq(a, true);
        append("\n".into());
    } else {
        append(": nothing changed\n".into());
    }
    super::core::laik_log_flush_text();
}

/// `checksum SUM` of `count` doubles at `buf`, as LAIK prints it; LAIK computes it for
/// `laik_Double` only, and another type is its fatal error.
#[no_mangle]
pub extern "C" fn laik_log_Checksum(buf: *const c_char, count: c_int, ty: *mut LaikType) {
    super::run("laik_log_Checksum", || {
        // SAFETY: the predefined type handles are set at laik_init and never change.
        if ty != unsafe { super::data::laik_Double } {
            return Err(ferry_core::Error::invalid(
                "laik_log_Checksum",
                "a checksum of elements of a type other than laik_Double",
            ));
        }
        let n = usize::try_from(count).unwrap_or(0);
        let sum: f64 = if buf.is_null() || n == 0 {
            0.0
        } else {
            // SAFETY: LAIK's contract: `buf` holds `count` doubles.
            unsafe { std::slice::from_raw_parts(buf.cast::<f64>(), n) }
                .iter()
                .sum()
        };
        append(format!("checksum {sum:.6}"));
        Ok(())
    })
}

/// Names of LAIK's action types (`Laik_ActionType` of `action.h`), in the enum's order from
/// `LAIK_AT_Invalid` (0); `LAIK_AT_Backend` (50) and above are a backend's own.
const ACTION_NAMES: [&CStr; 34] = [
    c"Invalid",
    c"Nop",
    c"Transition",
    c"BufReserve",
    c"MapSend",
    c"BufSend",
    c"RBufSend",
    c"MapRecv",
    c"BufRecv",
    c"RBufRecv",
    c"RBufLocalReduce",
    c"BufInit",
    c"CopyFromBuf",
    c"CopyToBuf",
    c"CopyFromRBuf",
    c"CopyToRBuf",
    c"MapPackAndSend",
    c"PackAndSend",
    c"MapPackToRBuf",
    c"PackToRBuf",
    c"PackToBuf",
    c"MapRecvAndUnpack",
    c"RecvAndUnpack",
    c"MapUnpackFromRBuf",
    c"UnpackFromRBuf",
    c"UnpackFromBuf",
    c"Reduce",
    c"RBufReduce",
    c"MapGroupReduce",
    c"GroupReduce",
    c"RBufGroupReduce",
    c"Copy",
    c"BufCopy",
    c"RBufCopy",
];

/// The name of action type `t` (static storage); `Backend` for a backend's own types (50 and
/// above) and `???` for values LAIK does not define.
#[no_mangle]
pub extern "C" fn laik_at_str(t: c_int) -> *const c_char {
    const BACKEND: c_int = 50;
    let name = match usize::try_from(t).ok().and_then(|k| ACTION_NAMES.get(k)) {
        Some(n) => n,
        None if t >= BACKEND => c"Backend",
        None => c"???",
    };
    name.as_ptr()
}

/// LAIK's action header (`Laik_Action` of `action.h`): the type and the length in bytes.
#[repr(C)]
pub struct LaikAction {
    ty: c_char,
    len: c_char,
}

/// `TYPE (N bytes)` for one action: the header is what every action carries; the fields after
/// it depend on the type and the backend that recorded it, and ferry's sequences record none
/// (they are run by the container's bound plan), so only the header is described.
#[no_mangle]
pub extern "C" fn laik_log_Action(a: *mut LaikAction, _as: *mut LaikActionSeq) {
    // SAFETY: an action header from the program, or NULL.
    let Some(act) = (unsafe { a.as_ref() }) else {
        append("(no action)".into());
        return;
    };
    // The header stores the type as C's char; the enum's values fit in 0..=127.
    let ty = act.ty as u8 as c_int;
    // SAFETY: laik_at_str returns one of the static names above.
    let name = unsafe { CStr::from_ptr(laik_at_str(ty)) }.to_string_lossy();
    append(format!("{name} ({} bytes)", act.len as u8));
}

/// LAIK's switch statistics (`Laik_SwitchStat`, fields as in LAIK's `data-internal.h`; the
/// struct is spelled out in `laik-internal.h`).
#[repr(C)]
#[derive(Default)]
pub struct LaikSwitchStat {
    switches: c_int,
    switches_noactions: c_int,
    malloc_count: c_int,
    free_count: c_int,
    malloced_bytes: u64,
    freed_bytes: u64,
    inited_bytes: u64,
    copied_bytes: u64,
    curr_alloced_bytes: u64,
    max_alloced_bytes: u64,
    transition_count: c_int,
    msg_send_count: u32,
    msg_recv_count: u32,
    msg_reduce_count: u32,
    msg_async_send_count: u32,
    msg_async_recv_count: u32,
    elem_send_count: u64,
    elem_recv_count: u64,
    elem_reduce_count: u64,
    byte_send_count: u64,
    byte_recv_count: u64,
    byte_reduce_count: u64,
    init_op_count: u64,
    reduce_op_count: u64,
    byte_buf_copy_count: u64,
}

/// A new statistic with every count 0 (freed with C's `free`, as LAIK's).
#[no_mangle]
pub extern "C" fn laik_newSwitchStat() -> *mut LaikSwitchStat {
    super::run("laik_newSwitchStat", || {
        extern "C" {
            fn calloc(n: usize, size: usize) -> *mut std::ffi::c_void;
        }
        // SAFETY: calloc of one zeroed struct; all-zero bytes are a valid LaikSwitchStat.
        let p: *mut LaikSwitchStat =
            unsafe { calloc(1, std::mem::size_of::<LaikSwitchStat>()) }.cast();
        if p.is_null() {
            return Err(ferry_core::Error::invalid(
                "laik_newSwitchStat",
                "out of memory for a switch statistic",
            ));
        }
        Ok(p)
    })
}

/// Adds the counts of `src` to `target`; the allocation peak is the larger of the two.
#[no_mangle]
pub extern "C" fn laik_addSwitchStat(target: *mut LaikSwitchStat, src: *mut LaikSwitchStat) {
    super::run("laik_addSwitchStat", || {
        let t = super::obj(target, "laik_addSwitchStat", "target statistic")?;
        let s = super::obj(src, "laik_addSwitchStat", "source statistic")?;
        t.switches += s.switches;
        t.switches_noactions += s.switches_noactions;
        t.malloc_count += s.malloc_count;
        t.free_count += s.free_count;
        t.malloced_bytes += s.malloced_bytes;
        t.freed_bytes += s.freed_bytes;
        t.inited_bytes += s.inited_bytes;
        t.copied_bytes += s.copied_bytes;
        t.curr_alloced_bytes += s.curr_alloced_bytes;
        t.max_alloced_bytes = t.max_alloced_bytes.max(s.max_alloced_bytes);
        t.transition_count += s.transition_count;
        t.msg_send_count += s.msg_send_count;
        t.msg_recv_count += s.msg_recv_count;
        t.msg_reduce_count += s.msg_reduce_count;
        t.msg_async_send_count += s.msg_async_send_count;
        t.msg_async_recv_count += s.msg_async_recv_count;
        t.elem_send_count += s.elem_send_count;
        t.elem_recv_count += s.elem_recv_count;
        t.elem_reduce_count += s.elem_reduce_count;
        t.byte_send_count += s.byte_send_count;
        t.byte_recv_count += s.byte_recv_count;
        t.byte_reduce_count += s.byte_reduce_count;
        t.init_op_count += s.init_op_count;
        t.reduce_op_count += s.reduce_op_count;
        t.byte_buf_copy_count += s.byte_buf_copy_count;
        Ok(())
    })
}

/// `N switches (M without actions)`, then one line each for memory, messages and reductions
/// when the statistic counted any (as LAIK leaves out the groups that stayed 0).
#[no_mangle]
pub extern "C" fn laik_log_SwitchStat(ss: *mut LaikSwitchStat) {
    // SAFETY: a statistic from the program, or NULL.
    let Some(s) = (unsafe { ss.as_ref() }) else {
        append("(no switch statistic)".into());
        return;
    };
    let mut t = format!(
        "{} switches ({} without actions)",
        s.switches, s.switches_noactions
    );
    if s.malloc_count > 0 || s.free_count > 0 || s.copied_bytes > 0 {
        t.push_str(&format!(
            "\n    memory: {} allocations ({} B), {} frees ({} B), peak {} B, copied {} B, \
             initialised {} B",
            s.malloc_count,
            s.malloced_bytes,
            s.free_count,
            s.freed_bytes,
            s.max_alloced_bytes,
            s.copied_bytes,
            s.inited_bytes
        ));
    }
    if s.msg_send_count > 0 || s.msg_recv_count > 0 {
        t.push_str(&format!(
            "\n    messages: {} sent ({} async, {} elements, {} B), {} received ({} async, \
             {} elements, {} B)",
            s.msg_send_count,
            s.msg_async_send_count,
            s.elem_send_count,
            s.byte_send_count,
            s.msg_recv_count,
            s.msg_async_recv_count,
            s.elem_recv_count,
            s.byte_recv_count
        ));
    }
    if s.msg_reduce_count > 0 || s.reduce_op_count > 0 {
        t.push_str(&format!(
            "\n    reductions: {} ({} elements, {} B), {} reduce and {} init operations",
            s.msg_reduce_count,
            s.elem_reduce_count,
            s.byte_reduce_count,
            s.reduce_op_count,
            s.init_op_count
        ));
    }
    append(t);
}
