//! The online check: each completed message is compared with the recording of this rank as the
//! program runs (rules in [`crate::align`]), and every deviation is reacted to at once.

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use ferry_core::{Error, ErrorKind, Result};

use crate::align::{Aligner, Deviation, Itemizer};
use crate::format::{self, Event};
use crate::options::{CheckOptions, Reaction};

/// A program's deviation callback.
pub type Callback = Arc<dyn Fn(&Deviation) + Send + Sync>;

fn callback_slot() -> &'static Mutex<Option<Callback>> {
    static SLOT: OnceLock<Mutex<Option<Callback>>> = OnceLock::new();
    SLOT.get_or_init(|| Mutex::new(None))
}

/// Registers `f` to be called with every deviation the check mode finds in this process
/// (before or after `ferry::init`; a later registration replaces an earlier one). It runs on
/// the thread that made the communication call, inside that call: keep it short.
pub fn on_deviation(f: impl Fn(&Deviation) + Send + Sync + 'static) {
    if let Ok(mut slot) = callback_slot().lock() {
        *slot = Some(Arc::new(f));
    }
}

/// Removes the registered callback.
pub fn clear_on_deviation() {
    if let Ok(mut slot) = callback_slot().lock() {
        *slot = None;
    }
}

fn callback() -> Option<Callback> {
    callback_slot().lock().ok().and_then(|s| s.clone())
}

/// Compares one rank's messages with its recording as they complete.
#[derive(Debug)]
pub struct Checker {
    rank: usize,
    aligner: Aligner,
    items: Itemizer,
    options: CheckOptions,
    dir: String,
    found: Vec<Deviation>,
    counted: u64,
    /// The first deviation past `allow` with `react=abort`, reported until the rank ends.
    failed: Option<Deviation>,
}

impl Checker {
    /// Loads this rank's recording from `dir`.
    pub fn load(dir: &Path, rank: usize, size: usize, options: CheckOptions) -> Result<Checker> {
        let path = format::rank_file(dir, rank);
        let rec = format::read_file(&path)
            .map_err(|e| Error::config(format!("FERRY_MONITOR=check: {e}")).on_rank(rank))?;
        if rec.header.size as usize != size || rec.header.rank as usize != rank {
            return Err(Error::config(format!(
                "FERRY_MONITOR=check: {} records rank {} of {} ranks, this is rank {rank} of {size}",
                path.display(),
                rec.header.rank,
                rec.header.size
            ))
            .on_rank(rank));
        }
        if rec.dropped() > 0 {
            return Err(Error::config(format!(
                "FERRY_MONITOR=check: {} lacks {} records the recording run had to drop; \
                 record again",
                path.display(),
                rec.dropped()
            ))
            .on_rank(rank));
        }
        Ok(Checker {
            rank,
            aligner: Aligner::new(rank, &rec.events, options.rules),
            items: Itemizer::new(options.rules.collectives),
            options,
            dir: dir.display().to_string(),
            found: Vec::new(),
            counted: 0,
            failed: None,
        })
    }

    /// Compares the message at position `pos`.
    #[inline]
    pub fn observe(&mut self, pos: u64, ev: &Event) -> Result<()> {
        if let Some(item) = self.items.item(pos, ev) {
            self.aligner.observe(item, &mut self.found);
            if !self.found.is_empty() {
                return self.react();
            }
        }
        Ok(())
    }

    /// The end of the run (`run_len` messages): missing and extra tails.
    pub fn finish(&mut self, run_len: u64) -> Result<()> {
        self.aligner.set_run_len(run_len);
        self.aligner.finish(&mut self.found);
        self.react()?;
        if self.counted > 0 && self.options.react != Reaction::Quiet {
            crate::diag!(
                "ferry monitor: rank {}: {} deviations from the recording in {}",
                self.rank,
                self.counted,
                self.dir
            );
        }
        Ok(())
    }

    /// The error of a rank the check failed (`react=abort` past `allow`), if it did.
    pub fn failure(&self) -> Option<Error> {
        self.failed.as_ref().map(|d| self.failure_error(d))
    }

    fn failure_error(&self, d: &Deviation) -> Error {
        Error::new(ErrorKind::Protocol, "monitor check")
            .on_rank(d.rank)
            .with_detail(format!(
                "communication deviates from the recording in {} beyond allow={}: {}",
                self.dir,
                self.options.allow,
                d.to_string()
                    .strip_prefix(&format!("rank {}: ", d.rank))
                    .unwrap_or_default()
            ))
    }

    /// Deviations counted so far (those in the ignored tail excluded).
    pub fn deviations(&self) -> u64 {
        self.counted
    }

    fn react(&mut self) -> Result<()> {
        let cb = callback();
        for d in std::mem::take(&mut self.found) {
            if self.aligner.ignored(&d) {
                continue;
            }
            self.counted += 1;
            if let Some(cb) = &cb {
                cb(&d);
            }
            let tolerated = self.counted <= self.options.allow;
            match self.options.react {
                Reaction::Quiet => {}
                Reaction::Log | Reaction::Abort => {
                    let note = if tolerated { " (tolerated)" } else { "" };
                    crate::diag!("ferry monitor: {d}{note}");
                }
            }
            if self.options.react == Reaction::Abort && !tolerated && self.failed.is_none() {
                self.failed = Some(d);
            }
        }
        self.failure().map_or(Ok(()), Err)
    }
}
