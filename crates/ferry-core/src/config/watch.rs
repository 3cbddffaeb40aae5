//! Re-reading the configuration file while the job runs (seed 000 §5.1).

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::error::Result;

use super::Config;

/// Re-reads the configuration file when it changes (000 §5.1), at most once per interval.
#[derive(Debug)]
pub struct ConfigWatcher {
    path: Option<PathBuf>,
    vars: Vec<(String, String)>,
    modified: Option<SystemTime>,
    interval: Duration,
    last_check: std::time::Instant,
}

impl ConfigWatcher {
    /// Watches the file named by `FERRY_CONFIG`, if any.
    pub fn from_env(interval: Duration) -> ConfigWatcher {
        ConfigWatcher::new(
            std::env::var_os("FERRY_CONFIG").map(PathBuf::from),
            std::env::vars().collect(),
            interval,
        )
    }

    /// Watches `path` (none: nothing to watch), applying the overrides in `vars` to every
    /// re-read, at most once per `interval`.
    pub fn new(path: Option<PathBuf>, vars: Vec<(String, String)>, interval: Duration) -> Self {
        let modified = path
            .as_deref()
            .and_then(|p| std::fs::metadata(p).ok())
            .and_then(|m| m.modified().ok());
        ConfigWatcher {
            path,
            vars,
            modified,
            interval,
            last_check: std::time::Instant::now(),
        }
    }

    /// Returns the new configuration if the file changed since the last call and its interval
    /// has passed; errors in the new file are returned (the caller keeps the old settings).
    pub fn poll(&mut self) -> Option<Result<Config>> {
        let path = self.path.as_deref()?;
        if self.last_check.elapsed() < self.interval {
            return None;
        }
        self.last_check = std::time::Instant::now();
        let modified = std::fs::metadata(path).ok()?.modified().ok();
        if modified == self.modified {
            return None;
        }
        self.modified = modified;
        Some(Config::load(Some(path), &self.vars))
    }
}
