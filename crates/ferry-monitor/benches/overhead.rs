//! What the monitor itself costs, measured where the noise of a loaded machine cannot hide it:
//! over a transport that does nothing (every call completes at once without copying), so the
//! time of a monitored call minus that of a bare call is the monitor's own work.
//!
//! Two figures for docs/PERFORMANCE.md (`cargo bench -p ferry-monitor --bench overhead`; a
//! program, not a test: timings are measured here, never asserted):
//! - nanoseconds per message in record and in check mode (a long run of send/recv calls);
//! - the whole cost one rank pays for one program-sized run: creating the monitor (record: the
//!   file and the writer thread; check: reading and indexing the recording), the messages,
//!   and `finish` (record: the flush and the thread's end; check: the tail comparison), for the
//!   message counts of the benchmarked examples.
//!
//! Multiplied with a program's messages (and divided by its run time) they give the overhead to
//! expect; docs/PERFORMANCE.md sets it beside the end-to-end bench/monitor-overhead.sh.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ferry_core::stats::Stats;
use ferry_core::transport::RecvBuf;
use ferry_core::{Exchange, MsgKey, Result, Transport};
use ferry_monitor::format::{self, Dir, Event, Header};
use ferry_monitor::{CheckOptions, Mode, Monitored};

/// Rank 0 of 2; every call succeeds at once and a receive yields 8 bytes (written into the
/// buffer's existing capacity, so nothing is allocated after the first call).
struct Null;

impl Transport for Null {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        2
    }
    fn name(&self) -> &'static str {
        "null"
    }
    fn progress_exchange(&mut self, _ex: &mut Exchange<'_>) -> Result<bool> {
        Ok(true)
    }
    fn wait_for_input(&mut self, _timeout: Duration) -> Result<()> {
        Ok(())
    }
    fn send(&mut self, _peer: usize, _key: MsgKey, _data: &[u8]) -> Result<()> {
        Ok(())
    }
    fn recv(&mut self, _peer: usize, _key: MsgKey, buf: &mut Vec<u8>) -> Result<()> {
        buf.clear();
        buf.extend_from_slice(&[0u8; 8]);
        Ok(())
    }
    fn sendrecv(
        &mut self,
        _to: usize,
        _send_key: MsgKey,
        _data: &[u8],
        _from: usize,
        _recv_key: MsgKey,
        _buf: RecvBuf<'_>,
    ) -> Result<()> {
        Ok(())
    }
    fn stats(&self) -> Stats {
        Stats::default()
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Off,
    Record,
    Check,
}

const KINDS: [Kind; 3] = [Kind::Off, Kind::Record, Kind::Check];

/// The time of one run of `messages` messages (half sends, half receives, alternating over
/// four tags as a halo exchange would) in `kind`, from creating the monitor to its `finish`:
/// (whole run, the messages alone).
fn run(kind: Kind, messages: usize, dir: &Path) -> (Duration, Duration) {
    let reference = dir.join(format!("ref-{messages}"));
    // A fresh file as in a real run: truncating the last round's file would make ext4 flush
    // it at close (its replace-by-truncate heuristic), a cost no real run pays.
    let _ = std::fs::remove_dir_all(dir.join("rec"));
    let start = Instant::now();
    let mut t: Box<dyn Transport> = match kind {
        Kind::Off => Box::new(Null),
        Kind::Record => Box::new(
            Monitored::new(Box::new(Null), &Mode::Record(dir.join("rec"))).expect("record"),
        ),
        Kind::Check => Box::new(
            Monitored::new(
                Box::new(Null),
                &Mode::Check(reference, CheckOptions::default()),
            )
            .expect("check"),
        ),
    };
    // Keeps the compiler from seeing through the box to the empty transport.
    let t = black_box(&mut t);
    let data = [7u8; 8];
    let mut buf = Vec::with_capacity(8);
    let loop_start = Instant::now();
    for i in 0..messages / 2 {
        let key = MsgKey::user((i % 4) as u32);
        t.send(1, key, black_box(&data)).expect("send");
        t.recv(1, key, &mut buf).expect("recv");
    }
    let looped = loop_start.elapsed();
    t.finish().expect("finish");
    (start.elapsed(), looped)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `rounds` rounds of every mode (order rotated each round so that none always runs first):
/// per mode the per-round differences to the unmonitored run of the same round, by `measure`.
fn rounds(
    rounds: usize,
    messages: usize,
    dir: &Path,
    measure: impl Fn((Duration, Duration)) -> f64,
) -> [Vec<f64>; 3] {
    let mut diffs: [Vec<f64>; 3] = Default::default();
    for round in 0..rounds {
        let mut t = [0.0; 3];
        for i in 0..3 {
            let k = (round + i) % 3;
            t[k] = measure(run(KINDS[k], messages, dir));
        }
        for k in 0..3 {
            diffs[k].push(t[k] - t[0]);
        }
    }
    diffs
}

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-monitor-overhead-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Writes the recording the check mode compares with: exactly the messages `run` makes.
/// (Written directly rather than recorded: at tens of millions of messages per second the
/// writer thread would fall behind and drop records, and the check refuses such a recording.)
fn write_reference(dir: &Path, messages: usize) {
    let header = Header {
        rank: 0,
        size: 2,
        start_unix_ns: 0,
        backend: "null".into(),
    };
    let mut file = header.encode();
    for i in 0..messages {
        let ev = Event {
            dir: if i % 2 == 0 { Dir::Send } else { Dir::Recv },
            peer: 1,
            key: MsgKey::user((i / 2 % 4) as u32),
            len: 8,
            call: i as u32,
            call_ns: 0,
            t_ns: i as u64,
        };
        format::encode_event(&ev, &mut file);
    }
    format::encode_marker(format::OP_END, 0, messages as u64, &mut file);
    let path = format::rank_file(&dir.join(format!("ref-{messages}")), 0);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("reference dir");
    std::fs::write(path, file).expect("reference");
}

fn main() {
    // Short enough per round that the writer thread keeps up (the queue holds 16 chunks of
    // 1,024 records), many rounds for the median.
    const LONG: usize = 16_000;
    const LONG_ROUNDS: usize = 201;
    // Per-rank message counts of the benchmarked runs (`ferry monitor show`): jac2d 5000 and
    // jac3d 250 complete 334 messages on rank 0, markov2 200000 10 1000 about 2,007.
    const PROGRAMS: [usize; 2] = [334, 2_008];
    let dir = scratch();
    for m in [LONG].iter().chain(&PROGRAMS) {
        write_reference(&dir, *m);
    }

    let per_msg = rounds(LONG_ROUNDS, LONG, &dir, |(_, looped)| {
        looped.as_nanos() as f64 / LONG as f64
    });
    let off = {
        let mut v: Vec<f64> = (0..LONG_ROUNDS)
            .map(|_| run(Kind::Off, LONG, &dir).1.as_nanos() as f64 / LONG as f64)
            .collect();
        median(&mut v)
    };
    let mut rec = per_msg[1].clone();
    let mut chk = per_msg[2].clone();
    let (rec_ns, chk_ns) = (median(&mut rec), median(&mut chk));
    println!(
        "monitor cost per message (median of {LONG_ROUNDS} rounds of {LONG} messages, minus \
         the bare call's {off:.1} ns): record {rec_ns:.1} ns, check {chk_ns:.1} ns"
    );
    for m in PROGRAMS {
        let whole = rounds(41, m, &dir, |(whole, _)| whole.as_nanos() as f64 / 1e3);
        let mut rec = whole[1].clone();
        let mut chk = whole[2].clone();
        println!(
            "monitor cost of one rank's run of {m} messages (start, messages, finish; median of \
             41 rounds): record {:.0} us, check {:.0} us",
            median(&mut rec),
            median(&mut chk)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
