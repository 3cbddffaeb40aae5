//! `ferry_ft::data` on the in-memory backend (threads as ranks, no failure): what survivors
//! do after a shrink, with the survivors' states set up by hand. A failure itself is shown by
//! the multi-process suite (`crates/ferry/tests/ft_data.rs`).

use ferry_core::mem::MemTransport;
use ferry_core::Transport;
use ferry_data::{Block, Container, DataFlow, Instance, Partitioner, Partitioning, Space};
use ferry_ft::data::{self, salvage, Checkpoints};
use ferry_ft::{Communicator, FailureMode, MessageMode, Options};

fn value(i: i64) -> i64 {
    7 * i + 3
}

fn shrink_comm(t: MemTransport) -> ferry_core::Result<Communicator> {
    Communicator::new(
        Box::new(t),
        Options::new(FailureMode::Shrink, MessageMode::Cont),
    )
}

/// Wrong values among this rank's indexes (those in `skip` are not checked).
fn wrong(c: &Container<i64>, skip: &[ferry_data::Range]) -> usize {
    let mut n = 0;
    for r in c.my_ranges() {
        for i in r.from()[0]..r.to()[0] {
            let idx = [i, 0, 0];
            if !skip.iter().any(|s| s.contains(&idx)) && c.get(&idx).unwrap() != value(i) {
                n += 1;
            }
        }
    }
    n
}

fn fill(c: &mut Container<i64>) {
    for r in c.my_ranges().to_vec() {
        for i in r.from()[0]..r.to()[0] {
            c.set(&[i, 0, 0], value(i)).unwrap();
        }
    }
}

#[test]
fn salvage_moves_what_each_survivor_holds_even_in_different_partitionings() {
    let results = MemTransport::run(4, |t| {
        let me = t.rank();
        let comm = shrink_comm(t)?;
        let mut inst = Instance::new(me, 4)?;
        let space = Space::new1(400)?;
        let one = data::partitioning(&comm, &space, &Partitioner::block())?;
        let two = data::partitioning(
            &comm,
            &space,
            &Partitioner::Block(Block {
                cycles: 2,
                ..Block::default()
            }),
        )?;
        let mut c = Container::<i64>::new(&mut inst, "c", &space);
        data::switch(&comm, &mut c, &one, DataFlow::None, None)?;
        fill(&mut c);
        // As after a switch interrupted by a failure: rank 3 completed the switch to `two`,
        // the others did not.
        if me == 3 {
            let kept = Partitioning::from_ranges(
                &space,
                comm.group(),
                "two, rank 3 only",
                two.ranges()
                    .iter()
                    .filter(|t| t.task == 3)
                    .copied()
                    .collect(),
            )?;
            c.assume(&kept, None)?;
            fill(&mut c);
        }
        let to = data::partitioning(&comm, &space, &Partitioner::block())?;
        let s = salvage(&comm, &mut c, &to)?;
        let bad = wrong(&c, &s.lost);
        comm.finish()?;
        Ok::<_, ferry_core::Error>((s, bad))
    });
    let first = results[0].as_ref().unwrap().0.clone();
    for r in &results {
        let (s, bad) = r.as_ref().unwrap();
        assert_eq!(*bad, 0, "kept values are right");
        assert_eq!(*s, first, "every survivor reports the same");
    }
    // Rank 3 held [150, 200) and [350, 400) of `two`; [300, 350) of `one` was only its own.
    let lost: Vec<(i64, i64)> = first
        .lost
        .iter()
        .map(|r| (r.from()[0], r.to()[0]))
        .collect();
    assert_eq!(lost, vec![(300, 350)]);
    assert!(first.failed.is_empty());
}

#[test]
fn checkpoints_restore_the_committed_values_into_another_partitioning() {
    let results = MemTransport::run(3, |t| {
        let me = t.rank();
        let comm = shrink_comm(t)?;
        let mut inst = Instance::new(me, 3)?;
        let space = Space::new1(300)?;
        let bisect = data::partitioning(&comm, &space, &Partitioner::Bisection)?;
        let mut c = Container::<i64>::new(&mut inst, "c", &space);
        data::switch(&comm, &mut c, &bisect, DataFlow::None, None)?;
        fill(&mut c);
        let mut saved = Checkpoints::<i64>::new("c");
        saved.checkpoint(&comm, 5, &c)?;
        assert!(saved.held_bytes() > 0);
        // Later values are rolled back.
        c.fill(-1);
        let master = data::partitioning(&comm, &space, &Partitioner::Master)?;
        let epoch = saved.restore(&comm, &mut c, &master)?;
        let bad = wrong(&c, &[]);
        let count = c.local_count();
        comm.finish()?;
        Ok::<_, ferry_core::Error>((epoch, bad, count))
    });
    for (r, res) in results.iter().enumerate() {
        let (epoch, bad, count) = res.as_ref().unwrap();
        assert_eq!(*epoch, Some(5));
        assert_eq!(*bad, 0);
        assert_eq!(*count, if r == 0 { 300 } else { 0 });
    }
}

#[test]
fn checkpoints_refuse_a_communicator_that_cannot_shrink() {
    let results = MemTransport::run(2, |t| {
        let me = t.rank();
        let comm = Communicator::new(
            Box::new(t),
            Options::new(FailureMode::Blank, MessageMode::Cont),
        )?;
        let mut inst = Instance::new(me, 2)?;
        let space = Space::new1(10)?;
        let p = data::partitioning(&comm, &space, &Partitioner::block())?;
        let mut c = Container::<i64>::new(&mut inst, "c", &space);
        data::switch(&comm, &mut c, &p, DataFlow::None, None)?;
        let e = Checkpoints::<i64>::new("c")
            .checkpoint(&comm, 0, &c)
            .unwrap_err();
        comm.finish()?;
        Ok::<_, ferry_core::Error>(e.to_string())
    });
    for r in results {
        assert!(r
            .unwrap()
            .contains("needs a SHRINK or REBUILD communicator"));
    }
}
