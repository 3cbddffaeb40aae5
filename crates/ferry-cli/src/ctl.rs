//! Job control: `ferry ctl NAME status`.
//!
//! A job started with `--job-name NAME` registers itself in `/tmp/ferry-<uid>/jobs/NAME` (a
//! directory only its owner may enter, a file only its owner may read): the address of its
//! rendezvous store and the job secret. `ferry ctl` reads that file, connects to the store like
//! a rank would, and reads the `launcher/status` entry that the launcher keeps up to date.
//!
//! `ferry ctl NAME remove PATTERN` matches the pattern against the location strings of that
//! table and leaves the ids in the store, where the master reads them at the next resize point.
//!
//! One name, one job: the launcher holds an exclusive `flock` on `jobs/.NAME.lock` for the
//! job's life. Taking it is atomic (of two launchers started at the same instant exactly one
//! gets it) and the kernel releases it however the launcher ends, SIGKILL included, so a dead
//! job never blocks its name.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferry_core::store::TcpStoreClient;
use ferry_core::Store;

/// Store key under which the launcher publishes the job's process table.
pub const STATUS_KEY: &str = ferry_core::respawn::LAUNCHER_STATUS_KEY;

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

/// The exclusive claim of a job name: an `flock`ed file, removed when dropped (the kernel
/// drops the lock itself if the launcher dies without dropping it).
pub struct NameLock {
    path: PathBuf,
    // Holds the lock: it lasts as long as this descriptor.
    _file: File,
}

impl NameLock {
    /// Takes the name `name`, or fails with "job `name` is already running".
    pub fn take(name: &str) -> Result<NameLock, String> {
        let dir = jobs_dir();
        private_dir(&dir)?;
        // Dot-prefixed: job names cannot start with a dot, so no job's registration can be
        // named like another job's lock (`a.lock` is a valid job name).
        let path = dir.join(format!(".{name}.lock"));
        // The holder removes the file when it ends: a launcher that opened the old file just
        // before may lock it after that, holding a lock on a file nobody else can find. So the
        // lock only counts if the path still names the locked file; otherwise try again.
        for _ in 0..100 {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&path)
                .map_err(|e| format!("cannot open the job lock {}: {e}", path.display()))?;
            // SAFETY: flock on a descriptor this function owns.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                    return Err(format!(
                        "job `{name}` is already running (see `ferry ctl {name} status`)"
                    ));
                }
                return Err(format!("cannot lock {}: {e}", path.display()));
            }
            let held = file.metadata().map_err(|e| e.to_string())?;
            match std::fs::metadata(&path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                    return Ok(NameLock { path, _file: file });
                }
                _ => continue,
            }
        }
        Err(format!(
            "cannot lock {}: it keeps being replaced",
            path.display()
        ))
    }
}

impl Drop for NameLock {
    fn drop(&mut self) {
        // Removed while still locked (the lock goes with the descriptor, after this).
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The registration of a running named job; removed when dropped.
pub struct Registration {
    path: PathBuf,
    // Dropped after the registration file is removed (fields drop after `drop`).
    _lock: NameLock,
}

impl Registration {
    /// Registers job `name` with its store address and secret, holding `lock` (the name's
    /// claim, see [`NameLock::take`]) until dropped. A stale file (its launcher died) is
    /// replaced.
    pub fn create(
        lock: NameLock,
        name: &str,
        addr: &str,
        secret: &str,
    ) -> Result<Registration, String> {
        let dir = jobs_dir();
        let path = dir.join(name);
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
        Ok(Registration { path, _lock: lock })
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Ours: nobody else can write it while we hold the name's lock.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A client of the store of the running job registered as `name`, or why there is none.
fn job_store(name: &str) -> Result<TcpStoreClient, String> {
    let path = jobs_dir().join(name);
    let Some((addr, secret)) = read_registration(&path) else {
        return Err(format!(
            "no running job named `{name}` (nothing registered in {})",
            path.display()
        ));
    };
    connect(&addr, &secret).ok_or_else(|| {
        format!("job `{name}` is not running any more (its launcher at {addr} does not answer)")
    })
}

/// `ferry ctl NAME status`: prints the job's process table. Returns the exit status.
pub fn status(name: &str) -> Result<u8, String> {
    let client = job_store(name)?;
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
    let client = job_store(name)?;
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
        let reg =
            Registration::create(NameLock::take(&name).unwrap(), &name, &addr, "sec").unwrap();
        let again = NameLock::take(&name).err().expect("live job");
        assert!(again.contains("already running"), "{again}");
        // A job named like the first one's lock file is another job, and does not free the
        // first one's name.
        let other = format!("{name}.lock");
        let other_reg =
            Registration::create(NameLock::take(&other).unwrap(), &other, &addr, "sec").unwrap();
        assert!(NameLock::take(&name).is_err(), "name freed by another job");
        drop(other_reg);
        assert_eq!(status(&name).unwrap(), 0);
        drop(srv);
        assert!(status(&name).is_err(), "the store is gone");
        drop(reg);
        assert!(!jobs_dir().join(&name).exists());
        // A launcher killed outright leaves its registration (the kernel freed its lock): a
        // new job takes the name and replaces the stale file.
        std::fs::write(jobs_dir().join(&name), format!("{addr}\nsec\n")).unwrap();
        let srv2 = StoreServer::bind("127.0.0.1:0", "sec2").unwrap();
        let addr2 = srv2.local_addr().to_string();
        srv2.store()
            .set(STATUS_KEY, b"L0:host:2 rank 0 running\n")
            .unwrap();
        let reg2 =
            Registration::create(NameLock::take(&name).unwrap(), &name, &addr2, "sec2").unwrap();
        assert_eq!(status(&name).unwrap(), 0);
        drop(reg2);
        assert!(!jobs_dir().join(&name).exists());
        assert!(!jobs_dir().join(format!(".{name}.lock")).exists());
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
