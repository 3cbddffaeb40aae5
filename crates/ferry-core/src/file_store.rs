//! A [`Store`] in files of a directory that every rank of a job can see (R2c): the rendezvous of
//! jobs started by `mpirun`/`srun` without `ferry run` (see [`crate::discovery`]), in the role
//! PMI plays for MPI.
//!
//! Layout: one directory per job, `$FERRY_STORE_DIR/ferry-<uid>/store/<job id>/` (default base: the
//! temporary directory, `$TMPDIR` or `/tmp`; for jobs spanning hosts, point `FERRY_STORE_DIR` at
//! a file system all hosts share). Each key is one file `k-<escaped key>`:
//! - `set` writes a temporary file and renames it over the key file, so a reader sees either
//!   no value or a whole one (rename is atomic on local file systems and on NFS);
//! - `get` polls for the file with a growing interval (1 ms up to 50 ms) until its timeout;
//! - `fetch_add` takes the lock file `l-<escaped key>` (created with `O_EXCL`), reads, writes
//!   with `set`'s rename, and removes the lock.
//!
//! Clean-up: a store made with [`FileStore::remove_when_released_by`] counts the ranks that are
//! done with it (on [`FileStore::release`] or drop); the last of them removes the directory.
//! A job killed before that leaves its directory behind; job ids never repeat (see
//! [`crate::discovery`]), so a stale directory is never read by a later job.

use std::fs;
use std::io::{ErrorKind as IoKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::store::Store;

/// Longest escaped key (file names are limited to 255 bytes; the prefixes need a few).
const MAX_KEY_FILE_NAME: usize = 200;

/// Largest value accepted: the store carries addresses and counters, not data.
pub const MAX_VALUE_BYTES: usize = 16 << 20;

/// How long `fetch_add` waits for a lock held by another rank.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// First and longest pause between polls.
const POLL_MIN: Duration = Duration::from_millis(1);
const POLL_MAX: Duration = Duration::from_millis(50);

/// Key counting the ranks done with the store.
const RELEASED_KEY: &str = "ferry/released";

/// A key-value store in a directory shared by the ranks of one job.
#[derive(Debug)]
pub struct FileStore {
    dir: PathBuf,
    cleanup_after: Option<usize>,
    released: AtomicBool,
    tmp_counter: AtomicU64,
}

fn io_error(op: &'static str, path: &Path, e: std::io::Error) -> Error {
    Error::new(ErrorKind::Io, op)
        .with_detail(path.display().to_string())
        .with_source(e)
}

/// Escapes a key into a file name: `[A-Za-z0-9_-]` stay, every other byte becomes `%XX`
/// (so `/` and `.` can never form paths or hidden files).
fn escape_key(key: &str) -> Result<String> {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.len() > MAX_KEY_FILE_NAME {
        return Err(Error::invalid(
            "file store",
            format!(
                "key `{key}` is too long for a file name ({} bytes escaped, at most {})",
                out.len(),
                MAX_KEY_FILE_NAME
            ),
        ));
    }
    Ok(out)
}

/// Sleeps before the next poll and grows the pause.
fn pause(next: &mut Duration, deadline: Instant) {
    let now = Instant::now();
    if now < deadline {
        std::thread::sleep((*next).min(deadline - now));
    }
    *next = (*next * 2).min(POLL_MAX);
}

/// Removes the lock file when the holder is done, also on error paths.
struct LockGuard<'a>(&'a Path);

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_file(self.0) {
            tracing::warn!("file store: cannot remove lock {}: {e}", self.0.display());
        }
    }
}

impl FileStore {
    /// A store in `dir`, created (mode 0700) if missing.
    pub fn open(dir: impl Into<PathBuf>) -> Result<FileStore> {
        let dir = dir.into();
        create_private_dir(&dir)?;
        Ok(FileStore {
            dir,
            cleanup_after: None,
            released: AtomicBool::new(false),
            tmp_counter: AtomicU64::new(0),
        })
    }

    /// The directory of job `job_id` under `base`: `base/ferry-<uid>/store/<job id>` (the
    /// launcher keeps its job registry beside it in `ferry-<uid>/jobs`).
    pub fn job_dir(base: &Path, job_id: &str) -> PathBuf {
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        let safe: String = job_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let safe = if safe.is_empty() || safe.starts_with('.') {
            format!("job{safe}")
        } else {
            safe
        };
        base.join(format!("ferry-{uid}")).join("store").join(safe)
    }

    /// The store of job `job_id`: under `$FERRY_STORE_DIR` if set, else the temporary
    /// directory. The per-user parent directory must belong to this user (another user could
    /// otherwise pre-create it and read or forge the job's addresses).
    pub fn for_job(job_id: &str) -> Result<FileStore> {
        let base = std::env::var_os("FERRY_STORE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = FileStore::job_dir(&base, job_id);
        // The per-user directory `ferry-<uid>` and `store` below it.
        for parent in dir
            .ancestors()
            .skip(1)
            .take(2)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            create_private_dir(parent)?;
            check_owner(parent)?;
        }
        FileStore::open(dir)
    }

    /// Makes the last of `size` ranks that release the store (explicitly or by dropping it)
    /// remove its directory.
    pub fn remove_when_released_by(mut self, size: usize) -> FileStore {
        self.cleanup_after = Some(size.max(1));
        self
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Says that this rank is done with the store. Returns whether this call removed the
    /// directory (it was the last rank). Only the first call of a process counts.
    pub fn release(&self) -> Result<bool> {
        let Some(size) = self.cleanup_after else {
            return Ok(false);
        };
        if self.released.swap(true, Ordering::SeqCst) {
            return Ok(false);
        }
        let before = self.fetch_add(RELEASED_KEY, 1)?;
        if before + 1 >= size as i64 {
            fs::remove_dir_all(&self.dir)
                .map_err(|e| io_error("file store remove", &self.dir, e))?;
            return Ok(true);
        }
        Ok(false)
    }

    fn key_path(&self, key: &str) -> Result<PathBuf> {
        Ok(self.dir.join(format!("k-{}", escape_key(key)?)))
    }

    fn write_atomically(&self, path: &Path, value: &[u8]) -> Result<()> {
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let name = path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = self
            .dir
            .join(format!("t-{}-{n}-{name}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(value)?;
            f.sync_data()?;
            fs::rename(&tmp, path)
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            io_error("file store set", path, e)
        })
    }

    fn read(&self, path: &Path, op: &'static str) -> Result<Option<Vec<u8>>> {
        match fs::read(path) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind() == IoKind::NotFound => Ok(None),
            Err(e) => Err(io_error(op, path, e)),
        }
    }
}

fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => Ok(()),
        Err(e) => Err(io_error("file store open", dir, e)),
    }
}

fn check_owner(dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::symlink_metadata(dir).map_err(|e| io_error("file store open", dir, e))?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    if !meta.is_dir() || meta.uid() != uid {
        return Err(
            Error::new(ErrorKind::Config, "file store open").with_detail(format!(
                "{} is not a directory owned by uid {uid}; remove it or set FERRY_STORE_DIR",
                dir.display()
            )),
        );
    }
    Ok(())
}

impl Store for FileStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(Error::invalid(
                "file store set",
                format!(
                    "value of `{key}` has {} bytes, at most {MAX_VALUE_BYTES}",
                    value.len()
                ),
            ));
        }
        let path = self.key_path(key)?;
        self.write_atomically(&path, value)
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let path = self.key_path(key)?;
        let deadline = Instant::now() + timeout;
        let mut next = POLL_MIN;
        loop {
            if let Some(v) = self.read(&path, "file store get")? {
                return Ok(v);
            }
            if Instant::now() >= deadline {
                return Err(
                    Error::new(ErrorKind::Timeout, "file store get").with_detail(format!(
                        "key `{key}` not set within {timeout:?} in {}",
                        self.dir.display()
                    )),
                );
            }
            pause(&mut next, deadline);
        }
    }

    fn fetch_add(&self, key: &str, delta: i64) -> Result<i64> {
        let path = self.key_path(key)?;
        let lock = self.dir.join(format!("l-{}", escape_key(key)?));
        let deadline = Instant::now() + LOCK_TIMEOUT;
        let mut next = POLL_MIN;
        loop {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock)
            {
                Ok(_) => break,
                Err(e) if e.kind() == IoKind::AlreadyExists => {
                    if Instant::now() >= deadline {
                        return Err(
                            Error::new(ErrorKind::Timeout, "file store add").with_detail(format!(
                                "lock {} held for more than {LOCK_TIMEOUT:?}; if no rank of the \
                                 job is alive, remove it",
                                lock.display()
                            )),
                        );
                    }
                    pause(&mut next, deadline);
                }
                Err(e) => return Err(io_error("file store add", &lock, e)),
            }
        }
        let _guard = LockGuard(&lock);
        let old = match self.read(&path, "file store add")? {
            None => 0,
            Some(v) => std::str::from_utf8(&v)
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
                .ok_or_else(|| {
                    Error::invalid(
                        "file store add",
                        format!("key `{key}` does not hold an integer"),
                    )
                })?,
        };
        let new = old.checked_add(delta).ok_or_else(|| {
            Error::invalid("file store add", format!("counter `{key}` overflows"))
        })?;
        self.write_atomically(&path, new.to_string().as_bytes())?;
        Ok(old)
    }
}

impl Drop for FileStore {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            tracing::warn!("file store {}: release failed: {e}", self.dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "ferry-file-store-test-{}-{name}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn set_get_and_keys_with_separators() {
        let dir = scratch("setget");
        let s = FileStore::open(&dir).unwrap();
        s.set("tcp/addr/1", b"127.0.0.1:9").unwrap();
        s.set("tcp/addr/1", b"127.0.0.1:10").unwrap();
        s.set("../escape", b"x").unwrap();
        assert_eq!(
            s.get("tcp/addr/1", Duration::ZERO).unwrap(),
            b"127.0.0.1:10"
        );
        assert_eq!(s.get("../escape", Duration::ZERO).unwrap(), b"x");
        // Nothing was written outside the directory.
        assert!(!dir.parent().unwrap().join("escape").exists());
        let e = s.get("missing", Duration::from_millis(20)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.to_string().contains("missing"), "{e}");
        assert!(s.set(&"k".repeat(300), b"v").is_err());
        drop(s);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn get_waits_for_a_set_from_another_process_view() {
        let dir = scratch("wait");
        let a = FileStore::open(&dir).unwrap();
        let b = FileStore::open(&dir).unwrap();
        let h = std::thread::spawn(move || b.get("late", Duration::from_secs(10)).unwrap());
        std::thread::sleep(Duration::from_millis(30));
        a.set("late", b"here").unwrap();
        assert_eq!(h.join().unwrap(), b"here");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn fetch_add_is_atomic_across_stores() {
        let dir = scratch("add");
        let stores: Vec<Arc<FileStore>> = (0..4)
            .map(|_| Arc::new(FileStore::open(&dir).unwrap()))
            .collect();
        let handles: Vec<_> = stores
            .iter()
            .cloned()
            .map(|s| {
                std::thread::spawn(move || {
                    (0..25)
                        .map(|_| s.fetch_add("ctr", 1).unwrap())
                        .collect::<Vec<i64>>()
                })
            })
            .collect();
        let mut all: Vec<i64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<i64>>());
        stores[0].set("text", b"abc").unwrap();
        assert!(stores[0].fetch_add("text", 1).is_err());
        // The lock was released on the error path.
        assert_eq!(stores[0].fetch_add("ctr", 5).unwrap(), 100);
        drop(stores);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn last_rank_to_release_removes_the_directory() {
        let base = scratch("release");
        let dir = FileStore::job_dir(&base, "ompi-1/2");
        assert!(dir.ends_with("ompi-1_2"));
        let ranks: Vec<FileStore> = (0..3)
            .map(|_| FileStore::open(&dir).unwrap().remove_when_released_by(3))
            .collect();
        ranks[0].set("k", b"v").unwrap();
        assert!(!ranks[0].release().unwrap());
        assert!(
            !ranks[0].release().unwrap(),
            "second release does not count"
        );
        assert!(!ranks[1].release().unwrap());
        assert!(dir.exists());
        let mut ranks = ranks;
        drop(ranks.pop()); // the third rank releases by dropping
        assert!(!dir.exists());
        drop(ranks);
        fs::remove_dir_all(&base).unwrap();
    }
}
