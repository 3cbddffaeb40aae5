//! ferry communication monitoring (P1-P5; seed 003 done from the inside).
//!
//! [`Monitored`] wraps any [`Transport`] and sees every message the program, the collectives
//! and the data layer complete, on every backend alike: it sits above the backends, so shared
//! memory, TCP, hybrid and MPI traffic is recorded the same way, per rank, without root, for a
//! whole job at once. `ferry::init` installs it when `FERRY_MONITOR` is set ([`install`]);
//! without it nothing is wrapped and nothing costs.
//!
//! - `FERRY_MONITOR=record:DIR`: every rank writes `DIR/rank-R.fmon` ([`format`]): for each
//!   completed send and receive its order, peer, generation, kind and tag (which names the
//!   collective, see [`format::Collective`]), length, and the transport call (the phase) it
//!   belongs to with that call's start and duration. A writer thread takes full chunks through
//!   a bounded queue; when it falls behind, records are dropped and counted, never waited for.
//! - `FERRY_MONITOR=check:DIR[,options]`: every completed message is compared with the
//!   recording as the program runs, per flow and with re-alignment ([`align`]), and every
//!   deviation is logged, passed to the program's callback ([`on_deviation`]) or fails the
//!   rank past a threshold ([`options`]). The missing or extra tail is reported at finish.
//!
//! `ferry monitor show|diff|export|plot` reads the records with [`format::read_dir`] and
//! compares them with [`align::diff_rank`], the same rules as the online check.

#![warn(missing_docs)]

/// A diagnostic line on stderr; a closed stderr loses the line instead of panicking (which
/// `eprintln!` would).
macro_rules! diag {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
pub(crate) use diag;

pub mod align;
pub mod check;
pub mod format;
pub mod options;
pub mod summary;
mod writer;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ferry_core::stats::Stats;
use ferry_core::transport::{RecvBuf, RetiredFlows, WaitPolicy};
use ferry_core::{Error, Exchange, MsgKey, Result, SharedMemory, Transport};

pub use align::{Deviation, DeviationKind};
pub use check::{clear_on_deviation, on_deviation};
pub use options::{CheckOptions, Mode, Reaction};

use check::Checker;
use format::{Dir, Event, Header};
use writer::RecordWriter;

/// The environment variable that turns monitoring on.
pub const ENV: &str = "FERRY_MONITOR";

/// Wraps `transport` in a [`Monitored`] when `FERRY_MONITOR` asks for it; otherwise hands it
/// back untouched (no cost).
pub fn install(transport: Box<dyn Transport>) -> Result<Box<dyn Transport>> {
    let Some(value) = std::env::var_os(ENV) else {
        return Ok(transport);
    };
    let value = value
        .into_string()
        .map_err(|_| Error::config(format!("{ENV} is not valid UTF-8")))?;
    match options::parse(&value).map_err(|e| e.on_rank(transport.rank()))? {
        None => Ok(transport),
        Some(mode) => Ok(Box::new(Monitored::new(transport, &mode)?)),
    }
}

enum Sink {
    Record(RecordWriter),
    Check(Box<Checker>),
}

/// A transport that records or checks every message it completes, forwarding everything to
/// the transport it wraps.
pub struct Monitored {
    inner: Box<dyn Transport>,
    sink: Sink,
    start: Instant,
    /// Whether records carry times (record mode). The check compares no times, so it reads
    /// no clock: two clock reads were a third of its cost per message.
    timed: bool,
    calls: u32,
    messages: u64,
    finished: bool,
    /// A communication call failed (or the check failed the rank): the rest of the run is
    /// not what the program would have done, so its tail is not compared.
    broken: bool,
}

impl Monitored {
    /// Wraps `inner` for `mode`: creates the record file, or loads this rank's recording.
    pub fn new(inner: Box<dyn Transport>, mode: &Mode) -> Result<Monitored> {
        let (rank, size) = (inner.rank(), inner.size());
        // Both clocks at once: record times count from `start`, the header says when that
        // was in wall-clock time (the plot's common time line of all ranks).
        let start = Instant::now();
        let wall = SystemTime::now();
        let sink = match mode {
            Mode::Record(dir) => {
                let header = Header {
                    rank: rank as u32,
                    size: size as u32,
                    start_unix_ns: wall
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as u64),
                    backend: inner.name().to_string(),
                };
                let path = format::rank_file(dir, rank);
                Sink::Record(RecordWriter::create(&path, &header).map_err(|e| {
                    Error::new(ferry_core::ErrorKind::Io, "monitor record")
                        .on_rank(rank)
                        .with_detail(format!("cannot create {}: {e}", path.display()))
                })?)
            }
            Mode::Check(dir, options) => {
                Sink::Check(Box::new(Checker::load(dir, rank, size, options.clone())?))
            }
        };
        let timed = matches!(sink, Sink::Record(_));
        Ok(Monitored {
            inner,
            sink,
            start,
            timed,
            calls: 0,
            messages: 0,
            finished: false,
            broken: false,
        })
    }

    /// The record file being written, in record mode.
    pub fn record_path(&self) -> Option<&Path> {
        match &self.sink {
            Sink::Record(w) => Some(w.path()),
            Sink::Check(_) => None,
        }
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// The time since the start when records carry times, else 0 without reading the clock.
    #[inline]
    fn clock(&self) -> u64 {
        if self.timed {
            self.now_ns()
        } else {
            0
        }
    }

    /// Starts a call: its number and start time.
    #[inline]
    fn begin(&mut self) -> Call {
        let n = self.calls;
        self.calls = self.calls.wrapping_add(1);
        Call {
            n,
            start: self.clock(),
            took: 0,
        }
    }

    /// Ends a call: its duration, once for all the messages it completed.
    #[inline]
    fn end(&self, mut call: Call) -> Call {
        if self.timed {
            call.took = u32::try_from(self.now_ns().saturating_sub(call.start)).unwrap_or(u32::MAX);
        }
        call
    }

    #[inline]
    fn note(&mut self, call: Call, dir: Dir, peer: usize, key: MsgKey, len: usize) -> Result<()> {
        let ev = Event {
            dir,
            peer: peer as u32,
            key,
            len: len as u64,
            call: call.n,
            call_ns: call.took,
            t_ns: call.start,
        };
        let pos = self.messages;
        self.messages += 1;
        match &mut self.sink {
            Sink::Record(w) => {
                w.push(&ev);
                Ok(())
            }
            Sink::Check(c) => {
                let r = c.observe(pos, &ev);
                if r.is_err() {
                    self.broken = true;
                }
                r
            }
        }
    }

    fn note_exchange(&mut self, call: Call, ex: &Exchange<'_>) -> Result<()> {
        let mut result = Ok(());
        for s in &ex.sends {
            let r = self.note(call, Dir::Send, s.peer, s.key, s.data.len());
            result = result.and(r);
        }
        for r in &ex.recvs {
            let len = recv_len(&r.buf);
            let res = self.note(call, Dir::Recv, r.peer, r.key, len);
            result = result.and(res);
        }
        result
    }

    fn finish_monitor(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        let end = self.now_ns();
        let rank = self.inner.rank();
        match &mut self.sink {
            Sink::Record(w) => {
                let dropped = w.dropped();
                w.finish(end).map_err(|e| {
                    Error::new(ferry_core::ErrorKind::Io, "monitor record")
                        .on_rank(rank)
                        .with_detail(format!("writing {}: {e}", w.path().display()))
                })?;
                if dropped > 0 {
                    crate::diag!(
                        "ferry monitor: rank {rank}: {dropped} records dropped (the disk did not \
                         keep up); {} marks where",
                        w.path().display()
                    );
                }
                Ok(())
            }
            Sink::Check(c) if self.broken => {
                crate::diag!(
                    "ferry monitor: rank {rank}: the run ended with an error after {} \
                     messages; the rest of the recording was not compared",
                    self.messages
                );
                c.failure().map_or(Ok(()), Err)
            }
            Sink::Check(c) => c.finish(self.messages),
        }
    }
}

/// A transport call being monitored: its number, start and duration (ns since the start; 0 in
/// check mode, which reads no clock).
#[derive(Clone, Copy)]
struct Call {
    n: u32,
    start: u64,
    took: u32,
}

fn recv_len(buf: &RecvBuf<'_>) -> usize {
    match buf {
        RecvBuf::Vec(v) => v.len(),
        RecvBuf::Slice(s) => s.len(),
    }
}

impl Transport for Monitored {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn node_of(&self, rank: usize) -> usize {
        self.inner.node_of(rank)
    }

    fn progress_exchange(&mut self, ex: &mut Exchange<'_>) -> Result<bool> {
        // Polled many times per exchange: only the poll that completes it counts as a call
        // (its duration is that of the last poll).
        let start = self.clock();
        let done = self
            .inner
            .progress_exchange(ex)
            .inspect_err(|_| self.broken = true)?;
        if done {
            let n = self.calls;
            self.calls = self.calls.wrapping_add(1);
            let call = self.end(Call { n, start, took: 0 });
            self.note_exchange(call, ex)?;
        }
        Ok(done)
    }

    fn wait_for_input(&mut self, timeout: Duration) -> Result<()> {
        self.inner.wait_for_input(timeout)
    }

    fn wait_policy(&self) -> WaitPolicy {
        self.inner.wait_policy()
    }

    fn exchange(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        let call = self.begin();
        self.inner
            .exchange(ex)
            .inspect_err(|_| self.broken = true)?;
        let call = self.end(call);
        self.note_exchange(call, ex)
    }

    fn send(&mut self, peer: usize, key: MsgKey, data: &[u8]) -> Result<()> {
        let call = self.begin();
        self.inner
            .send(peer, key, data)
            .inspect_err(|_| self.broken = true)?;
        let call = self.end(call);
        self.note(call, Dir::Send, peer, key, data.len())
    }

    fn recv(&mut self, peer: usize, key: MsgKey, buf: &mut Vec<u8>) -> Result<()> {
        let call = self.begin();
        self.inner
            .recv(peer, key, buf)
            .inspect_err(|_| self.broken = true)?;
        let call = self.end(call);
        self.note(call, Dir::Recv, peer, key, buf.len())
    }

    fn sendrecv(
        &mut self,
        to: usize,
        send_key: MsgKey,
        data: &[u8],
        from: usize,
        recv_key: MsgKey,
        buf: RecvBuf<'_>,
    ) -> Result<()> {
        let call = self.begin();
        let len = match buf {
            RecvBuf::Vec(v) => {
                self.inner
                    .sendrecv(to, send_key, data, from, recv_key, RecvBuf::Vec(&mut *v))
                    .inspect_err(|_| self.broken = true)?;
                v.len()
            }
            RecvBuf::Slice(s) => {
                let n = s.len();
                self.inner
                    .sendrecv(to, send_key, data, from, recv_key, RecvBuf::Slice(s))
                    .inspect_err(|_| self.broken = true)?;
                n
            }
        };
        let call = self.end(call);
        let sent = self.note(call, Dir::Send, to, send_key, data.len());
        sent.and(self.note(call, Dir::Recv, from, recv_key, len))
    }

    fn stats(&self) -> Stats {
        self.inner.stats()
    }

    fn shared_memory(&self) -> Option<Arc<dyn SharedMemory>> {
        self.inner.shared_memory()
    }

    fn note_shared_copy(
        &mut self,
        peer: usize,
        key: MsgKey,
        bytes: usize,
        sent: bool,
    ) -> Result<()> {
        // Recorded as the data message the copy replaces, so that traffic matrices, sizes and
        // checks read the same with shared containers as without.
        let call = self.begin();
        let call = self.end(call);
        let dir = if sent { Dir::Send } else { Dir::Recv };
        self.note(call, dir, peer, key, bytes)
    }

    fn retire_flows(&mut self, flows: RetiredFlows) {
        self.inner.retire_flows(flows)
    }

    fn flow_count(&self) -> Option<usize> {
        self.inner.flow_count()
    }

    fn abandon_exchange(&mut self, ex: &mut Exchange<'_>, why: &Error) {
        // The exchange did not complete: nothing to note, but the backend must learn that its
        // buffers are gone (a zero-copy backend would otherwise still read them).
        self.inner.abandon_exchange(ex, why)
    }

    fn tolerate_failures(&mut self) {
        self.inner.tolerate_failures()
    }

    fn checkpoint_mark(&mut self) -> Result<bool> {
        self.inner.checkpoint_mark()
    }

    fn retain_token(&mut self) -> Option<Vec<u8>> {
        self.inner.retain_token()
    }

    fn retain_resume(&mut self, token: &[u8]) -> Result<()> {
        self.inner.retain_resume(token)
    }

    fn is_restart(&mut self) -> Result<bool> {
        self.inner.is_restart()
    }

    fn finish(&mut self) -> Result<()> {
        let inner = self.inner.finish();
        let monitor = self.finish_monitor();
        inner.and(monitor)
    }
}

impl Drop for Monitored {
    fn drop(&mut self) {
        // An orderly end calls finish; a rank unwinding from an error still flushes what it
        // recorded (the writer's drop), without the end record and without a check report.
        self.finished = true;
    }
}
