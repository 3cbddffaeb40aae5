//! resize: minimal elasticity demo (examples.md §4, LAIK's resize example).
//!
//! Usage: `resize [max]` (max default 10; atoi semantics, 0 or text -> default). Every member
//! of the world prints `Epoch E / Phase P: Hello from process R of N`; the loop stops after
//! phase `max`; between phases the program sleeps one second and offers a resize point.
//!
//! Resize points: ferry's worlds do not grow or shrink yet (joining spares and removal requests
//! are part of the fault-tolerance issue). A resize point therefore behaves as LAIK's single
//! and MPI backends do (examples.md §0.3): every process synchronises with the others (a
//! barrier, so that all agree the phase was reached), the world stays unchanged and the epoch
//! stays 0, while the phase advances because the application passes it.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use ferry::coll::Group;

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

/// The world after a resize point: this process's id in it (None = removed), its size, and
/// the epoch (number of changes so far).
struct ResizedWorld {
    id: Option<usize>,
    size: usize,
    epoch: u32,
}

/// A resize point at `phase`: the world stays as it is (see the module docs).
fn allow_world_resize(
    world: &mut ferry::World,
    group: &Group,
    epoch: u32,
    phase: i64,
) -> ferry::Result<ResizedWorld> {
    ferry::coll::barrier(world.transport(), group)
        .map_err(|e| e.context(format!("resize point of phase {phase}")))?;
    Ok(ResizedWorld {
        id: group.index_of(world.rank()),
        size: group.size(),
        epoch,
    })
}

fn run(args: &[String]) -> ferry::Result<()> {
    let mut max = args.get(1).map(|a| atoi(a)).unwrap_or(0);
    if max <= 0 {
        max = 10;
    }
    let mut world = ferry::init()?;
    let group = Group::world(world.size());
    let mut current = ResizedWorld {
        id: Some(world.rank()),
        size: world.size(),
        epoch: 0,
    };
    // Processes started with the job begin at phase 0 (joiners would start at the resize
    // point's phase).
    let mut phase: i64 = 0;
    while let Some(id) = current.id {
        let line = format!(
            "Epoch {} / Phase {}: Hello from process {} of {}\n",
            current.epoch, phase, id, current.size
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
        current = allow_world_resize(&mut world, &group, current.epoch, phase)?;
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
