//! The comparison rules, shared by the online check (`FERRY_MONITOR=check:`) and the offline
//! `ferry monitor diff`: a run is compared with a recording per *flow*, so that legitimate
//! interleaving across peers and kinds is never a deviation, and within a flow with a bounded
//! re-alignment, so that one inserted or missing message is one deviation, not a cascade.
//!
//! # Flows and items
//! Point-to-point, data-layer and control messages are items of the flow (direction, peer,
//! generation, kind, tag) and are compared by length. Collectives are compared as the program
//! called them ([`CollectiveMode::Calls`], the default): each collective call is one item of
//! the flow "collectives of generation G", compared by which collective it is. The messages
//! *inside* a collective depend on the algorithm, and the algorithm may depend on the backend
//! (shm picks the ring for large 2-rank allreduces, a hybrid job with several nodes the
//! node-aware variants), so comparing them would make a recording on one backend fail on
//! another. [`CollectiveMode::Messages`] compares them message by message instead, for runs
//! on the same backend.
//!
//! # Re-alignment
//! Each flow keeps the recorded items and the index of the next expected one. An observed item
//! that matches it advances the flow. One that does not is compared with the next `window`
//! expected items: a match there means the ones before it are *missing*. Otherwise the
//! decision waits for the flow's next observed item: if that one matches the expected item,
//! the first was *inserted*; if it matches the item after, the first was a *length* deviation
//! of the expected one. At the end, expected items never seen are *missing* (the tail of a
//! shorter run) and observed items left over are *inserted*.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

use ferry_core::{MsgKey, MsgKind};

use crate::format::{kind_name, Collective, Dir, Event};

/// How collectives are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CollectiveMode {
    /// One item per collective call, compared by collective (backend-independent).
    #[default]
    Calls,
    /// Every message of a collective, compared like point-to-point messages (same backend
    /// and algorithms only).
    Messages,
}

/// Tolerances and re-alignment settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rules {
    /// Lengths may differ by this many bytes.
    pub len_abs: u64,
    /// Lengths may differ by this fraction of the recorded length.
    pub len_rel: f64,
    /// Deviations at the last `ignore_last` positions of the recording are not counted.
    pub ignore_last: u64,
    /// How many expected items ahead an observed item is looked for.
    pub window: usize,
    /// How collectives are compared.
    pub collectives: CollectiveMode,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            len_abs: 0,
            len_rel: 0.0,
            ignore_last: 0,
            window: 64,
            collectives: CollectiveMode::Calls,
        }
    }
}

/// A flow: what its items have in common.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Flow {
    /// Messages in one direction with one peer and one key.
    Messages {
        /// Sent or received.
        dir: Dir,
        /// The other rank.
        peer: u32,
        /// Generation, kind and tag.
        key: MsgKey,
    },
    /// Collective calls of one communicator generation.
    Collectives {
        /// The generation.
        generation: u32,
    },
}

/// One comparable unit: a message, or a collective call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    /// Position in its record: index of the (first) message.
    pub pos: u64,
    /// Flow it belongs to.
    pub flow: Flow,
    /// Length of a message; 0 for a collective call.
    pub len: u64,
    /// The collective of a collective call.
    pub collective: Option<Collective>,
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.flow {
            Flow::Messages { dir, peer, key } => {
                let (verb, prep) = match dir {
                    Dir::Send => ("send", "to"),
                    Dir::Recv => ("recv", "from"),
                };
                write!(
                    f,
                    "{verb} {prep} rank {peer} ({} gen {} tag {:#x}) of {} B",
                    kind_name(key.kind),
                    key.generation,
                    key.tag,
                    self.len
                )
            }
            Flow::Collectives { generation } => {
                let name = self
                    .collective
                    .map_or_else(|| "collective".into(), |c| c.name());
                write!(f, "{name} (gen {generation})")
            }
        }
    }
}

/// Turns a message sequence into items: messages of the flows compared one by one, and one
/// item per collective call (a call is recognised by its tag: every message of one call
/// carries `sequence << 16 | collective << 8` plus a phase, consecutive calls of a group
/// differ in the sequence).
#[derive(Debug, Default)]
pub struct Itemizer {
    mode: CollectiveMode,
    open_call: Option<(u32, u32)>,
}

impl Itemizer {
    /// An itemizer for `mode`.
    pub fn new(mode: CollectiveMode) -> Itemizer {
        Itemizer {
            mode,
            open_call: None,
        }
    }

    /// The item `ev` (at position `pos`) starts, if any: messages after the first of a
    /// collective call belong to that call's item.
    #[inline]
    pub fn item(&mut self, pos: u64, ev: &Event) -> Option<Item> {
        if ev.key.kind == MsgKind::COLLECTIVE && self.mode == CollectiveMode::Calls {
            let call = (ev.key.generation, ev.key.tag >> 8);
            if self.open_call == Some(call) {
                return None;
            }
            self.open_call = Some(call);
            return Some(Item {
                pos,
                flow: Flow::Collectives {
                    generation: ev.key.generation,
                },
                len: 0,
                collective: ev.collective(),
            });
        }
        Some(Item {
            pos,
            flow: Flow::Messages {
                dir: ev.dir,
                peer: ev.peer,
                key: ev.key,
            },
            len: ev.len,
            collective: None,
        })
    }
}

/// What kind of deviation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviationKind {
    /// The run has an item the recording does not.
    Inserted,
    /// The recording has an item the run does not.
    Missing,
    /// The item is there but its length (or collective) differs beyond the tolerance.
    Length,
}

impl DeviationKind {
    /// `inserted`, `missing` or `length`.
    pub fn name(self) -> &'static str {
        match self {
            DeviationKind::Inserted => "inserted",
            DeviationKind::Missing => "missing",
            DeviationKind::Length => "length",
        }
    }
}

/// One deviation of a run from its recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deviation {
    /// The rank.
    pub rank: usize,
    /// Inserted, missing or a different length.
    pub kind: DeviationKind,
    /// Position in the recording: the expected item's, or for an insertion the position of
    /// the expected item it came before (the recording's length at its end).
    pub ref_pos: u64,
    /// Position in the run: the observed item's, or for a missing item the position of the
    /// observed item it should have come before (the run's length at its end).
    pub run_pos: u64,
    /// The recorded item.
    pub expected: Option<Item>,
    /// The observed item.
    pub got: Option<Item>,
}

impl fmt::Display for Deviation {
    /// `rank R: <kind> at ref #I, run #J: expected ..., got ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {}: {} at ref #{}, run #{}: expected ",
            self.rank,
            self.kind.name(),
            self.ref_pos,
            self.run_pos
        )?;
        match &self.expected {
            Some(i) => write!(f, "{i}")?,
            None => f.write_str("nothing")?,
        }
        f.write_str(", got ")?;
        match &self.got {
            Some(i) => write!(f, "{i}"),
            None => f.write_str("nothing"),
        }
    }
}

/// The hash of the flow table, looked up once per message of a checked run: a multiply and a
/// rotate per field instead of SipHash, which made up a fifth of the check's cost per message.
/// Flows come from the program's own messages, so no adversary picks colliding keys.
#[derive(Default)]
struct FlowHasher(u64);

impl FlowHasher {
    #[inline]
    fn add(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FlowHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(u64::from(b));
        }
    }
    #[inline]
    fn write_u8(&mut self, x: u8) {
        self.add(u64::from(x));
    }
    #[inline]
    fn write_u16(&mut self, x: u16) {
        self.add(u64::from(x));
    }
    #[inline]
    fn write_u32(&mut self, x: u32) {
        self.add(u64::from(x));
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.add(x);
    }
    #[inline]
    fn write_usize(&mut self, x: usize) {
        self.add(x as u64);
    }
}

type FlowMap<V> = HashMap<Flow, V, BuildHasherDefault<FlowHasher>>;

/// The recorded items of one flow and how far the run got.
#[derive(Debug)]
struct FlowState {
    expected: Vec<Item>,
    next: usize,
    pending: VecDeque<Item>,
}

/// Compares one rank's run with its recording, item by item as the run produces them.
#[derive(Debug)]
pub struct Aligner {
    rank: usize,
    rules: Rules,
    flows: FlowMap<FlowState>,
    ref_len: u64,
    run_len: u64,
}

impl Aligner {
    /// An aligner for `rank` against the recorded messages `reference`.
    pub fn new(rank: usize, reference: &[Event], rules: Rules) -> Aligner {
        let mut flows: FlowMap<FlowState> = FlowMap::default();
        let mut items = Itemizer::new(rules.collectives);
        for (pos, ev) in reference.iter().enumerate() {
            if let Some(item) = items.item(pos as u64, ev) {
                flows
                    .entry(item.flow)
                    .or_insert_with(|| FlowState {
                        expected: Vec::new(),
                        next: 0,
                        pending: VecDeque::new(),
                    })
                    .expected
                    .push(item);
            }
        }
        Aligner {
            rank,
            rules,
            flows,
            ref_len: reference.len() as u64,
            run_len: 0,
        }
    }

    /// Notes that the run has produced `n` messages so far (positions of end-of-run
    /// deviations).
    pub fn set_run_len(&mut self, n: u64) {
        self.run_len = n;
    }

    /// Compares one observed item; deviations it settles are appended to `out`.
    #[inline]
    pub fn observe(&mut self, item: Item, out: &mut Vec<Deviation>) {
        self.run_len = self.run_len.max(item.pos + 1);
        let Some(state) = self.flows.get_mut(&item.flow) else {
            // A flow the recording never had: inserted, with no place in the recording.
            out.push(self.deviation(DeviationKind::Inserted, self.ref_len, None, Some(item)));
            return;
        };
        if state.pending.is_empty() {
            if let Some(e) = state.expected.get(state.next) {
                if matches(&self.rules, e, &item) {
                    state.next += 1;
                    return;
                }
            }
        }
        state.pending.push_back(item);
        let (rank, rules, ref_len) = (self.rank, self.rules, self.ref_len);
        resolve(rank, &rules, ref_len, state, false, out);
    }

    /// The end of the run: every flow's unmatched expected items are missing, its unmatched
    /// observed items inserted.
    pub fn finish(&mut self, out: &mut Vec<Deviation>) {
        let (rank, rules, ref_len, run_len) = (self.rank, self.rules, self.ref_len, self.run_len);
        let mut flows: Vec<_> = self.flows.iter_mut().collect();
        flows.sort_by_key(|(f, _)| **f);
        let start = out.len();
        for (_, state) in flows {
            resolve(rank, &rules, ref_len, state, true, out);
            while let Some(e) = state.expected.get(state.next) {
                out.push(Deviation {
                    rank,
                    kind: DeviationKind::Missing,
                    ref_pos: e.pos,
                    run_pos: run_len,
                    expected: Some(*e),
                    got: None,
                });
                state.next += 1;
            }
        }
        out[start..].sort_by_key(|d| (d.ref_pos, d.run_pos));
    }

    /// Whether `d` falls into the ignored last positions of the recording.
    pub fn ignored(&self, d: &Deviation) -> bool {
        self.rules.ignore_last > 0
            && d.ref_pos.saturating_add(self.rules.ignore_last) >= self.ref_len
    }

    fn deviation(
        &self,
        kind: DeviationKind,
        ref_pos: u64,
        expected: Option<Item>,
        got: Option<Item>,
    ) -> Deviation {
        Deviation {
            rank: self.rank,
            kind,
            ref_pos,
            run_pos: got.map_or(self.run_len, |g| g.pos),
            expected,
            got,
        }
    }
}

fn matches(rules: &Rules, expected: &Item, got: &Item) -> bool {
    if expected.collective != got.collective {
        return false;
    }
    let diff = expected.len.abs_diff(got.len);
    diff == 0 || diff <= rules.len_abs || (diff as f64) <= rules.len_rel * expected.len as f64
}

/// Settles the pending observed items of one flow as far as possible (all of them at the end).
fn resolve(
    rank: usize,
    rules: &Rules,
    ref_len: u64,
    s: &mut FlowState,
    at_end: bool,
    out: &mut Vec<Deviation>,
) {
    while let Some(&o) = s.pending.front() {
        let exp = &s.expected;
        if exp.get(s.next).is_some_and(|e| matches(rules, e, &o)) {
            s.next += 1;
            s.pending.pop_front();
            continue;
        }
        // Expected items skipped by the run: `o` matches one a little further on.
        let ahead = (1..=rules.window)
            .take_while(|k| s.next + k < exp.len())
            .find(|k| matches(rules, &exp[s.next + k], &o));
        if let Some(k) = ahead {
            for e in &exp[s.next..s.next + k] {
                out.push(Deviation {
                    rank,
                    kind: DeviationKind::Missing,
                    ref_pos: e.pos,
                    run_pos: o.pos,
                    expected: Some(*e),
                    got: None,
                });
            }
            s.next += k + 1;
            s.pending.pop_front();
            continue;
        }
        // Inserted, or the expected item with another length: later observations decide.
        let decided = decide(rules, exp, s.next, &s.pending, at_end);
        let Some(mut kind) = decided else {
            return;
        };
        let expected = exp.get(s.next).copied();
        if expected.is_none() {
            kind = DeviationKind::Inserted;
        }
        match kind {
            DeviationKind::Inserted => out.push(Deviation {
                rank,
                kind,
                // Before the expected item, or after the flow's last one.
                ref_pos: expected.map_or_else(
                    || {
                        s.next
                            .checked_sub(1)
                            .and_then(|i| exp.get(i))
                            .map_or(ref_len, |e| e.pos + 1)
                    },
                    |e| e.pos,
                ),
                run_pos: o.pos,
                expected: None,
                got: Some(o),
            }),
            _ => {
                out.push(Deviation {
                    rank,
                    kind,
                    ref_pos: expected.map_or(ref_len, |e| e.pos),
                    run_pos: o.pos,
                    expected,
                    got: Some(o),
                });
                s.next += 1;
            }
        }
        s.pending.pop_front();
    }
}

/// Whether the first pending item `pending[0]` (which matches neither the expected item nor
/// one shortly after it) was inserted or replaces the expected item with another length:
/// the hypothesis under which more of the following observations line up wins; when both
/// explain everything seen so far the decision waits (up to `window` pending items), and at
/// the end the one that leaves the shorter unmatched tail wins. `None`: wait.
fn decide(
    rules: &Rules,
    exp: &[Item],
    next: usize,
    pending: &VecDeque<Item>,
    at_end: bool,
) -> Option<DeviationKind> {
    let m = pending.len();
    if m < 2 {
        return at_end.then_some(DeviationKind::Length);
    }
    let lined_up = |start: usize| {
        pending
            .iter()
            .skip(1)
            .enumerate()
            .take_while(|(i, o)| exp.get(start + i).is_some_and(|e| matches(rules, e, o)))
            .count()
    };
    let (ins, sub) = (lined_up(next), lined_up(next + 1));
    if ins != sub {
        return Some(if ins > sub {
            DeviationKind::Inserted
        } else {
            DeviationKind::Length
        });
    }
    if ins == m - 1 {
        if at_end {
            let left_ins = exp.len() as i64 - (next + m - 1) as i64;
            return Some(if (left_ins - 1).abs() < left_ins.abs() {
                DeviationKind::Length
            } else {
                DeviationKind::Inserted
            });
        }
        if m <= rules.window {
            return None;
        }
    }
    // Both fail at the same place, or the window is full: the item right after decides,
    // exact matches first so that a length tolerance does not make a changed length look
    // like an insertion.
    let o2 = &pending[1];
    let exact = Rules {
        len_abs: 0,
        len_rel: 0.0,
        ..*rules
    };
    let fits = |r: &Rules, at: usize| exp.get(at).is_some_and(|e| matches(r, e, o2));
    if fits(&exact, next) {
        Some(DeviationKind::Inserted)
    } else if fits(&exact, next + 1) || !fits(rules, next) {
        Some(DeviationKind::Length)
    } else {
        Some(DeviationKind::Inserted)
    }
}

/// Compares a whole run of one rank with its recording (the offline `ferry monitor diff`):
/// the deviations, not counting those in the ignored last positions.
pub fn diff_rank(rank: usize, reference: &[Event], run: &[Event], rules: Rules) -> Vec<Deviation> {
    let mut a = Aligner::new(rank, reference, rules);
    let mut items = Itemizer::new(rules.collectives);
    let mut out = Vec::new();
    for (pos, ev) in run.iter().enumerate() {
        if let Some(item) = items.item(pos as u64, ev) {
            a.observe(item, &mut out);
        }
    }
    a.set_run_len(run.len() as u64);
    a.finish(&mut out);
    out.retain(|d| !a.ignored(d));
    out.sort_by_key(|d| (d.ref_pos, d.run_pos));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(dir: Dir, peer: u32, tag: u32, len: u64) -> Event {
        Event {
            dir,
            peer,
            key: MsgKey::new(0, MsgKind::USER, tag),
            len,
            call: 0,
            call_ns: 0,
            t_ns: 0,
        }
    }

    fn coll(coll: u32, seq: u32, phase: u32, len: u64) -> Event {
        Event {
            dir: Dir::Send,
            peer: 1,
            key: MsgKey::new(0, MsgKind::COLLECTIVE, seq << 16 | coll << 8 | phase),
            len,
            call: 0,
            call_ns: 0,
            t_ns: 0,
        }
    }

    /// 20 iterations of: send to 1 (length 100 + i), receive from 1 (64), allreduce.
    fn program(iters: u32, insert_at: Option<u32>) -> Vec<Event> {
        let mut v = Vec::new();
        for i in 0..iters {
            v.push(ev(Dir::Send, 1, 0, 100 + u64::from(i)));
            if insert_at == Some(i) {
                v.push(ev(Dir::Send, 1, 0, 5000));
            }
            v.push(ev(Dir::Recv, 1, 0, 64));
            v.push(coll(4, i % 256, 0, 8));
            v.push(coll(4, i % 256, 1, 8));
        }
        v.push(ev(Dir::Send, 0, 7, 4000)); // a final gather-like message
        v
    }

    #[test]
    fn the_same_run_has_no_deviation() {
        let r = program(20, None);
        assert!(diff_rank(0, &r, &r, Rules::default()).is_empty());
    }

    #[test]
    fn one_inserted_message_is_one_deviation_not_a_cascade() {
        let d = diff_rank(
            0,
            &program(20, None),
            &program(20, Some(9)),
            Rules::default(),
        );
        assert_eq!(d.len(), 1, "{d:#?}");
        assert_eq!(d[0].kind, DeviationKind::Inserted);
        assert_eq!(d[0].got.unwrap().len, 5000);
        // Before iteration 10's send (4 messages per iteration).
        assert_eq!(d[0].ref_pos, 40);
        assert_eq!(d[0].run_pos, 37);
    }

    #[test]
    fn a_shorter_run_misses_exactly_the_missing_iterations_at_their_place() {
        let d = diff_rank(0, &program(20, None), &program(15, None), Rules::default());
        // 5 iterations: a send, a receive and an allreduce call each.
        assert_eq!(d.len(), 15, "{d:#?}");
        assert!(d.iter().all(|d| d.kind == DeviationKind::Missing));
        assert!(d.iter().all(|d| (60..80).contains(&d.ref_pos)), "{d:#?}");
        // The final message matched: nothing about it.
        assert!(d.iter().all(|d| d.expected.unwrap().len != 4000));
    }

    #[test]
    fn a_changed_length_is_one_length_deviation() {
        let mut run = program(20, None);
        run[8].len = 9999;
        let d = diff_rank(0, &program(20, None), &run, Rules::default());
        assert_eq!(d.len(), 1, "{d:#?}");
        assert_eq!(d[0].kind, DeviationKind::Length);
        assert_eq!(d[0].ref_pos, 8);
        let tolerant = Rules {
            len_abs: 10_000,
            ..Rules::default()
        };
        assert!(diff_rank(0, &program(20, None), &run, tolerant).is_empty());
        let relative = Rules {
            len_rel: 0.5,
            ..Rules::default()
        };
        assert_eq!(diff_rank(0, &program(20, None), &run, relative).len(), 1);
    }

    #[test]
    fn interleaving_across_flows_is_not_a_deviation() {
        let r = program(20, None);
        let mut run = r.clone();
        run.swap(0, 1); // receive before send
        assert!(diff_rank(0, &r, &run, Rules::default()).is_empty());
    }

    #[test]
    fn collectives_compare_as_calls_whatever_their_messages() {
        let r = program(3, None);
        // Same calls, another algorithm: three messages per call of other lengths.
        let run: Vec<Event> = r
            .iter()
            .flat_map(|e| {
                if e.key.kind == MsgKind::COLLECTIVE {
                    if e.key.tag & 0xff == 0 {
                        let c = e.key.tag;
                        vec![
                            coll(4, c >> 16, 0, 3),
                            coll(4, c >> 16, 2, 5),
                            coll(4, c >> 16, 3, 5),
                        ]
                    } else {
                        vec![]
                    }
                } else {
                    vec![*e]
                }
            })
            .collect();
        assert!(diff_rank(0, &r, &run, Rules::default()).is_empty());
        let per_message = Rules {
            collectives: CollectiveMode::Messages,
            ..Rules::default()
        };
        assert!(!diff_rank(0, &r, &run, per_message).is_empty());
        // Another collective is a deviation.
        let mut other = r.clone();
        other[2].key.tag = 5 << 8;
        other[3].key.tag = 5 << 8 | 1;
        let d = diff_rank(0, &r, &other, Rules::default());
        assert_eq!(d.len(), 1, "{d:#?}");
    }

    #[test]
    fn ignore_last_drops_deviations_at_the_end_of_the_recording() {
        let r = program(20, None);
        let mut run = r.clone();
        let last = run.len() - 1;
        run[last].len = 1;
        assert_eq!(diff_rank(0, &r, &run, Rules::default()).len(), 1);
        let rules = Rules {
            ignore_last: 1,
            ..Rules::default()
        };
        assert!(diff_rank(0, &r, &run, rules).is_empty());
    }

    /// A flow whose messages all have one length (a halo): what tells an insertion of
    /// another length from a changed length is the rest of the flow.
    fn uniform(n: usize, change: Option<(usize, u64)>, insert: Option<(usize, u64)>) -> Vec<Event> {
        let mut v: Vec<Event> = (0..n).map(|_| ev(Dir::Send, 1, 0, 800)).collect();
        if let Some((at, len)) = change {
            v[at].len = len;
        }
        if let Some((at, len)) = insert {
            v.insert(at, ev(Dir::Send, 1, 0, len));
        }
        v.push(ev(Dir::Recv, 2, 9, 4)); // another flow after it
        v
    }

    #[test]
    fn in_a_uniform_flow_an_insertion_and_a_changed_length_are_one_deviation_each() {
        let reference = uniform(30, None, None);
        let d = diff_rank(
            0,
            &reference,
            &uniform(30, None, Some((12, 5))),
            Rules::default(),
        );
        assert_eq!(d.len(), 1, "{d:#?}");
        assert_eq!(
            (d[0].kind, d[0].ref_pos, d[0].run_pos),
            (DeviationKind::Inserted, 12, 12)
        );
        let d = diff_rank(
            0,
            &reference,
            &uniform(30, Some((12, 5)), None),
            Rules::default(),
        );
        assert_eq!(d.len(), 1, "{d:#?}");
        assert_eq!((d[0].kind, d[0].ref_pos), (DeviationKind::Length, 12));
        // More messages after it than the window: decided by the message right after it.
        let small = Rules {
            window: 4,
            ..Rules::default()
        };
        let d = diff_rank(0, &reference, &uniform(30, None, Some((12, 5))), small);
        assert_eq!(d.len(), 1, "{d:#?}");
        assert_eq!(d[0].kind, DeviationKind::Inserted);
    }

    #[test]
    fn deviation_lines_have_the_documented_form() {
        let d = diff_rank(0, &program(2, None), &program(1, None), Rules::default());
        let line = d[0].to_string();
        assert!(line.starts_with("rank 0: missing at ref #4, run #5: expected send to rank 1 (user gen 0 tag 0x0) of 101 B, got nothing"), "{line}");
    }
}
