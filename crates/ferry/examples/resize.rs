//! resize: minimal elasticity demo (examples.md §4, LAIK's resize example).
//!
//! Usage: `resize [max]` (max default 10; atoi semantics, 0 or text -> default). Every member
//! of the world prints `Epoch E / Phase P: Hello from process R of N`; the loop stops after
//! phase `max`; between phases the program sleeps one second and offers a resize point.
//!
//! Resize points go through [`ferry::data::resize::allow_world_resize`]: spares of
//! `ferry run --spares` join there and processes named by `ferry ctl NAME remove` leave (they
//! stop printing and exit 0); each change increments the epoch (examples.md §0.3, §4).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use ferry::data::resize::{allow_world_resize, join_world};

/// atoi: leading whitespace, optional sign, digits; anything else ends the number (0 if none).
fn atoi(s: &str) -> i64 {
    let s = s.trim_start();
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut v: i64 = 0;
    for b in digits.bytes().take_while(u8::is_ascii_digit) {
        v = v.saturating_mul(10).saturating_add(i64::from(b - b'0'));
    }
    if neg {
        -v
    } else {
        v
    }
}

fn run(args: &[String]) -> ferry::Result<()> {
    let mut max = args.get(1).map(|a| atoi(a)).unwrap_or(0);
    if max <= 0 {
        max = 10;
    }
    let mut world = ferry::init()?;
    let t = world.transport();
    // Processes started with the job begin at phase 0; spares wait here and join at the
    // phase of the resize point that admits them (or end if none does).
    let (mut current, mut phase) = join_world(t)?;
    while let Some(id) = current.my_index {
        let line = format!(
            "Epoch {} / Phase {}: Hello from process {} of {}\n",
            current.epoch,
            phase,
            id,
            current.group.size()
        );
        let mut so = std::io::stdout().lock();
        so.write_all(line.as_bytes())
            .and_then(|_| so.flush())
            .map_err(|e| ferry::Error::io("write stdout", e))?;
        drop(so);
        if phase >= max {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
        phase += 1;
        current = allow_world_resize(t, &current.group, current.epoch, phase)?;
    }
    world.finish()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("resize: {e}");
            ExitCode::FAILURE
        }
    }
}
