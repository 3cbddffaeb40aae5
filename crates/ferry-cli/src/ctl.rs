//! Job control: `ferry ctl NAME status`.
//!
//! A job started with `--job-name NAME` registers itself in `/tmp/ferry-<uid>/jobs/NAME` (a
//! directory only its owner may enter, a file only its owner may read): the address of its
//! rendezvous store and the job secret. `ferry ctl` reads that file, connects to the store like
//! a rank would, and reads the `launcher/status` entry that the launcher keeps up to date.
//!
//! `ferry ctl NAME remove PATTERN` matches the pattern against the location strings of that
//! table and leaves the ids in the store, where the master reads them at the next resize point.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferry_core::store::TcpStoreClient;
use ferry_core::Store;

/// Store key under which the launcher publishes the job's process table.
pub const STATUS_KEY: &str = "launcher/status";

/// Directory of the registrations of this user's named jobs.
pub fn jobs_dir() -> PathBuf {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir()
        .join(format!("ferry-{uid}"))
        .join("jobs")
}

/// Creates `dir` (mode 0700) and checks that it is a real directory owned by us, so that
/// another user cannot plant or read registrations.
fn private_dir(dir: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    for d in [dir, dir.parent().unwrap_or(dir)] {
        let meta = std::fs::symlink_metadata(d)
            .map_err(|e| format!("cannot inspect {}: {e}", d.display()))?;
        if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
            return Err(format!(
                "{} is not a private directory of uid {uid}; remove it",
                d.display()
            ));
        }
    }
    Ok(())
}

fn read_registration(path: &Path) -> Option<(String, String)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    let addr = lines.next()?.trim().to_string();
    let secret = lines.next()?.trim().to_string();
    Some((addr, secret))
}

fn connect(addr: &str, secret: &str) -> Option<TcpStoreClient> {
    TcpStoreClient::connect(addr, secret, Duration::from_millis(500)).ok()
}

/// The registration of a running named job; removed when dropped.
pub struct Registration {
    path: PathBuf,
    addr: String,
}

impl Registration {
    /// Registers job `name` with its store address and secret. Fails if a live job of that
    /// name exists; a stale file (its launcher died) is replaced.
    pub fn create(name: &str, addr: &str, secret: &str) -> Result<Registration, String> {
        let dir = jobs_dir();
        private_dir(&dir)?;
        let path = dir.join(name);
        if let Some((old_addr, old_secret)) = read_registration(&path) {
            if connect(&old_addr, &old_secret).is_some() {
                return Err(format!(
                    "a job named `{name}` is already running (see `ferry ctl {name} status`)"
                ));
            }
        }
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            writeln!(f, "{addr}\n{secret}")?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot register job `{name}` in {}: {e}", path.display())
        })?;
        Ok(Registration {
            path,
            addr: addr.to_string(),
        })
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Only remove our own registration, not that of a job that replaced a stale one.
        if read_registration(&self.path).is_some_and(|(a, _)| a == self.addr) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// `ferry ctl NAME status`: prints the job's process table. Returns the exit status.
pub fn status(name: &str) -> Result<u8, String> {
    let path = jobs_dir().join(name);
    let Some((addr, secret)) = read_registration(&path) else {
        return Err(format!(
            "no running job named `{name}` (nothing registered in {})",
            path.display()
        ));
    };
    let Some(client) = connect(&addr, &secret) else {
        return Err(format!(
            "job `{name}` is not running any more (its launcher at {addr} does not answer)"
        ));
    };
    let table = client
        .get(STATUS_KEY, Duration::from_secs(2))
        .map_err(|e| format!("cannot read the status of job `{name}`: {e}"))?;
    let mut out = std::io::stdout().lock();
    out.write_all(&table)
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot print the status: {e}"))?;
    Ok(0)
}

/// Store key holding the ids of processes to remove (read by the master at resize points,
/// `ferry::resize::REMOVE_KEY`).
pub const REMOVE_KEY: &str = "elastic/remove";

/// Ids (`L<id>`) of the status table's location strings that `pattern` matches.
pub fn matching_ids(table: &str, pattern: &regex::Regex) -> Vec<usize> {
    table
        .lines()
        .filter_map(|line| {
            let loc = line.split_whitespace().next()?;
            let id: usize = loc.strip_prefix('L')?.split(':').next()?.parse().ok()?;
            pattern.is_match(loc).then_some(id)
        })
        .collect()
}

/// `ferry ctl NAME remove PATTERN`: asks the job to remove, at its next resize point, every
/// process whose location string `L<id>:<host>:<pid>` matches the extended regular expression
/// `PATTERN` (interface.md "Elastic runs"; the master is never removed). The ids are appended
/// to the store key the master reads; two `remove` commands at the same instant may race (the
/// later write wins).
pub fn remove(name: &str, pattern: &str) -> Result<u8, String> {
    let re = regex::Regex::new(pattern)
        .map_err(|e| format!("`{pattern}` is not a regular expression: {e}"))?;
    let path = jobs_dir().join(name);
    let Some((addr, secret)) = read_registration(&path) else {
        return Err(format!(
            "no running job named `{name}` (nothing registered in {})",
            path.display()
        ));
    };
    let Some(client) = connect(&addr, &secret) else {
        return Err(format!(
            "job `{name}` is not running any more (its launcher at {addr} does not answer)"
        ));
    };
    let table = client
        .get(STATUS_KEY, Duration::from_secs(2))
        .map_err(|e| format!("cannot read the processes of job `{name}`: {e}"))?;
    let ids = matching_ids(&String::from_utf8_lossy(&table), &re);
    if ids.is_empty() {
        return Err(format!("`{pattern}` matches no process of job `{name}`"));
    }
    let old = client
        .get(REMOVE_KEY, Duration::from_secs(2))
        .map_err(|e| format!("cannot read the removal requests of job `{name}`: {e}"))?;
    let mut list = String::from_utf8_lossy(&old).into_owned();
    for id in &ids {
        if !list.is_empty() {
            list.push(',');
        }
        list.push_str(&id.to_string());
    }
    client
        .set(REMOVE_KEY, list.as_bytes())
        .map_err(|e| format!("cannot record the removal request in job `{name}`: {e}"))?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store_server::StoreServer;

    #[test]
    fn registration_status_and_stale_files() {
        let name = format!("ctl-test-{}", std::process::id());
        let srv = StoreServer::bind("127.0.0.1:0", "sec").unwrap();
        let addr = srv.local_addr().to_string();
        srv.store()
            .set(STATUS_KEY, b"L0:host:1 rank 0 running\n")
            .unwrap();
        let reg = Registration::create(&name, &addr, "sec").unwrap();
        assert!(
            Registration::create(&name, &addr, "sec").is_err(),
            "live job"
        );
        assert_eq!(status(&name).unwrap(), 0);
        drop(srv);
        // The launcher is gone: the file is stale and a new job may take the name.
        assert!(status(&name).is_err());
        let srv2 = StoreServer::bind("127.0.0.1:0", "sec2").unwrap();
        let reg2 = Registration::create(&name, &srv2.local_addr().to_string(), "sec2").unwrap();
        drop(reg); // must not remove the new job's file
        assert!(jobs_dir().join(&name).exists());
        drop(reg2);
        assert!(!jobs_dir().join(&name).exists());
        assert!(status(&name).is_err());
        assert!(remove(&name, "L1:.*").is_err(), "no such job any more");
    }

    #[test]
    fn removal_patterns_match_location_strings() {
        let table = "L0:h:10 rank 0 running\nL1:h:11 rank 1 running\nL12:g:12 rank 12 done\n";
        let ids = |p: &str| matching_ids(table, &regex::Regex::new(p).unwrap());
        assert_eq!(ids("L1"), vec![1, 12]);
        assert_eq!(ids("^L1:"), vec![1]);
        assert_eq!(ids(":g:"), vec![12]);
        assert_eq!(ids("L(0|1):h"), vec![0, 1]);
        assert!(ids("x").is_empty());
    }
}
