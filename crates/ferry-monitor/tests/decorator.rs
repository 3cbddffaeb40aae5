//! The decorator over threads-as-ranks (the in-memory backend): every path a message can take
//! (exchange, send, recv, sendrecv with a vector or a fixed buffer) is recorded with the
//! backend's own counts, and the check mode calls the program's callback and fails the rank
//! past the threshold.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ferry_core::mem::MemTransport;
use ferry_core::transport::RecvBuf;
use ferry_core::{Exchange, MsgKey, Transport};
use ferry_monitor::format::{self, Dir};
use ferry_monitor::{CheckOptions, DeviationKind, Mode, Monitored, Reaction};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferry-monitor-unit-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Two ranks: an exchange, a send/recv pair, a sendrecv into a vector and one into a fixed
/// buffer; with `extra`, rank 0 sends one more message of 77 bytes in the middle.
fn program(t: &mut dyn Transport, extra: bool) -> ferry_core::Result<()> {
    let (me, other) = (t.rank(), 1 - t.rank());
    let key = MsgKey::user(3);
    let out = vec![me as u8; 100 + me];
    let mut inbuf = Vec::new();
    let mut ex = Exchange::new();
    ex.send(other, key, &out);
    ex.recv(other, key, &mut inbuf);
    t.exchange(&mut ex)?;
    drop(ex);
    if me == 0 {
        t.send(other, MsgKey::user(4), &[1; 10])?;
        if extra {
            t.send(other, MsgKey::user(4), &[9; 77])?;
        }
    } else {
        t.recv(other, MsgKey::user(4), &mut inbuf)?;
        if extra {
            t.recv(other, MsgKey::user(4), &mut inbuf)?;
        }
    }
    let mut v = Vec::new();
    t.sendrecv(other, key, &[5; 20], other, key, RecvBuf::Vec(&mut v))?;
    let mut fixed = [0u8; 30];
    t.sendrecv(other, key, &[6; 30], other, key, RecvBuf::Slice(&mut fixed))?;
    Ok(())
}

#[test]
fn every_path_is_recorded_with_the_backends_counts() {
    let dir = scratch("paths");
    let stats = MemTransport::run(2, |t| {
        let mut m = Monitored::new(Box::new(t), &Mode::Record(dir.clone())).expect("monitor");
        program(&mut m, false).expect("program");
        let s = m.stats();
        m.finish().expect("finish");
        s
    });
    let records = format::read_dir(&dir).expect("records");
    for (rank, (rec, s)) in records.iter().zip(&stats).enumerate() {
        assert!(rec.complete);
        assert_eq!(rec.header.backend, "mem");
        let sent: Vec<_> = rec.events.iter().filter(|e| e.dir == Dir::Send).collect();
        let recvd: Vec<_> = rec.events.iter().filter(|e| e.dir == Dir::Recv).collect();
        assert_eq!(sent.len() as u64, s.total_sent().messages, "rank {rank}");
        assert_eq!(
            recvd.len() as u64,
            s.total_received().messages,
            "rank {rank}"
        );
        let bytes = |v: &[&format::Event]| v.iter().map(|e| e.len).sum::<u64>();
        assert_eq!(bytes(&sent), s.total_sent().bytes, "rank {rank}");
        assert_eq!(bytes(&recvd), s.total_received().bytes, "rank {rank}");
        // The exchange's receive has the peer's length; the fixed buffer its own.
        assert_eq!(recvd[0].len, 100 + (1 - rank) as u64);
        assert_eq!(rec.events.last().unwrap().len, 30);
        // The messages of one call carry that call's start and duration, the same for all of
        // them; calls follow each other in time.
        for pair in rec.events.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            if a.call == b.call {
                assert_eq!(
                    (a.t_ns, a.call_ns),
                    (b.t_ns, b.call_ns),
                    "rank {rank}: {a:?} {b:?}"
                );
            } else {
                assert!(
                    b.call > a.call && b.t_ns >= a.t_ns + u64::from(a.call_ns),
                    "{a:?} {b:?}"
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_check_calls_the_callback_and_abort_fails_past_the_threshold() {
    let dir = scratch("check");
    MemTransport::run(2, |t| {
        let mut m = Monitored::new(Box::new(t), &Mode::Record(dir.clone())).expect("monitor");
        program(&mut m, false).expect("program");
        m.finish().expect("finish");
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    ferry_monitor::on_deviation(move |d| sink.lock().unwrap().push((d.rank, d.kind)));
    let quiet = CheckOptions {
        react: Reaction::Quiet,
        ..CheckOptions::default()
    };
    let results = MemTransport::run(2, |t| {
        let mode = Mode::Check(dir.clone(), quiet.clone());
        let mut m = Monitored::new(Box::new(t), &mode).expect("monitor");
        program(&mut m, true).and_then(|()| m.finish())
    });
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    let mut got = seen.lock().unwrap().clone();
    got.sort_by_key(|g| g.0);
    assert_eq!(
        got,
        vec![(0, DeviationKind::Inserted), (1, DeviationKind::Inserted)]
    );
    ferry_monitor::clear_on_deviation();
    let abort = CheckOptions {
        react: Reaction::Abort,
        ..CheckOptions::default()
    };
    let results = MemTransport::run(2, |t| {
        let mode = Mode::Check(dir.clone(), abort.clone());
        let mut m = Monitored::new(Box::new(t), &mode).expect("monitor");
        let r = program(&mut m, true);
        let f = m.finish();
        r.and(f)
    });
    for (rank, r) in results.iter().enumerate() {
        let e = r.as_ref().expect_err("abort past allow=0");
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("rank {rank}: monitor check: protocol violation"))
                && text.contains("inserted at"),
            "{text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_recording_is_a_configuration_error_naming_the_file() {
    let dir = scratch("missing");
    let r = MemTransport::run(1, |t| {
        Monitored::new(
            Box::new(t),
            &Mode::Check(dir.clone(), CheckOptions::default()),
        )
        .err()
        .map(|e| e.to_string())
    });
    let e = r[0].clone().expect("error");
    assert!(
        e.contains("rank-0.fmon") && e.contains("configuration error"),
        "{e}"
    );
}

/// Counts the calls a decorator must pass on although they carry no message.
struct Spy {
    inner: MemTransport,
    seen: Arc<Mutex<Vec<&'static str>>>,
}

impl Transport for Spy {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn progress_exchange(&mut self, ex: &mut Exchange<'_>) -> ferry_core::Result<bool> {
        self.inner.progress_exchange(ex)
    }
    fn wait_for_input(&mut self, timeout: std::time::Duration) -> ferry_core::Result<()> {
        self.inner.wait_for_input(timeout)
    }
    fn stats(&self) -> ferry_core::stats::Stats {
        self.inner.stats()
    }
    fn abandon_exchange(&mut self, ex: &mut Exchange<'_>, why: &ferry_core::Error) {
        self.seen.lock().unwrap().push("abandon_exchange");
        self.inner.abandon_exchange(ex, why)
    }
    fn tolerate_failures(&mut self) {
        self.seen.lock().unwrap().push("tolerate_failures");
        self.inner.tolerate_failures()
    }
}

#[test]
fn calls_without_a_message_reach_the_backend() {
    let dir = scratch("forward");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let spy_seen = seen.clone();
    MemTransport::run(1, move |t| {
        let spy = Spy {
            inner: t,
            seen: spy_seen.clone(),
        };
        let mut m = Monitored::new(Box::new(spy), &Mode::Record(dir.clone())).expect("monitor");
        m.tolerate_failures();
        let mut buf = Vec::new();
        let mut ex = Exchange::new();
        ex.recv(0, MsgKey::user(9), &mut buf);
        let why = ferry_core::Error::config("test");
        m.abandon_exchange(&mut ex, &why);
        drop(ex);
        m.finish().expect("finish");
        let _ = std::fs::remove_dir_all(&dir);
    });
    assert_eq!(
        *seen.lock().unwrap(),
        vec!["tolerate_failures", "abandon_exchange"]
    );
}
