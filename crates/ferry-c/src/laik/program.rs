//! The set-up calls of LAIK's program-control and profiling records (`program.h`,
//! `profiling.h`): `laik_program_control_init`, `laik_init_profiling` and
//! `laik_free_profiling`. LAIK's own initialisation makes these records for its instance;
//! ferry's instance holds the same state itself (phase, iteration, arguments; profiling), so
//! the records a program makes with these calls are its own, and `laik_free_profiling` ends
//! the profiling of the instance.

use std::ffi::{c_char, c_int, c_void};
use std::ptr::null_mut;

use super::core::LaikInstance;
use super::{obj, run};

/// LAIK's program-control record (`Laik_Program_Control`, opaque in LAIK's public header):
/// phase, phase name and data, iteration and command line, all empty when made. Nothing in
/// LAIK's public interface reads such a record (the instance keeps its own state), so its
/// fields are only its content.
#[allow(dead_code)]
pub struct LaikProgramControl {
    /// Phase number.
    pub phase: c_int,
    /// Phase name as the program gave it.
    pub phase_name: *const c_char,
    /// Phase data as the program gave it.
    pub phase_data: *mut c_void,
    /// Iteration number.
    pub iteration: c_int,
    /// Command line for a relaunch.
    pub argc: c_int,
    /// Command line for a relaunch.
    pub argv: *mut *mut c_char,
}

/// A new, empty program-control record (phase 0, no name or data, iteration 0, no command
/// line).
#[no_mangle]
pub extern "C" fn laik_program_control_init() -> *mut LaikProgramControl {
    Box::into_raw(Box::new(LaikProgramControl {
        phase: 0,
        phase_name: std::ptr::null(),
        phase_data: null_mut(),
        iteration: 0,
        argc: 0,
        argv: null_mut(),
    }))
}

/// LAIK's profiling controller (`Laik_Profiling_Controller`, opaque in LAIK's public header):
/// whether profiling is on, the measured user time and the output file, all off when made.
/// As with the program-control record, no public call reads it.
#[allow(dead_code)]
pub struct LaikProfilingController {
    /// Whether measuring is on.
    pub enabled: bool,
    /// User time between the start/stop calls.
    pub user: f64,
    /// Output file of the output-to-file mode, if any.
    pub file: Option<String>,
}

/// A new profiling controller with profiling off and no times measured.
#[no_mangle]
pub extern "C" fn laik_init_profiling() -> *mut LaikProfilingController {
    Box::into_raw(Box::new(LaikProfilingController {
        enabled: false,
        user: 0.0,
        file: None,
    }))
}

/// Ends profiling of instance `inst`, as LAIK's `laik_finalize` does: measuring stops, the
/// output file is given up and the measured user time is dropped (`laik_get_user_time` is 0,
/// `laik_writeout_profile` writes nothing) until profiling is enabled again.
#[no_mangle]
pub extern "C" fn laik_free_profiling(inst: *mut LaikInstance) {
    run("laik_free_profiling", || {
        obj(inst, "laik_free_profiling", "instance")?.profile = None;
        Ok(())
    })
}
