//! Forwarding of the ranks' stdout and stderr to the launcher's, whole lines only (R1).
//!
//! One thread per pipe reads what the rank wrote and hands every run of complete lines to one
//! `write` under a lock shared by stdout and stderr (they are often the same pipe, `2>&1`), so
//! two ranks' text never meets within a line and a rank's lines keep their order. A last line
//! without a newline is forwarded whole with one added. A line longer than [`MAX_LINE`] is
//! cut into pieces of that size (each ended by a newline), so that a rank printing without
//! newlines cannot make the launcher's memory grow without bound.
//!
//! A rank's first error line on stderr may be held back a moment to be merged with the same
//! line from other ranks (see `collapse`).

use std::io::Read;
use std::process::{ChildStderr, ChildStdout};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::collapse::{looks_like_error, Collapse};

/// Longest line forwarded in one piece.
pub const MAX_LINE: usize = 1 << 20;
const READ_CHUNK: usize = 64 * 1024;

/// Which of the launcher's streams a pipe goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    /// File descriptor 1.
    Stdout,
    /// File descriptor 2.
    Stderr,
}

impl Sink {
    fn fd(self) -> i32 {
        match self {
            Sink::Stdout => 1,
            Sink::Stderr => 2,
        }
    }
}

/// The shared writer: the lock that keeps lines whole, and whether each sink still works.
#[derive(Debug, Default)]
pub struct Output {
    /// `[stdout broken, stderr broken]`: after EPIPE the text is read and dropped, so that a
    /// rank never blocks on a full pipe because nobody reads the launcher's output.
    broken: Mutex<[bool; 2]>,
}

impl Output {
    /// Writes `bytes` (complete lines) to `sink` with as few `write` calls as the kernel allows,
    /// holding the lock so that no other rank's text comes in between.
    pub fn write_lines(&self, sink: Sink, bytes: &[u8]) {
        let Ok(mut broken) = self.broken.lock() else {
            return;
        };
        let idx = usize::from(sink == Sink::Stderr);
        if broken[idx] {
            return;
        }
        let mut rest = bytes;
        while !rest.is_empty() {
            // SAFETY: writes from a valid slice to a file descriptor we do not own or close.
            let n = unsafe { libc::write(sink.fd(), rest.as_ptr().cast(), rest.len()) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                broken[idx] = true;
                return;
            }
            rest = &rest[n as usize..];
        }
    }

    /// Writes one message line of the launcher itself to stderr, under the same lock.
    pub fn message(&self, text: &str) {
        let mut line = text.as_bytes().to_vec();
        if !line.ends_with(b"\n") {
            line.push(b'\n');
        }
        self.write_lines(Sink::Stderr, &line);
    }
}

/// Counts forwarding threads still running so the launcher can wait for them with a deadline
/// (a rank's child may keep a pipe open after the rank is gone).
#[derive(Debug, Default)]
pub struct Tracker {
    live: Mutex<usize>,
    done: Condvar,
}

impl Tracker {
    fn start(&self) {
        if let Ok(mut n) = self.live.lock() {
            *n += 1;
        }
    }

    fn finish(&self) {
        if let Ok(mut n) = self.live.lock() {
            *n = n.saturating_sub(1);
            self.done.notify_all();
        }
    }

    /// Waits until every forwarding thread has finished or `timeout` passes; returns whether
    /// all finished.
    pub fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let Ok(mut n) = self.live.lock() else {
            return false;
        };
        while *n > 0 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            n = match self.done.wait_timeout(n, deadline - now) {
                Ok((g, _)) => g,
                Err(_) => return false,
            };
        }
        true
    }
}

/// A readable pipe of a rank.
pub enum Pipe {
    /// The rank's stdout.
    Out(ChildStdout),
    /// The rank's stderr.
    Err(ChildStderr),
}

/// Starts a thread that forwards `pipe` until end of file; with `tag`, every line is
/// prefixed with it (`--tag-output`). With `collapse`, the first error line of a stderr pipe
/// is merged with identical ones of other ranks (not with `tag`).
pub fn spawn(
    pipe: Pipe,
    output: Arc<Output>,
    tracker: Arc<Tracker>,
    rank: usize,
    tag: Option<String>,
    collapse: Option<Arc<Collapse>>,
) -> std::io::Result<JoinHandle<()>> {
    tracker.start();
    let t = tracker.clone();
    let name = format!("ferry-fwd-{rank}");
    let spawned = std::thread::Builder::new()
        .name(name)
        .stack_size(256 * 1024)
        .spawn(move || {
            let (reader, sink): (Box<dyn Read>, Sink) = match pipe {
                Pipe::Out(r) => (Box::new(r), Sink::Stdout),
                Pipe::Err(r) => (Box::new(r), Sink::Stderr),
            };
            match (tag, collapse) {
                (None, Some(c)) if sink == Sink::Stderr => {
                    let mut held = false;
                    pump(reader, |b| {
                        if held {
                            return output.write_lines(sink, b);
                        }
                        held = hold_first_error(&output, &c, rank, b);
                    })
                }
                (None, _) => pump(reader, |b| output.write_lines(sink, b)),
                (Some(tag), _) => {
                    let mut tagged = Vec::new();
                    pump(reader, |b| {
                        tag_lines(tag.as_bytes(), b, &mut tagged);
                        output.write_lines(sink, &tagged);
                    })
                }
            }
            t.finish();
        });
    if spawned.is_err() {
        tracker.finish();
    }
    spawned
}

/// Writes `lines` (complete lines) to stderr, handing the first one that looks like an error
/// to `collapse` (in order: what comes before it is written first, what follows after it).
/// Returns whether a line was held.
fn hold_first_error(output: &Output, collapse: &Collapse, rank: usize, lines: &[u8]) -> bool {
    let mut at = 0;
    for line in lines.split_inclusive(|&b| b == b'\n') {
        if looks_like_error(line) {
            if at > 0 {
                output.write_lines(Sink::Stderr, &lines[..at]);
            }
            collapse.hold(output, rank, line);
            let rest = &lines[at + line.len()..];
            if !rest.is_empty() {
                output.write_lines(Sink::Stderr, rest);
            }
            return true;
        }
        at += line.len();
    }
    output.write_lines(Sink::Stderr, lines);
    false
}

/// Writes `lines` (complete lines) into `out` with `tag` before each one.
fn tag_lines(tag: &[u8], lines: &[u8], out: &mut Vec<u8>) {
    out.clear();
    for line in lines.split_inclusive(|&b| b == b'\n') {
        out.extend_from_slice(tag);
        out.extend_from_slice(line);
    }
}

/// Copies `reader` to `write` in runs of whole lines (see the module documentation).
pub fn pump(mut reader: impl Read, mut write: impl FnMut(&[u8])) {
    let mut pending: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        pending.extend_from_slice(&chunk[..n]);
        if let Some(last) = pending.iter().rposition(|&b| b == b'\n') {
            write(&pending[..=last]);
            pending.drain(..=last);
        }
        while pending.len() >= MAX_LINE {
            let mut piece: Vec<u8> = pending.drain(..MAX_LINE).collect();
            piece.push(b'\n');
            write(&piece);
        }
    }
    if !pending.is_empty() {
        pending.push(b'\n');
        write(&pending);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that returns its data in fixed small pieces, splitting lines across reads.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(self.data.len()).min(buf.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn writes_only_whole_lines_and_adds_a_final_newline() {
        let data = b"alpha\nbeta gamma\ndelta";
        let mut writes: Vec<Vec<u8>> = Vec::new();
        pump(Trickle { data, step: 3 }, |b| writes.push(b.to_vec()));
        assert!(writes.iter().all(|w| w.ends_with(b"\n")), "{writes:?}");
        assert_eq!(writes.concat(), b"alpha\nbeta gamma\ndelta\n");
        // Lines split across reads are never written in halves.
        assert!(writes
            .iter()
            .any(|w| w == b"beta gamma\n" || w.ends_with(b"beta gamma\n")));
    }

    #[test]
    fn tags_every_line() {
        let mut out = Vec::new();
        tag_lines(b"[3] ", b"a\nbc\n\n", &mut out);
        assert_eq!(out, b"[3] a\n[3] bc\n[3] \n");
    }

    #[test]
    fn caps_line_length() {
        let data = vec![b'x'; MAX_LINE + 10];
        let mut writes = Vec::new();
        pump(&data[..], |b| writes.push(b.len()));
        assert_eq!(writes, vec![MAX_LINE + 1, 11]);
    }
}
