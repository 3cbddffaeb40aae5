//! Summaries of records for `ferry monitor show|export|plot`: totals per rank, per peer and
//! per kind, the rank-to-rank byte matrix, message sizes, and phases.

use std::collections::BTreeMap;

use ferry_core::MsgKind;

use crate::format::{kind_name, Dir, Event, Record};

/// Messages and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    /// Messages.
    pub messages: u64,
    /// Payload bytes.
    pub bytes: u64,
}

impl Count {
    // Lengths come from files that may be damaged: sums saturate instead of overflowing.
    fn add(&mut self, len: u64) {
        self.messages += 1;
        self.bytes = self.bytes.saturating_add(len);
    }
}

/// What one rank did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankSummary {
    /// The rank.
    pub rank: usize,
    /// Backend of the recorded run.
    pub backend: String,
    /// Whether the record has its end record.
    pub complete: bool,
    /// Records the writer dropped.
    pub dropped: u64,
    /// Transport calls that completed at least one message.
    pub calls: u64,
    /// Sent in all.
    pub sent: Count,
    /// Received in all.
    pub received: Count,
    /// Sent, by destination rank.
    pub sent_to: Vec<Count>,
    /// Received, by source rank.
    pub received_from: Vec<Count>,
    /// Sent and received, by kind (`user`, `data`, `control`, or the collective's name).
    pub by_kind: BTreeMap<String, Count>,
    /// Run time covered, ns.
    pub end_ns: u64,
}

/// The kind name of a message for summaries: the collective's name for collective messages.
pub fn event_kind(ev: &Event) -> String {
    match ev.collective() {
        Some(c) => c.name(),
        None => kind_name(ev.key.kind).to_string(),
    }
}

/// Summarises one rank's record.
pub fn summarize(rec: &Record) -> RankSummary {
    let size = rec.header.size as usize;
    let mut s = RankSummary {
        rank: rec.header.rank as usize,
        backend: rec.header.backend.clone(),
        complete: rec.complete,
        dropped: rec.dropped(),
        sent_to: vec![Count::default(); size],
        received_from: vec![Count::default(); size],
        end_ns: rec.end_ns,
        ..RankSummary::default()
    };
    let mut last_call = None;
    for ev in &rec.events {
        if last_call != Some(ev.call) {
            s.calls += 1;
            last_call = Some(ev.call);
        }
        // Decoded peers are below the size (checked by the decoder).
        let peer = ev.peer as usize;
        match ev.dir {
            Dir::Send => {
                s.sent.add(ev.len);
                s.sent_to[peer].add(ev.len);
            }
            Dir::Recv => {
                s.received.add(ev.len);
                s.received_from[peer].add(ev.len);
            }
        }
        s.by_kind.entry(event_kind(ev)).or_default().add(ev.len);
    }
    s
}

/// Bytes sent from rank (row) to rank (column), from the senders' records.
pub fn byte_matrix(records: &[Record]) -> Vec<Vec<u64>> {
    let n = records.len();
    let mut m = vec![vec![0u64; n]; n];
    for (from, rec) in records.iter().enumerate() {
        for ev in &rec.events {
            if ev.dir == Dir::Send && (ev.peer as usize) < n {
                let cell = &mut m[from][ev.peer as usize];
                *cell = cell.saturating_add(ev.len);
            }
        }
    }
    m
}

/// Sent messages per power-of-two size class: `(lower bound in bytes, count)`, the first
/// class holding the empty messages.
pub fn size_histogram(records: &[Record]) -> Vec<(u64, u64)> {
    let mut classes = [0u64; 65];
    for rec in records {
        for ev in rec.events.iter().filter(|e| e.dir == Dir::Send) {
            let class = if ev.len == 0 {
                0
            } else {
                64 - ev.len.leading_zeros() as usize
            };
            classes[class] += 1;
        }
    }
    let last = classes.iter().rposition(|&c| c > 0).unwrap_or(0);
    (0..=last)
        .map(|c| (if c == 0 { 0 } else { 1u64 << (c - 1) }, classes[c]))
        .collect()
}

/// What a phase was.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PhaseKind {
    /// Point-to-point messages of the program.
    PointToPoint,
    /// A data-layer transition (container switch).
    Data,
    /// A collective call, by name.
    Collective(String),
    /// Library control traffic.
    Control,
}

impl PhaseKind {
    /// Short name.
    pub fn name(&self) -> String {
        match self {
            PhaseKind::PointToPoint => "point-to-point".into(),
            PhaseKind::Data => "data".into(),
            PhaseKind::Collective(c) => c.clone(),
            PhaseKind::Control => "control".into(),
        }
    }
}

/// One phase: a transport call, or all the calls of one collective.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase {
    /// What it was.
    pub kind: PhaseKind,
    /// Start, ns since the record's start.
    pub start_ns: u64,
    /// End, ns since the record's start.
    pub end_ns: u64,
    /// Messages.
    pub messages: u64,
    /// Bytes sent and received.
    pub bytes: u64,
}

/// The phases of a record, in order: each transport call is one phase, except that the calls
/// of one collective (same generation, sequence and collective in the tag) make one.
pub fn phases(rec: &Record) -> Vec<Phase> {
    let mut out: Vec<Phase> = Vec::new();
    let mut last: Option<(u32, Option<(u32, u32)>)> = None;
    for ev in &rec.events {
        let unit =
            (ev.key.kind == MsgKind::COLLECTIVE).then_some((ev.key.generation, ev.key.tag >> 8));
        let end = ev.t_ns.saturating_add(u64::from(ev.call_ns));
        let same_call = last.is_some_and(|(c, _)| c == ev.call);
        let same_unit = unit.is_some() && last.is_some_and(|(_, u)| u == unit);
        match out.last_mut() {
            Some(p) if same_call || same_unit => {
                p.end_ns = p.end_ns.max(end);
                p.messages += 1;
                p.bytes = p.bytes.saturating_add(ev.len);
            }
            _ => {
                let kind = match ev.key.kind {
                    MsgKind::COLLECTIVE => PhaseKind::Collective(event_kind(ev)),
                    MsgKind::DATA => PhaseKind::Data,
                    MsgKind::USER => PhaseKind::PointToPoint,
                    _ => PhaseKind::Control,
                };
                out.push(Phase {
                    kind,
                    start_ns: ev.t_ns,
                    end_ns: end,
                    messages: 1,
                    bytes: ev.len,
                });
            }
        }
        last = Some((ev.call, unit));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Header;
    use ferry_core::MsgKey;

    fn rec() -> Record {
        let ev = |dir, peer, kind, tag, len, call, t_ns| Event {
            dir,
            peer,
            key: MsgKey::new(0, kind, tag),
            len,
            call,
            call_ns: 10,
            t_ns,
        };
        Record {
            header: Header {
                rank: 0,
                size: 2,
                start_unix_ns: 0,
                backend: "tcp".into(),
            },
            events: vec![
                ev(Dir::Send, 1, MsgKind::USER, 0, 100, 0, 0),
                ev(Dir::Recv, 1, MsgKind::USER, 0, 50, 0, 0),
                ev(Dir::Send, 1, MsgKind::COLLECTIVE, 4 << 8, 8, 1, 20),
                ev(Dir::Recv, 1, MsgKind::COLLECTIVE, 4 << 8 | 1, 8, 2, 40),
                ev(Dir::Send, 1, MsgKind::DATA, 3, 1000, 3, 60),
            ],
            gaps: vec![],
            complete: true,
            end_ns: 70,
        }
    }

    #[test]
    fn totals_per_peer_kind_and_phases() {
        let r = rec();
        let s = summarize(&r);
        assert_eq!(
            s.sent,
            Count {
                messages: 3,
                bytes: 1108
            }
        );
        assert_eq!(
            s.received,
            Count {
                messages: 2,
                bytes: 58
            }
        );
        assert_eq!(s.sent_to[1].bytes, 1108);
        assert_eq!(
            s.by_kind["allreduce"],
            Count {
                messages: 2,
                bytes: 16
            }
        );
        assert_eq!(s.calls, 4);
        let p = phases(&r);
        let kinds: Vec<String> = p.iter().map(|p| p.kind.name()).collect();
        assert_eq!(kinds, ["point-to-point", "allreduce", "data"]);
        assert_eq!((p[1].start_ns, p[1].end_ns), (20, 50));
        assert_eq!(byte_matrix(std::slice::from_ref(&r))[0], vec![0]);
        let h = size_histogram(&[r]);
        assert_eq!(h.iter().map(|c| c.1).sum::<u64>(), 3);
        assert_eq!(h[4], (8, 1)); // 8 B in [8, 16)
    }
}
