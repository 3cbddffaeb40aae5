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
