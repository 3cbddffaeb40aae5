//! resize: minimal elasticity demo (examples.md §4, LAIK's resize example).
//!
//! Usage: `resize [max]` (max default 10; atoi semantics, 0 or text -> default). Every member
//! of the world prints `Epoch E / Phase P: Hello from process R of N`; the loop stops after
//! phase `max`; between phases the program sleeps one second and offers a resize point.
//!
//! Resize points go through [`ferry::resize::Resizer::allow_world_resize`]: spares of
//! `ferry run --spares` join there and processes named by `ferry ctl NAME remove` leave (they
//! stop printing and exit 0); each change increments the epoch (examples.md §0.3, §4).

use std::process::ExitCode;
use std::time::Duration;

mod common;
use common::{atoi, out};

fn run(args: &[String]) -> ferry::Result<()> {
    let mut max = args.get(1).map(|a| atoi(a)).unwrap_or(0);
    if max <= 0 {
        max = 10;
    }
    let mut world = ferry::init()?;
    let mut resizer = world.resizer();
    let t = world.transport();
    // Processes started with the job begin at phase 0; spares wait here and join at the
    // phase of the resize point that admits them (or end if none does).
    let (mut current, mut phase) = resizer.join_world(t)?;
    while let Some(id) = current.my_index {
        let line = format!(
            "Epoch {} / Phase {}: Hello from process {} of {}\n",
            current.epoch,
            phase,
            id,
            current.group.size()
        );
        out(&line)?;
        if phase >= max {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
        phase += 1;
        current = resizer.allow_world_resize(t, &current.group, current.epoch, phase)?;
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
