//! Job control: `ferry ctl NAME status`.
//!
//! A job started with `--job-name NAME` registers itself in `/tmp/ferry-<uid>/jobs/NAME` (a
//! directory only its owner may enter, a file only its owner may read): the address of its
//! rendezvous store and the job secret. `ferry ctl` reads that file, connects to the store like
//! a rank would, and reads the `launcher/status` entry that the launcher keeps up to date.
//!
//! `ferry ctl NAME remove PATTERN` needs resize points (processes leave at the program's next
//! resize), which ferry does not have yet; it is refused with an error rather than faked.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferry_core::tcp_store::TcpStoreClient;
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

/// `ferry ctl NAME remove PATTERN`: refused until ferry has resize points.
pub fn remove(name: &str, pattern: &str) -> Result<u8, String> {
    Err(format!(
        "cannot remove `{pattern}` from job `{name}`: removing processes needs resize points \
         (fault tolerance), which ferry does not support yet"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::tcp_store::StoreServer;

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
        assert!(remove(&name, "L1:.*").is_err());
    }
}
