//! Configuration (R4): one TOML file named by `FERRY_CONFIG`, plus `FERRY_<SECTION>_<KEY>`
//! environment overrides (e.g. `FERRY_TCP_CONNECTION_CAP=2`, `FERRY_GENERAL_FAILURE_TIMEOUT_MS=3000`).
//!
//! Unknown keys and bad values are errors that name the key. Every key, its meaning and its
//! default is listed in `docs/CONFIGURATION.md`; the defaults are the `Default` impls below.
//! The file may be re-read while the job runs ([`ConfigWatcher`]) so that a rank's address can
//! change (seed 000 §5.1).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::transport::WaitPolicy;

mod cores;
mod parse;
mod sections;
mod watch;

pub use cores::{
    available_cores, bind_thread_to_its_first_cpu, bound_to_one_cpu, host_cores, local_ranks_hint,
    oversubscribed, spins_alone,
};
pub use sections::{Bind, Data, General, Pipeline, Shm, SingleCopy, Tcp, YieldWhenIdle};
pub use watch::ConfigWatcher;

use parse::{apply_env_overrides, offending_key, syntax_error, Origins};

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Settings for every backend.
    pub general: General,
    /// TCP backend.
    pub tcp: Tcp,
    /// Shared-memory backend.
    pub shm: Shm,
    /// Data layer.
    pub data: Data,
}

pub(super) const SECTIONS: &[&str] = &["general", "tcp", "shm", "data"];

impl Config {
    /// The optional per-operation timeout (`general.operation_timeout_ms`; `None` when 0).
    pub fn operation_timeout(&self) -> Option<Duration> {
        match self.general.operation_timeout_ms {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// How long an unreachable peer host is given before it is declared failed.
    pub fn failure_timeout(&self) -> Duration {
        Duration::from_millis(self.general.failure_timeout_ms)
    }

    /// Bound on start-up waits (rendezvous, shared-memory attach).
    pub fn startup_timeout(&self) -> Duration {
        Duration::from_millis(self.general.startup_timeout_ms)
    }

    /// Polling time before blocking.
    pub fn spin(&self) -> Duration {
        Duration::from_micros(self.general.spin_us)
    }

    /// The waiting policy of a transport whose host runs `local_ranks` ranks of the job.
    pub fn wait_policy(&self, local_ranks: usize) -> WaitPolicy {
        let yield_each_poll = match self.general.yield_when_idle {
            YieldWhenIdle::Always => true,
            YieldWhenIdle::Never => false,
            YieldWhenIdle::Auto => oversubscribed(local_ranks, host_cores()),
        };
        WaitPolicy {
            spin: self.spin(),
            timeout: self.operation_timeout(),
            failure_timeout: self.failure_timeout(),
            yield_each_poll,
            spin_yields: !spins_alone(bound_to_one_cpu(), local_ranks, host_cores()),
        }
    }

    /// Parses TOML text (no environment overrides). `origin` names the source in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Config> {
        let value: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| syntax_error(text, origin, &e))?;
        Config::from_table(value, &Origins::file(origin))
    }

    fn from_table(table: toml::Table, origins: &Origins) -> Result<Config> {
        let origin = &origins.file;
        for key in table.keys() {
            if !SECTIONS.contains(&key.as_str()) {
                return Err(Error::config(format!(
                    "{origin}: unknown section `{key}` (known: {})",
                    SECTIONS.join(", ")
                )));
            }
        }
        let cfg: Config = match toml::Value::Table(table.clone()).try_into() {
            Ok(cfg) => cfg,
            Err(e) => {
                let e: toml::de::Error = e;
                let key = offending_key(&table);
                return Err(Error::config(format!(
                    "{}: {}{}",
                    origins.of(key.as_deref().unwrap_or("")),
                    key.map(|k| format!("`{k}`: ")).unwrap_or_default(),
                    e.message()
                )));
            }
        };
        cfg.validate(origins)?;
        Ok(cfg)
    }

    /// Loads the file named by `FERRY_CONFIG` (if set) and applies `FERRY_<SECTION>_<KEY>`
    /// overrides from the environment.
    pub fn from_env() -> Result<Config> {
        let vars: Vec<(String, String)> = std::env::vars().collect();
        let path = std::env::var_os("FERRY_CONFIG").map(PathBuf::from);
        Config::load(path.as_deref(), &vars)
    }

    /// Loads `path` (if any) and applies overrides from `vars` (name, value) pairs.
    pub fn load(path: Option<&Path>, vars: &[(String, String)]) -> Result<Config> {
        let (mut table, origin) = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| {
                    Error::config(format!("cannot read configuration file {}", p.display()))
                        .with_source(e)
                })?;
                let t: toml::Table = text.parse().map_err(|e: toml::de::Error| {
                    syntax_error(&text, &p.display().to_string(), &e)
                })?;
                (t, p.display().to_string())
            }
            None => (toml::Table::new(), "defaults".to_string()),
        };
        let env = apply_env_overrides(&mut table, vars)?;
        Config::from_table(table, &Origins { file: origin, env })
    }

    fn validate(&self, origins: &Origins) -> Result<()> {
        let bad = |key: &str, why: &str| {
            let origin = origins.of(key);
            Err(Error::config(format!("{origin}: `{key}` {why}")))
        };
        if self.general.failure_timeout_ms == 0 {
            return bad("general.failure_timeout_ms", "must be at least 1");
        }
        if self.general.startup_timeout_ms == 0 {
            return bad("general.startup_timeout_ms", "must be at least 1");
        }
        if self.tcp.connection_cap < 1 {
            return bad("tcp.connection_cap", "must be at least 1");
        }
        if self.tcp.inbox_messages < 1 {
            return bad("tcp.inbox_messages", "must be at least 1");
        }
        if self.shm.ring_slots < 2 || !self.shm.ring_slots.is_power_of_two() {
            return bad("shm.ring_slots", "must be a power of two, at least 2");
        }
        if self.shm.slot_bytes < 64 || !self.shm.slot_bytes.is_multiple_of(64) {
            return bad("shm.slot_bytes", "must be a multiple of 64, at least 64");
        }
        if self.shm.inbox_messages < 1 {
            return bad("shm.inbox_messages", "must be at least 1");
        }
        for (i, a) in self.tcp.addresses.iter().enumerate() {
            if a.rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
                .is_none()
            {
                return bad(
                    &format!("tcp.addresses[{i}]"),
                    &format!("is `{a}`, expected host:port"),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
