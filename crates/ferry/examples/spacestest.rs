//! spacestest: named index spaces shared through the space store (examples.md §14, LAIK's
//! spacestest).
//!
//! The master defines "1d-space" [0,100) and "2d-space" [0,200)x[0,300); every process defines
//! "3d-space" [0,400)x[0,500)x[0,600); sync; every process prints the three spaces; then every
//! process moves "1d-space" to [-100,1000) and the master "2d-space" to
//! [-200,2000)x[-300,3000); sync; print again. No arguments.

use std::io::Write;
use std::process::ExitCode;

use ferry::coll::Group;
use ferry::data::space::{Range, Space};
use ferry::data::space_store::SpaceStore;

fn lookup(store: &SpaceStore, name: &str) -> ferry::Result<Space> {
    store.get(name)?.ok_or_else(|| {
        ferry::Error::invalid("spacestest", format!("space `{name}` missing after sync"))
    })
}

fn print(store: &SpaceStore, rank: usize) -> ferry::Result<()> {
    let s1 = lookup(store, "1d-space")?.range();
    let s2 = lookup(store, "2d-space")?.range();
    let s3 = lookup(store, "3d-space")?.range();
    let (f1, t1) = (s1.from(), s1.to());
    let (f2, t2) = (s2.from(), s2.to());
    let (f3, t3) = (s3.from(), s3.to());
    let text = format!(
        "T{rank}: 1d-space: {} - {}\nT{rank}: 2d-space: {} - {} / {} - {}\n\
         T{rank}: 3d-space: {} - {} / {} - {} / {} - {}\n",
        f1[0], t1[0], f2[0], t2[0], f2[1], t2[1], f3[0], t3[0], f3[1], t3[1], f3[2], t3[2]
    );
    let mut so = std::io::stdout().lock();
    so.write_all(text.as_bytes())
        .and_then(|_| so.flush())
        .map_err(|e| ferry::Error::io("write stdout", e))
}

fn run() -> ferry::Result<()> {
    let mut world = ferry::init()?;
    let rank = world.rank();
    let group = Group::world(world.size());
    let mut store = SpaceStore::new();

    if rank == 0 {
        store.set("1d-space", &Space::new1(100)?)?;
        store.set("2d-space", &Space::new2(200, 300)?)?;
    }
    store.set("3d-space", &Space::new3(400, 500, 600)?)?;
    store.sync(world.transport(), &group)?;
    print(&store, rank)?;

    store.set("1d-space", &Space::from_range(Range::new1(-100, 1000))?)?;
    if rank == 0 {
        store.set(
            "2d-space",
            &Space::from_range(Range::new2(-200, 2000, -300, 3000))?,
        )?;
    }
    store.sync(world.transport(), &group)?;
    print(&store, rank)?;
    // Nobody may still be pulling this rank's part of the last sync when it shuts down.
    ferry::coll::barrier(world.transport(), &group)?;
    world.finish()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("spacestest: {e}");
            ExitCode::FAILURE
        }
    }
}
