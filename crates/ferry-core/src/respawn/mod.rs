//! The contract between `ferry run --respawn K` and the ranks of a REBUILD job (F3, issue 08):
//! the variables the launcher sets, the keys of its store through which survivors, launcher
//! and replacement processes meet, and the store view a rebuilt transport bootstraps through.
//!
//! A rebuild is an *epoch*: epoch 0 is the job as started; each rebuild that replaces failed
//! ranks is the next one. The survivors of epoch `e - 1` agree on the failed ranks, write the
//! record of epoch `e` ([`epoch_key`], an [`EpochRecord`]), wait until the launcher has restarted
//! every replaced rank ([`respawn_key`]) and bootstrap a new transport with the replacements,
//! through the keys under [`epoch_prefix`] and with the job id [`epoch_job`]. A replacement
//! (started with [`INCARNATION_VAR`]) finds its epoch by reading the records in order. A
//! member that dies while an epoch starts makes the launcher call that epoch off and record
//! the next one in its place ([`boot`]).

use std::sync::Arc;
use std::time::Duration;

pub mod boot;

use crate::error::{Error, ErrorKind, Result};
use crate::store::Store;

/// Set by `ferry run --respawn K` for every rank: how many replacements the job may get.
pub const RESPAWN_VAR: &str = "FERRY_RESPAWN";
/// Set by the launcher for a replacement process: it is the `i`-th replacement of its rank
/// (absent or 0: an original process).
pub const INCARNATION_VAR: &str = "FERRY_INCARNATION";

/// Key of the launcher's process table (`ferry ctl NAME status`): one line per process,
/// `L<id>:<host>:<pid> rank <r> <state>`, state `running` while it runs.
pub const LAUNCHER_STATUS_KEY: &str = "launcher/status";

/// Key the launcher writes when it handles the failure of incarnation `incarnation - 1` of
/// `rank`: a value starting with `started` (the replacement runs) or `refused: <why>`.
pub fn respawn_key(rank: usize, incarnation: u32) -> String {
    format!("respawn/{rank}/{incarnation}")
}

/// Key of the record of rebuild epoch `epoch` (1, 2, ...).
pub fn epoch_key(epoch: u64) -> String {
    format!("rebuild/{epoch}")
}

/// Prefix of the bootstrap keys of the transports of epoch `epoch`.
pub fn epoch_prefix(epoch: u64) -> String {
    format!("e{epoch}/")
}

/// Job id of the transports of epoch `epoch` of job `job` (it names shared-memory segments).
pub fn epoch_job(job: &str, epoch: u64) -> String {
    format!("{job}.e{epoch}")
}

/// Whether the launcher value of [`respawn_key`] says the replacement was started.
pub fn respawn_started(value: &[u8]) -> bool {
    value.starts_with(b"started")
}

/// What the survivors decided for one rebuild.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochRecord {
    /// The epoch (1 for the first rebuild).
    pub epoch: u64,
    /// Communicator generation of the rebuilt communicator.
    pub generation: u32,
    /// World ranks replaced by new processes, sorted.
    pub replaced: Vec<usize>,
}

impl EpochRecord {
    /// `generation=G replaced=a,b`.
    pub fn encode(&self) -> Vec<u8> {
        let list: Vec<String> = self.replaced.iter().map(|r| r.to_string()).collect();
        format!("generation={} replaced={}", self.generation, list.join(",")).into_bytes()
    }

    /// The record of `epoch` from its stored value.
    pub fn decode(epoch: u64, value: &[u8]) -> Result<EpochRecord> {
        let text = String::from_utf8_lossy(value);
        let bad = || {
            Error::new(ErrorKind::Protocol, "rebuild").with_detail(format!(
                "the record of rebuild epoch {epoch} is malformed: `{text}`"
            ))
        };
        let mut generation = None;
        let mut replaced = None;
        for field in text.split_whitespace() {
            if let Some(g) = field.strip_prefix("generation=") {
                generation = Some(g.parse::<u32>().map_err(|_| bad())?);
            } else if let Some(list) = field.strip_prefix("replaced=") {
                let ranks: std::result::Result<Vec<usize>, _> = list
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::parse)
                    .collect();
                replaced = Some(ranks.map_err(|_| bad())?);
            }
        }
        match (generation, replaced) {
            (Some(generation), Some(mut replaced)) => {
                replaced.sort_unstable();
                Ok(EpochRecord {
                    epoch,
                    generation,
                    replaced,
                })
            }
            _ => Err(bad()),
        }
    }
}

/// A view of a store whose keys all carry a prefix: the bootstrap of an epoch's transports
/// uses the same key names as the job's first one, in its own name space.
pub struct PrefixStore {
    inner: Arc<dyn Store>,
    prefix: String,
}

impl PrefixStore {
    /// `inner` seen through `prefix`.
    pub fn new(inner: Arc<dyn Store>, prefix: impl Into<String>) -> PrefixStore {
        PrefixStore {
            inner,
            prefix: prefix.into(),
        }
    }
}

impl Store for PrefixStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.set(&format!("{}{key}", self.prefix), value)
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.inner.get(&format!("{}{key}", self.prefix), timeout)
    }

    fn fetch_add(&self, key: &str, delta: i64) -> Result<i64> {
        self.inner
            .fetch_add(&format!("{}{key}", self.prefix), delta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;

    #[test]
    fn records_round_trip_and_garbage_is_an_error() {
        let r = EpochRecord {
            epoch: 3,
            generation: 7,
            replaced: vec![0, 2],
        };
        assert_eq!(EpochRecord::decode(3, &r.encode()).unwrap(), r);
        let none = EpochRecord {
            epoch: 1,
            generation: 1,
            replaced: vec![],
        };
        assert_eq!(EpochRecord::decode(1, &none.encode()).unwrap(), none);
        for bad in [
            &b""[..],
            b"generation=x replaced=1",
            b"generation=1",
            b"replaced=1,a",
        ] {
            let e = EpochRecord::decode(2, bad).unwrap_err();
            assert!(e.to_string().contains("epoch 2"), "{e}");
        }
    }

    #[test]
    fn prefixed_keys_do_not_meet_unprefixed_ones() {
        let mem: Arc<dyn Store> = Arc::new(MemStore::new());
        let p = PrefixStore::new(mem.clone(), epoch_prefix(1));
        p.set("tcp/addr/0", b"a").unwrap();
        assert_eq!(mem.get("e1/tcp/addr/0", Duration::ZERO).unwrap(), b"a");
        assert!(mem.get("tcp/addr/0", Duration::ZERO).is_err());
        assert_eq!(p.fetch_add("n", 2).unwrap(), 0);
        assert_eq!(mem.fetch_add("e1/n", 1).unwrap(), 2);
        assert!(respawn_started(b"started pid 12"));
        assert!(!respawn_started(b"refused: budget"));
    }
}
