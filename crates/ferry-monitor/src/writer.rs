//! The record writer: the communication path only copies 40 bytes into a chunk; full chunks go
//! to a writer thread through a bounded queue. When the queue is full (the disk cannot keep
//! up) the chunk is dropped and counted, and a gap record says where, instead of stalling the
//! program.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;

use crate::format::{encode_event, encode_marker, Event, Header, OP_END, OP_GAP, RECORD_LEN};

/// Records per chunk handed to the writer thread.
const CHUNK_RECORDS: usize = 1024;
/// Chunks queued for the writer thread at most (with the one being filled and the one being
/// written, at most `(QUEUE + 2) * 40 KiB` of memory).
const QUEUE: usize = 16;

/// Writes one rank's record file without blocking the communication path.
#[derive(Debug)]
pub struct RecordWriter {
    path: PathBuf,
    chunk: Vec<u8>,
    tx: Option<SyncSender<Vec<u8>>>,
    spare: Receiver<Vec<u8>>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
    dropped: u64,
    /// Dropped records not yet noted by a gap record.
    pending_gap: u64,
    /// The count of the gap record that starts `chunk` (0: none). If `chunk` is dropped too,
    /// that gap record is lost with it and its count must be carried into the next one.
    gap_in_chunk: u64,
}

impl RecordWriter {
    /// Creates `path` (and its directory), writes the header and starts the writer thread.
    pub fn create(path: &Path, header: &Header) -> std::io::Result<RecordWriter> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = BufWriter::with_capacity(256 * 1024, File::create(path)?);
        file.write_all(&header.encode())?;
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(QUEUE);
        let (spare_tx, spare) = mpsc::channel::<Vec<u8>>();
        let thread = std::thread::Builder::new()
            .name("ferry-monitor".into())
            .spawn(move || -> std::io::Result<()> {
                for mut chunk in rx {
                    file.write_all(&chunk)?;
                    chunk.clear();
                    // The program may have ended already; the chunk is then simply freed.
                    let _ = spare_tx.send(chunk);
                }
                file.flush()
            })?;
        Ok(RecordWriter {
            path: path.to_path_buf(),
            chunk: Vec::with_capacity(CHUNK_RECORDS * RECORD_LEN),
            tx: Some(tx),
            spare,
            thread: Some(thread),
            dropped: 0,
            pending_gap: 0,
            gap_in_chunk: 0,
        })
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records dropped so far because the writer thread fell behind.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Appends one event.
    #[inline]
    pub fn push(&mut self, ev: &Event) {
        encode_event(ev, &mut self.chunk);
        if self.chunk.len() >= CHUNK_RECORDS * RECORD_LEN {
            self.hand_over(ev.t_ns);
        }
    }

    fn hand_over(&mut self, t_ns: u64) {
        let fresh = self
            .spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(CHUNK_RECORDS * RECORD_LEN));
        let full = std::mem::replace(&mut self.chunk, fresh);
        let Some(tx) = &self.tx else {
            return;
        };
        match tx.try_send(full) {
            Ok(()) => self.gap_in_chunk = 0,
            Err(TrySendError::Full(mut lost)) | Err(TrySendError::Disconnected(mut lost)) => {
                // Keep the program going: count the records, reuse the buffer. The lost
                // chunk's own gap record (its first) is no event, but its count is not
                // written anywhere now: it moves on to the next gap record.
                let records = (lost.len() / RECORD_LEN) as u64;
                let events = records - u64::from(self.gap_in_chunk > 0);
                self.dropped += events;
                self.pending_gap += events + self.gap_in_chunk;
                self.gap_in_chunk = 0;
                lost.clear();
                self.chunk = lost;
            }
        }
        if self.pending_gap > 0 && self.chunk.is_empty() {
            encode_marker(OP_GAP, self.pending_gap, t_ns, &mut self.chunk);
            self.gap_in_chunk = self.pending_gap;
            self.pending_gap = 0;
        }
    }

    /// Writes what is buffered and the end record, and waits for the writer thread.
    pub fn finish(&mut self, end_ns: u64) -> std::io::Result<()> {
        let Some(tx) = self.tx.take() else {
            return Ok(());
        };
        if self.pending_gap > 0 {
            encode_marker(OP_GAP, self.pending_gap, end_ns, &mut self.chunk);
        }
        encode_marker(OP_END, self.dropped, end_ns, &mut self.chunk);
        let last = std::mem::take(&mut self.chunk);
        // At the end the program may wait for the disk.
        let sent = tx.send(last);
        drop(tx);
        let joined = match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(std::io::Error::other("monitor writer thread panicked")),
            None => Ok(()),
        };
        joined?;
        sent.map_err(|_| std::io::Error::other("monitor writer thread ended early"))
    }
}

impl Drop for RecordWriter {
    fn drop(&mut self) {
        // A rank that ends without finish still leaves what it recorded (without end record).
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(std::mem::take(&mut self.chunk));
            drop(tx);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{decode, Dir};
    use ferry_core::MsgKey;

    /// A writer whose queue nobody drains until the test does: every chunk past the queue's
    /// capacity is dropped, deterministically.
    fn stalled() -> (RecordWriter, Receiver<Vec<u8>>) {
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(QUEUE);
        let (_, spare) = mpsc::channel::<Vec<u8>>();
        let writer = RecordWriter {
            path: PathBuf::from("stalled"),
            chunk: Vec::with_capacity(CHUNK_RECORDS * RECORD_LEN),
            tx: Some(tx),
            spare,
            thread: None,
            dropped: 0,
            pending_gap: 0,
            gap_in_chunk: 0,
        };
        (writer, rx)
    }

    #[test]
    fn every_dropped_record_is_counted_in_the_file_even_when_gap_records_are_dropped_too() {
        let (mut w, rx) = stalled();
        // Twice the queue's capacity: the chunks after the first QUEUE are dropped one after
        // the other, each but the first starting with the gap record of those before it.
        let pushed = 2 * QUEUE * CHUNK_RECORDS + 100;
        for i in 0..pushed as u64 {
            let ev = Event {
                dir: Dir::Send,
                peer: 1,
                key: MsgKey::user(0),
                len: i,
                call: i as u32,
                call_ns: 0,
                t_ns: i,
            };
            w.push(&ev);
        }
        let dropped = w.dropped();
        assert!(
            dropped >= (QUEUE as u64 - 1) * CHUNK_RECORDS as u64,
            "{dropped}"
        );
        // The queued chunks first (finish waits for room in the queue), then the last one.
        let mut body: Vec<u8> = rx.try_iter().flatten().collect();
        w.finish(pushed as u64).expect("finish");
        body.extend(rx.try_iter().flatten());
        let header = Header {
            rank: 0,
            size: 2,
            start_unix_ns: 0,
            backend: "mem".into(),
        };
        let mut file = header.encode();
        file.extend_from_slice(&body);
        let rec = decode(&file).expect("decode");
        assert!(rec.complete);
        assert_eq!(rec.dropped(), dropped, "gap records in the file");
        assert_eq!(rec.events.len() as u64 + dropped, pushed as u64);
    }
}
