//! Monitoring a job whose containers live in node-shared memory (S3): the decorator hands the
//! backend's shared memory on (monitoring does not turn sharing off), and the values copied
//! straight from a peer's memory count as the data messages they replace, so that the
//! recorded traffic between ranks is the same as on the message path.

use std::path::{Path, PathBuf};

use ferry_core::mem::MemTransport;
use ferry_core::{MsgKind, Transport};
use ferry_data::{Container, DataFlow, Instance, Partitioner, Partitioning, Space};
use ferry_monitor::format::{self, Dir};
use ferry_monitor::{Mode, Monitored};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "ferry-monitor-shared-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Three ranks, monitored: a block partitioning, its halo (in place), rows to columns (two
/// buffers). Returns per rank whether the container was shared and its final values.
fn run(dir: &Path, shared: bool) -> Vec<(bool, Vec<f64>)> {
    MemTransport::run(3, |t| {
        let mut m = Monitored::new(Box::new(t), &Mode::Record(dir.to_path_buf())).expect("monitor");
        let mut inst = Instance::for_transport(&m).unwrap();
        if shared {
            inst.set_shared_memory(m.shared_memory());
            inst.set_share_min_bytes(0);
        }
        let s = Space::new2(40, 30).unwrap();
        let w = inst.world().clone();
        let rows = Partitioning::new(&s, &w, &Partitioner::Grid { blocks: [1, 3, 1] }).unwrap();
        let halo = Partitioning::derived(&s, &Partitioner::Halo { depth: 1 }, &rows).unwrap();
        let cols = Partitioning::new(&s, &w, &Partitioner::Grid { blocks: [3, 1, 1] }).unwrap();
        let mut c = Container::<f64>::new(&mut inst, "c", &s);
        c.switch_to(&mut m, &rows, DataFlow::None, None).unwrap();
        for r in c.my_ranges().to_vec() {
            for y in r.from()[1]..r.to()[1] {
                for x in r.from()[0]..r.to()[0] {
                    c.set(&[x, y, 0], (100 * y + x) as f64).unwrap();
                }
            }
        }
        c.switch_to(&mut m, &halo, DataFlow::Preserve, None)
            .unwrap();
        c.switch_to(&mut m, &cols, DataFlow::Preserve, None)
            .unwrap();
        let out = (c.in_shared_memory(), c.local_data().to_vec());
        inst.finalize(&mut m).unwrap();
        m.finish().expect("finish");
        out
    })
}

/// Bytes of data messages (kind DATA) per (sender, receiver), from the send records and,
/// separately, from the receive records.
fn data_matrices(dir: &Path) -> (Vec<Vec<u64>>, Vec<Vec<u64>>) {
    let records = format::read_dir(dir).expect("records");
    let n = records.len();
    let (mut sent, mut recvd) = (vec![vec![0u64; n]; n], vec![vec![0u64; n]; n]);
    for (r, rec) in records.iter().enumerate() {
        assert!(rec.complete, "rank {r}");
        for ev in rec.events.iter().filter(|e| e.key.kind == MsgKind::DATA) {
            let p = ev.peer as usize;
            match ev.dir {
                Dir::Send => sent[r][p] += ev.len,
                Dir::Recv => recvd[p][r] += ev.len,
            }
        }
    }
    (sent, recvd)
}

#[test]
fn shared_containers_stay_shared_and_their_copies_count_as_traffic() {
    let (copy_dir, shared_dir) = (scratch("copy"), scratch("shared"));
    let copy = run(&copy_dir, false);
    let shared = run(&shared_dir, true);
    for (r, ((c_shared, c_vals), (s_shared, s_vals))) in copy.iter().zip(&shared).enumerate() {
        assert!(!c_shared, "rank {r}");
        assert!(s_shared, "rank {r}: monitoring must not turn sharing off");
        assert_eq!(c_vals, s_vals, "rank {r}");
    }
    let (copy_sent, copy_recvd) = data_matrices(&copy_dir);
    let (shared_sent, shared_recvd) = data_matrices(&shared_dir);
    assert!(
        copy_sent.iter().flatten().any(|&b| b > 0),
        "the switches move data"
    );
    assert_eq!(copy_sent, copy_recvd);
    assert_eq!(
        shared_sent, copy_sent,
        "owner side: shared copies counted as sends"
    );
    assert_eq!(shared_recvd, copy_recvd, "reader side: counted as receives");
    // The protocol's own control messages are recorded too (their own kind).
    let records = format::read_dir(&shared_dir).expect("records");
    assert!(records
        .iter()
        .flat_map(|r| &r.events)
        .any(|e| e.key.kind != MsgKind::DATA && e.key.kind != MsgKind::COLLECTIVE));
    for d in [copy_dir, shared_dir] {
        let _ = std::fs::remove_dir_all(d);
    }
}
