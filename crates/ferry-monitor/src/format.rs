//! The record format: one file per rank, `rank-R.fmon` in the record directory.
//!
//! ```text
//! header   "FERRYMON" (8 bytes) | version u16 | header length u16 | rank u32 | size u32
//!          | start time, ns since the Unix epoch u64 | backend name length u8 | name bytes
//! records  40 bytes each, little-endian:
//!          op u8 | kind u8 | reserved u16 | peer u32 | generation u32 | tag u32 | length u64
//!          | call u32 | call duration ns u32 (saturating) | call start ns since `start` u64
//! ```
//!
//! `op` is 0 for a completed send, 1 for a completed receive, [`OP_GAP`] for records the
//! writer had to drop (their number in `length`) and [`OP_END`] for the end record written by
//! an orderly finish (`length` = records dropped in all, `tag` = 0, time = end of the run). A
//! file without the end record comes from a rank that did not finish; its records are still
//! read. The header length lets a later version append header fields that this version skips.
//!
//! Fixed-size records keep the hot path to one copy of 40 bytes and make a damaged file easy
//! to locate: every error names the byte offset.

use std::fmt;
use std::path::{Path, PathBuf};

use ferry_core::{MsgKey, MsgKind};

/// First bytes of every record file.
pub const MAGIC: &[u8; 8] = b"FERRYMON";
/// Format version this crate writes and reads.
pub const VERSION: u16 = 1;
/// Bytes per record.
pub const RECORD_LEN: usize = 40;
/// Fixed part of the header (before the backend name).
const HEADER_FIXED: usize = 8 + 2 + 2 + 4 + 4 + 8 + 1;
/// Record op: a completed send.
pub const OP_SEND: u8 = 0;
/// Record op: a completed receive.
pub const OP_RECV: u8 = 1;
/// Record op: records were dropped here (their number in the length field).
pub const OP_GAP: u8 = 0xFE;
/// Record op: orderly end of the record.
pub const OP_END: u8 = 0xFF;

/// The record file of `rank` in `dir`.
pub fn rank_file(dir: &Path, rank: usize) -> PathBuf {
    dir.join(format!("rank-{rank}.fmon"))
}

/// Direction of a message as seen by the recording rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    /// This rank sent it.
    Send,
    /// This rank received it.
    Recv,
}

/// One completed message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// Sent or received.
    pub dir: Dir,
    /// The other rank.
    pub peer: u32,
    /// Generation, kind and tag.
    pub key: MsgKey,
    /// Payload bytes.
    pub len: u64,
    /// Number of the transport call (exchange, send, recv, sendrecv) that moved it, from 0:
    /// messages of one call form one phase.
    pub call: u32,
    /// How long that call took, ns (saturating at `u32::MAX`, about 4.3 s).
    pub call_ns: u32,
    /// When that call started, ns since the record's start.
    pub t_ns: u64,
}

impl Event {
    /// The collective this message belongs to, decoded from a collective tag
    /// (`sequence << 16 | collective << 8 | phase`), or `None` for other kinds.
    pub fn collective(&self) -> Option<Collective> {
        (self.key.kind == MsgKind::COLLECTIVE).then(|| Collective::from_tag(self.key.tag))
    }
}

/// Which collective a collective message belongs to (from its tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Collective(pub u8);

impl Collective {
    /// The collective named by bits 8-15 of a collective tag.
    pub fn from_tag(tag: u32) -> Collective {
        Collective(((tag >> 8) & 0xff) as u8)
    }

    /// Lower-case name (`barrier`, `broadcast`, ...), `collective N` for an unknown number.
    pub fn name(self) -> String {
        let known = [
            "barrier",
            "broadcast",
            "reduce",
            "allreduce",
            "gather",
            "allgather",
            "scatter",
            "alltoall",
        ];
        match self.0 {
            n @ 1..=8 => known[n as usize - 1].to_string(),
            n => format!("collective {n}"),
        }
    }
}

/// Short name of a message kind.
pub fn kind_name(kind: MsgKind) -> &'static str {
    match kind {
        MsgKind::USER => "user",
        MsgKind::COLLECTIVE => "collective",
        MsgKind::DATA => "data",
        MsgKind::CONTROL => "control",
        _ => "other",
    }
}

/// The header of a record file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// The recording rank.
    pub rank: u32,
    /// Ranks in the job.
    pub size: u32,
    /// When recording started, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// `FERRY_BACKEND` name of the recorded run.
    pub backend: String,
}

impl Header {
    /// The encoded header.
    pub fn encode(&self) -> Vec<u8> {
        let name = &self.backend.as_bytes()[..self.backend.len().min(255)];
        let mut out = Vec::with_capacity(HEADER_FIXED + name.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&((HEADER_FIXED + name.len()) as u16).to_le_bytes());
        out.extend_from_slice(&self.rank.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.start_unix_ns.to_le_bytes());
        out.push(name.len() as u8);
        out.extend_from_slice(name);
        out
    }
}

/// Appends one event record to `out`.
#[inline]
pub fn encode_event(ev: &Event, out: &mut Vec<u8>) {
    let mut r = [0u8; RECORD_LEN];
    r[0] = match ev.dir {
        Dir::Send => OP_SEND,
        Dir::Recv => OP_RECV,
    };
    r[1] = ev.key.kind.0;
    r[4..8].copy_from_slice(&ev.peer.to_le_bytes());
    r[8..12].copy_from_slice(&ev.key.generation.to_le_bytes());
    r[12..16].copy_from_slice(&ev.key.tag.to_le_bytes());
    r[16..24].copy_from_slice(&ev.len.to_le_bytes());
    r[24..28].copy_from_slice(&ev.call.to_le_bytes());
    r[28..32].copy_from_slice(&ev.call_ns.to_le_bytes());
    r[32..40].copy_from_slice(&ev.t_ns.to_le_bytes());
    out.extend_from_slice(&r);
}

/// Appends a marker record (`OP_GAP` or `OP_END`) carrying `count` and a time.
pub fn encode_marker(op: u8, count: u64, t_ns: u64, out: &mut Vec<u8>) {
    let mut r = [0u8; RECORD_LEN];
    r[0] = op;
    r[16..24].copy_from_slice(&count.to_le_bytes());
    r[32..40].copy_from_slice(&t_ns.to_le_bytes());
    out.extend_from_slice(&r);
}

/// A decoded record file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// The header.
    pub header: Header,
    /// The messages, in completion order.
    pub events: Vec<Event>,
    /// Places where the writer dropped records: (index in `events` where they are missing,
    /// number dropped).
    pub gaps: Vec<(usize, u64)>,
    /// Whether the end record was present (the rank finished in order).
    pub complete: bool,
    /// End of the run, ns since the start (from the end record, else the last call's end).
    pub end_ns: u64,
}

impl Record {
    /// Records dropped by the writer in all.
    pub fn dropped(&self) -> u64 {
        // Counts come from the file: a damaged one must not overflow.
        self.gaps.iter().fold(0u64, |a, g| a.saturating_add(g.1))
    }
}

/// Why a record file cannot be read: what, at which byte offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// Byte offset of the problem.
    pub offset: usize,
    /// What is wrong there.
    pub what: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.what)
    }
}

fn err(offset: usize, what: impl Into<String>) -> DecodeError {
    DecodeError {
        offset,
        what: what.into(),
    }
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

/// Decodes a whole record file. Never panics: a damaged or foreign file is an error naming
/// the byte offset.
pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
    if bytes.len() < HEADER_FIXED {
        return Err(err(
            bytes.len(),
            format!(
                "file ends inside the header ({} of at least {HEADER_FIXED} bytes)",
                bytes.len()
            ),
        ));
    }
    if &bytes[..8] != MAGIC {
        return Err(err(0, "not a ferry monitor record (no FERRYMON magic)"));
    }
    let version = u16_at(bytes, 8);
    if version != VERSION {
        return Err(err(
            8,
            format!("record format version {version}, this build reads version {VERSION}"),
        ));
    }
    let header_len = usize::from(u16_at(bytes, 10));
    let name_len = usize::from(bytes[HEADER_FIXED - 1]);
    if header_len < HEADER_FIXED + name_len {
        return Err(err(
            10,
            format!("header length {header_len} is shorter than its fields"),
        ));
    }
    if bytes.len() < header_len {
        return Err(err(bytes.len(), "file ends inside the header"));
    }
    let name = &bytes[HEADER_FIXED..HEADER_FIXED + name_len];
    let backend = std::str::from_utf8(name)
        .map_err(|_| err(HEADER_FIXED, "backend name is not UTF-8"))?
        .to_string();
    let header = Header {
        rank: u32_at(bytes, 12),
        size: u32_at(bytes, 16),
        start_unix_ns: u64_at(bytes, 20),
        backend,
    };
    if header.size == 0 || header.rank >= header.size {
        return Err(err(
            12,
            format!("rank {} of a job of {} ranks", header.rank, header.size),
        ));
    }
    let body = &bytes[header_len..];
    if !body.len().is_multiple_of(RECORD_LEN) {
        let whole = body.len() / RECORD_LEN * RECORD_LEN;
        return Err(err(
            header_len + whole,
            format!(
                "file ends inside a record ({} trailing bytes)",
                body.len() - whole
            ),
        ));
    }
    // Sizes come from the file: reserve only what the file can hold.
    let mut rec = Record {
        header,
        events: Vec::with_capacity(body.len() / RECORD_LEN),
        ..Record::default()
    };
    for (i, r) in body.chunks_exact(RECORD_LEN).enumerate() {
        let offset = header_len + i * RECORD_LEN;
        if rec.complete {
            return Err(err(offset, "record after the end record"));
        }
        let t_ns = u64_at(r, 32);
        match r[0] {
            op @ (OP_SEND | OP_RECV) => {
                let peer = u32_at(r, 4);
                if peer >= rec.header.size {
                    return Err(err(
                        offset + 4,
                        format!("peer {peer} in a job of {} ranks", rec.header.size),
                    ));
                }
                let ev = Event {
                    dir: if op == OP_SEND { Dir::Send } else { Dir::Recv },
                    peer,
                    key: MsgKey::new(u32_at(r, 8), MsgKind(r[1]), u32_at(r, 12)),
                    len: u64_at(r, 16),
                    call: u32_at(r, 24),
                    call_ns: u32_at(r, 28),
                    t_ns,
                };
                rec.end_ns = rec.end_ns.max(t_ns.saturating_add(u64::from(ev.call_ns)));
                rec.events.push(ev);
            }
            OP_GAP => rec.gaps.push((rec.events.len(), u64_at(r, 16))),
            OP_END => {
                rec.complete = true;
                rec.end_ns = rec.end_ns.max(t_ns);
            }
            op => return Err(err(offset, format!("unknown record op {op:#04x}"))),
        }
    }
    Ok(rec)
}

/// Reads and decodes a record file; errors name the file.
pub fn read_file(path: &Path) -> Result<Record, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Reads every `rank-R.fmon` of a record directory, indexed by rank; errors name the file.
/// Ranks without a file (a job that was not recorded on every rank) are an error.
pub fn read_dir(dir: &Path) -> Result<Vec<Record>, String> {
    let first = read_file(&rank_file(dir, 0))?;
    let size = first.header.size as usize;
    let mut out = Vec::with_capacity(size);
    out.push(first);
    for rank in 1..size {
        let path = rank_file(dir, rank);
        let rec = read_file(&path)?;
        if rec.header.size as usize != size || rec.header.rank as usize != rank {
            return Err(format!(
                "{}: rank {} of {} ranks, expected rank {rank} of {size}",
                path.display(),
                rec.header.rank,
                rec.header.size
            ));
        }
        out.push(rec);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let h = Header {
            rank: 1,
            size: 4,
            start_unix_ns: 7,
            backend: "shm".into(),
        };
        let mut b = h.encode();
        for i in 0..3u32 {
            encode_event(
                &Event {
                    dir: if i % 2 == 0 { Dir::Send } else { Dir::Recv },
                    peer: i,
                    key: MsgKey::new(i, MsgKind::DATA, 9),
                    len: 100 + u64::from(i),
                    call: i,
                    call_ns: 5,
                    t_ns: 10 * u64::from(i),
                },
                &mut b,
            );
        }
        encode_marker(OP_GAP, 12, 40, &mut b);
        encode_marker(OP_END, 12, 50, &mut b);
        b
    }

    #[test]
    fn round_trip() {
        let r = decode(&sample()).unwrap();
        assert_eq!(r.header.backend, "shm");
        assert_eq!(r.header.rank, 1);
        assert_eq!(r.events.len(), 3);
        assert_eq!(r.events[2].len, 102);
        assert_eq!(r.events[1].dir, Dir::Recv);
        assert_eq!(r.gaps, vec![(3, 12)]);
        assert!(r.complete);
        assert_eq!(r.end_ns, 50);
    }

    #[test]
    fn damage_is_an_error_with_an_offset_never_a_panic() {
        let good = sample();
        for cut in 0..good.len() {
            let _ = decode(&good[..cut]);
        }
        let e = decode(&good[..good.len() - 3]).unwrap_err();
        assert!(e.what.contains("inside a record"), "{e}");
        let mut bad = good.clone();
        let first = bad.len() - 5 * RECORD_LEN;
        bad[first] = 7;
        let e = decode(&bad).unwrap_err();
        assert_eq!(e.offset, first);
        let mut bad = good.clone();
        bad[first + 4] = 9; // peer 9 of 4 ranks
        assert_eq!(decode(&bad).unwrap_err().offset, first + 4);
        let mut bad = good.clone();
        bad[0] = b'X';
        assert_eq!(decode(&bad).unwrap_err().offset, 0);
        let mut bad = good;
        bad[8] = 2;
        assert!(decode(&bad).unwrap_err().what.contains("version 2"));
    }

    #[test]
    fn huge_gap_counts_from_a_damaged_file_do_not_overflow() {
        let mut b = sample();
        b.truncate(b.len() - 2 * RECORD_LEN);
        encode_marker(OP_GAP, u64::MAX, 0, &mut b);
        encode_marker(OP_GAP, u64::MAX, 0, &mut b);
        assert_eq!(decode(&b).unwrap().dropped(), u64::MAX);
    }

    #[test]
    fn a_file_without_end_record_is_read_as_incomplete() {
        let good = sample();
        let r = decode(&good[..good.len() - RECORD_LEN]).unwrap();
        assert!(!r.complete);
        assert_eq!(r.events.len(), 3);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(0u8..=255, 0..400)) {
            let _ = decode(&bytes);
            let mut b = sample();
            b.extend_from_slice(&bytes);
            let _ = decode(&b);
        }
    }
}
