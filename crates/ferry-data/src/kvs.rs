//! The key-value store of the data layer (D8): small named values every process of a group
//! agrees on after a collective [`KvStore::sync`].
//!
//! Each process changes its local copy freely ([`KvStore::set`], [`KvStore::remove`]); the
//! changes stay private until every member of the group calls `sync` (LAIK's `laik_kvs_sync`,
//! the backend `sync` hook of 001 §2.1.2). A sync exchanges the changes made since the previous
//! sync with one all-gather over `ferry-coll` and applies all of them on every process, so that
//! afterwards all members hold identical contents.
//!
//! Determinism, where LAIK leaves it open:
//! - entries are enumerated in ascending byte order of their keys (`"T0-v1"` before `"d-0"`
//!   before `"v1"`), on every process and backend;
//! - the changes of one sync are applied in group order (index 0 first), each process's own
//!   changes in the order it made them; so when several processes write the same key in the
//!   same round, **the member with the highest group index wins**, and a removal by a higher
//!   index beats a set by a lower one. A change that is older than the last sync never
//!   overrides a newer one.
//!
//! Bounded resources: keys, values, the number of entries and the bytes one process may
//! contribute to a sync are capped ([`KvsLimits`]); exceeding a cap is an error value naming
//! the key (or, for data received during a sync, the peer), the local contents stay unchanged.

use std::collections::BTreeMap;

use ferry_coll::Group;
use ferry_core::{Error, ErrorKind, Result, Transport};

/// Caps of one key-value store (bounded resources).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvsLimits {
    /// Longest key in bytes.
    pub max_key_bytes: usize,
    /// Longest value in bytes.
    pub max_value_bytes: usize,
    /// Most entries the store holds.
    pub max_entries: usize,
    /// Most bytes of encoded changes one process contributes to one sync.
    pub max_sync_bytes: usize,
}

impl Default for KvsLimits {
    fn default() -> Self {
        KvsLimits {
            max_key_bytes: 4096,
            max_value_bytes: 16 << 20,
            max_entries: 1 << 20,
            max_sync_bytes: 64 << 20,
        }
    }
}

/// One local change waiting for the next sync.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    Set(String, Vec<u8>),
    Remove(String),
}

/// What a sync did, for logs and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncReport {
    /// Changes received from all members (own included).
    pub changes_applied: usize,
    /// Times a key written by one member was overwritten by a later member in this round
    /// (resolved by group index, see the module docs).
    pub conflicts: usize,
}

/// A named key-value store replicated over the members of a group (D8).
#[derive(Debug, Clone)]
pub struct KvStore {
    name: String,
    entries: BTreeMap<String, Vec<u8>>,
    pending: Vec<Change>,
    pending_bytes: usize,
    limits: KvsLimits,
}

const OP_SET: u8 = 1;
const OP_REMOVE: u8 = 2;

impl KvStore {
    /// An empty store with default limits. The name only appears in error messages and logs.
    pub fn new(name: impl Into<String>) -> KvStore {
        KvStore::with_limits(name, KvsLimits::default())
    }

    /// An empty store with the given caps.
    pub fn with_limits(name: impl Into<String>, limits: KvsLimits) -> KvStore {
        KvStore {
            name: name.into(),
            entries: BTreeMap::new(),
            pending: Vec::new(),
            pending_bytes: 0,
            limits,
        }
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn check_key(&self, op: &'static str, key: &str) -> Result<()> {
        if key.len() > self.limits.max_key_bytes {
            return Err(
                Error::new(ErrorKind::ResourceExhausted, op).with_detail(format!(
                    "kvs `{}`: key of {} bytes exceeds the cap of {} bytes",
                    self.name,
                    key.len(),
                    self.limits.max_key_bytes
                )),
            );
        }
        Ok(())
    }

    fn reserve_pending(&mut self, op: &'static str, key: &str, bytes: usize) -> Result<()> {
        if self.pending_bytes + bytes > self.limits.max_sync_bytes {
            return Err(
                Error::new(ErrorKind::ResourceExhausted, op).with_detail(format!(
                    "kvs `{}`: changing `{key}` would exceed {} bytes of changes before the next \
                 sync",
                    self.name, self.limits.max_sync_bytes
                )),
            );
        }
        self.pending_bytes += bytes;
        Ok(())
    }

    /// Sets `key` to `value` locally; other members see it after the next [`KvStore::sync`].
    pub fn set(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.check_key("kvs set", key)?;
        if value.len() > self.limits.max_value_bytes {
            return Err(
                Error::new(ErrorKind::ResourceExhausted, "kvs set").with_detail(format!(
                    "kvs `{}`: value of `{key}` has {} bytes, cap is {}",
                    self.name,
                    value.len(),
                    self.limits.max_value_bytes
                )),
            );
        }
        if !self.entries.contains_key(key) && self.entries.len() >= self.limits.max_entries {
            return Err(
                Error::new(ErrorKind::ResourceExhausted, "kvs set").with_detail(format!(
                    "kvs `{}`: cannot add `{key}`, the store holds its cap of {} entries",
                    self.name, self.limits.max_entries
                )),
            );
        }
        self.reserve_pending("kvs set", key, encoded_len(key, value.len()))?;
        self.entries.insert(key.to_string(), value.to_vec());
        self.pending
            .push(Change::Set(key.to_string(), value.to_vec()));
        Ok(())
    }

    /// Removes `key` locally (and, after the next sync, everywhere). Returns whether it
    /// existed here.
    pub fn remove(&mut self, key: &str) -> Result<bool> {
        self.check_key("kvs remove", key)?;
        self.reserve_pending("kvs remove", key, encoded_len(key, 0))?;
        self.pending.push(Change::Remove(key.to_string()));
        Ok(self.entries.remove(key).is_some())
    }

    /// The value of `key` as this process sees it now.
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.entries.get(key).map(Vec::as_slice)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the store has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry at position `index` in ascending key order (LAIK's `laik_kvs_entry`).
    /// O(index); iterate with [`KvStore::iter`] to visit all.
    pub fn entry(&self, index: usize) -> Option<(&str, &[u8])> {
        self.iter().nth(index)
    }

    /// All entries in ascending byte order of the keys.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_slice()))
    }

    /// Whether local changes wait for a sync.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Makes every member's changes since the last sync visible to all members of `group`.
    ///
    /// Collective: every member of `group` must call it (in the same order relative to other
    /// collectives of the group). One all-gather of the encoded changes; they are applied in
    /// group order, so the highest group index wins conflicting writes (module docs). On error
    /// the store keeps its local contents and pending changes, so the call may be repeated
    /// once the cause is gone.
    pub fn sync(&mut self, t: &mut dyn Transport, group: &Group) -> Result<SyncReport> {
        let me = t.rank();
        let mut encoded = Vec::with_capacity(self.pending_bytes + 4);
        encoded.extend_from_slice(&(self.pending.len() as u32).to_le_bytes());
        for change in &self.pending {
            match change {
                Change::Set(k, v) => encode(&mut encoded, OP_SET, k, v),
                Change::Remove(k) => encode(&mut encoded, OP_REMOVE, k, &[]),
            }
        }
        let all = ferry_coll::allgather(t, group, &encoded)
            .map_err(|e| e.or_rank(me).context(format!("kvs `{}` sync", self.name)))?;
        if all.len() != group.size() {
            return Err(Error::new(ErrorKind::Protocol, "kvs sync")
                .on_rank(me)
                .with_detail(format!(
                    "kvs `{}`: all-gather returned {} contributions for a group of {}",
                    self.name,
                    all.len(),
                    group.size()
                )));
        }
        // Decode everything first: a malformed contribution must not leave half-applied state.
        let mut decoded = Vec::with_capacity(all.len());
        for (index, bytes) in all.iter().enumerate() {
            let peer = group.member(index);
            let changes = decode(bytes, &self.limits).map_err(|why| {
                Error::new(ErrorKind::Protocol, "kvs sync")
                    .on_rank(me)
                    .with_peer(peer)
                    .with_detail(format!("kvs `{}`: bad change list: {why}", self.name))
            })?;
            decoded.push(changes);
        }
        let mut next = self.entries.clone();
        let mut writers: BTreeMap<&str, usize> = BTreeMap::new();
        let mut report = SyncReport::default();
        for (index, changes) in decoded.iter().enumerate() {
            for change in changes {
                let key = match change {
                    Change::Set(k, v) => {
                        next.insert(k.clone(), v.clone());
                        k.as_str()
                    }
                    Change::Remove(k) => {
                        next.remove(k);
                        k.as_str()
                    }
                };
                let last = writers.entry(key).or_insert(index);
                if *last != index {
                    report.conflicts += 1;
                    *last = index;
                }
                report.changes_applied += 1;
            }
        }
        if next.len() > self.limits.max_entries {
            return Err(Error::new(ErrorKind::ResourceExhausted, "kvs sync")
                .on_rank(me)
                .with_detail(format!(
                    "kvs `{}`: merged store would hold {} entries, cap is {}",
                    self.name,
                    next.len(),
                    self.limits.max_entries
                )));
        }
        tracing::debug!(
            rank = me,
            kvs = %self.name,
            applied = report.changes_applied,
            conflicts = report.conflicts,
            entries = next.len(),
            "kvs sync"
        );
        self.entries = next;
        self.pending.clear();
        self.pending_bytes = 0;
        Ok(report)
    }
}

fn encoded_len(key: &str, value_len: usize) -> usize {
    1 + 4 + key.len() + 4 + value_len
}

fn encode(out: &mut Vec<u8>, op: u8, key: &str, value: &[u8]) {
    out.push(op);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
}

/// Decodes one member's change list, checking every length against the caps.
fn decode(bytes: &[u8], limits: &KvsLimits) -> std::result::Result<Vec<Change>, String> {
    if bytes.len() > limits.max_sync_bytes + 4 {
        return Err(format!(
            "{} bytes exceed the cap of {} bytes",
            bytes.len(),
            limits.max_sync_bytes
        ));
    }
    let mut rest = bytes;
    let count = take_u32(&mut rest)? as usize;
    // Every change takes at least 9 bytes: a count that cannot fit is corrupt.
    if count > rest.len() / 9 {
        return Err(format!(
            "{count} changes cannot fit in {} bytes",
            rest.len()
        ));
    }
    let mut changes = Vec::with_capacity(count);
    for i in 0..count {
        let op = *rest
            .first()
            .ok_or_else(|| format!("change {i}: truncated"))?;
        rest = &rest[1..];
        let klen = take_u32(&mut rest)? as usize;
        if klen > limits.max_key_bytes {
            return Err(format!("change {i}: key of {klen} bytes exceeds the cap"));
        }
        let key = take(&mut rest, klen)?;
        let key = std::str::from_utf8(key)
            .map_err(|_| format!("change {i}: key is not UTF-8"))?
            .to_string();
        let vlen = take_u32(&mut rest)? as usize;
        if vlen > limits.max_value_bytes {
            return Err(format!("change {i}: value of {vlen} bytes exceeds the cap"));
        }
        let value = take(&mut rest, vlen)?;
        changes.push(match op {
            OP_SET => Change::Set(key, value.to_vec()),
            OP_REMOVE if vlen == 0 => Change::Remove(key),
            _ => return Err(format!("change {i}: unknown operation {op}")),
        });
    }
    if !rest.is_empty() {
        return Err(format!("{} trailing bytes", rest.len()));
    }
    Ok(changes)
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> std::result::Result<&'a [u8], String> {
    if rest.len() < n {
        return Err(format!("truncated: need {n} bytes, have {}", rest.len()));
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

fn take_u32(rest: &mut &[u8]) -> std::result::Result<u32, String> {
    let b = take(rest, 4)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::mem::MemTransport;
    use proptest::prelude::*;

    #[test]
    fn sync_merges_all_ranks_in_key_order() {
        let out = MemTransport::run(4, |mut t| {
            let g = Group::world(4);
            let r = t.rank();
            let mut kvs = KvStore::new("test");
            kvs.set("v1", b"1\0").unwrap();
            if r == 0 {
                kvs.set("v2", b"2\0").unwrap();
            }
            kvs.set(&format!("d-{r}"), format!("from {r}\0").as_bytes())
                .unwrap();
            kvs.sync(&mut t, &g).unwrap();
            let seen: Vec<(String, Vec<u8>)> = kvs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_vec()))
                .collect();
            for (k, v) in seen {
                kvs.set(&format!("T{r}-{k}"), &v).unwrap();
            }
            kvs.sync(&mut t, &g).unwrap();
            kvs.iter()
                .map(|(k, v)| (k.to_string(), v.to_vec()))
                .collect::<Vec<_>>()
        });
        assert_eq!(out[0].len(), 30);
        for o in &out {
            assert_eq!(o, &out[0], "every rank sees the same entries");
        }
        let keys: Vec<&str> = out[0].iter().map(|(k, _)| k.as_str()).collect();
        let mut sorted = keys.clone();
        sorted.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        assert_eq!(keys, sorted);
        assert_eq!(keys[0], "T0-d-0");
        assert_eq!(keys[29], "v2");
    }

    #[test]
    fn highest_group_index_wins_and_removal_propagates() {
        let out = MemTransport::run(3, |mut t| {
            let g = Group::world(3);
            let r = t.rank();
            let mut kvs = KvStore::new("conflict");
            kvs.set("k", format!("{r}").as_bytes()).unwrap();
            kvs.set("gone", b"x").unwrap();
            let rep = kvs.sync(&mut t, &g).unwrap();
            assert_eq!(rep.changes_applied, 6);
            assert_eq!(rep.conflicts, 4);
            let k = kvs.get("k").unwrap().to_vec();
            if r == 0 {
                assert!(kvs.remove("gone").unwrap());
            }
            kvs.sync(&mut t, &g).unwrap();
            (k, kvs.get("gone").is_none(), kvs.len())
        });
        for o in out {
            assert_eq!(o, (b"2".to_vec(), true, 1));
        }
    }

    #[test]
    fn sync_on_a_subgroup_only_involves_its_members() {
        let out = MemTransport::run(3, |mut t| {
            let r = t.rank();
            let mut kvs = KvStore::new("sub");
            kvs.set(&format!("k{r}"), b"v").unwrap();
            if r != 1 {
                let g = Group::new(vec![0, 2], 7).unwrap();
                kvs.sync(&mut t, &g).unwrap();
            }
            kvs.len()
        });
        assert_eq!(out, vec![2, 1, 2]);
    }

    #[test]
    fn caps_are_errors_not_panics() {
        let limits = KvsLimits {
            max_key_bytes: 4,
            max_value_bytes: 4,
            max_entries: 2,
            max_sync_bytes: 64,
        };
        let mut kvs = KvStore::with_limits("small", limits);
        assert_eq!(
            kvs.set("longkey", b"v").unwrap_err().kind(),
            ErrorKind::ResourceExhausted
        );
        assert!(kvs.set("k", b"too long").is_err());
        kvs.set("a", b"1").unwrap();
        kvs.set("b", b"1").unwrap();
        let e = kvs.set("c", b"1").unwrap_err();
        assert!(e.to_string().contains("`c`"), "{e}");
        kvs.set("a", b"2").unwrap(); // replacing an entry is fine at the cap
        assert_eq!(kvs.get("a"), Some(&b"2"[..]));
    }

    #[test]
    fn malformed_contributions_are_rejected() {
        let l = KvsLimits::default();
        assert!(decode(&[], &l).is_err());
        assert!(decode(&[1, 0, 0, 0], &l).is_err());
        assert!(decode(&[0xff, 0xff, 0xff, 0xff], &l).is_err());
        let mut ok = 1u32.to_le_bytes().to_vec();
        encode(&mut ok, OP_SET, "k", b"v");
        assert_eq!(
            decode(&ok, &l).unwrap(),
            vec![Change::Set("k".into(), b"v".to_vec())]
        );
        let mut bad_op = ok.clone();
        bad_op[4] = 9;
        assert!(decode(&bad_op, &l).is_err());
        let mut trailing = ok.clone();
        trailing.push(0);
        assert!(decode(&trailing, &l).is_err());
    }

    proptest! {
        #[test]
        fn encoding_round_trips(changes in proptest::collection::vec(
            (any::<bool>(), "[a-zA-Z0-9_-]{0,12}", proptest::collection::vec(any::<u8>(), 0..40)),
            0..20)) {
            let mut out = (changes.len() as u32).to_le_bytes().to_vec();
            let mut want = Vec::new();
            for (set, k, v) in &changes {
                if *set {
                    encode(&mut out, OP_SET, k, v);
                    want.push(Change::Set(k.clone(), v.clone()));
                } else {
                    encode(&mut out, OP_REMOVE, k, &[]);
                    want.push(Change::Remove(k.clone()));
                }
            }
            prop_assert_eq!(decode(&out, &KvsLimits::default()).unwrap(), want);
            // Any truncation is detected.
            if out.len() > 4 {
                prop_assert!(decode(&out[..out.len() - 1], &KvsLimits::default()).is_err());
            }
        }
    }
}
