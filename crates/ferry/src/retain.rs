//! Retained messages for hand-started tcp jobs (T6, `tcp.retain = true`; seed 000
//! §5.3.3-5.3.4; docs/FAULT-TOLERANCE.md, "Retained messages").
//!
//! With retention on, every rank keeps the messages it sent. A rank that is killed and
//! started again by hand (the same command, possibly at a new address written into the
//! configuration file, which the others re-read) gets again every message it had consumed,
//! and its peers drop the messages it sends a second time, so a deterministic program that
//! simply runs again from the start finishes with the output of an undisturbed run. No call
//! of this module is needed for that.
//!
//! Without checkpoints the retained messages grow with the run, up to `tcp.retain_bytes`
//! (a send beyond it fails with an error naming the key). A program that saves its state
//! now and then bounds them: [`checkpoint`] hands it the token to save with its state and then
//! lets the senders drop every message consumed before that point; a restart that finds a
//! saved state calls [`resume`] with its token before it communicates and continues from
//! there. Programs that checkpoint must use point-to-point messages between checkpoints only
//! in the same order on a restart (collectives of a [`Comm`] count calls in the `Comm`, which
//! a resumed rank would restart at zero).

use crate::comm::Comm;
use ferry_core::{Error, ErrorKind, Result};

/// Whether this rank retains its messages (`tcp.retain` on a hand-started tcp job).
pub fn enabled(comm: &mut Comm) -> bool {
    comm.transport().retain_token().is_some()
}

/// Marks a checkpoint: calls `save` with this rank's token (its flow counters), which the
/// program stores durably together with its own state (e.g. written to a temporary file and
/// renamed), then tells the senders that everything this rank consumed so far will never be
/// asked for again. Call it between iterations, with no receive pending. Without retention
/// `save` is not called and nothing happens.
pub fn checkpoint(comm: &mut Comm, save: impl FnOnce(&[u8]) -> Result<()>) -> Result<()> {
    let Some(token) = comm.transport().retain_token() else {
        return Ok(());
    };
    save(&token)?;
    comm.transport().checkpoint_mark()?;
    Ok(())
}

/// A restarted rank resumes from a checkpoint saved by [`checkpoint`]: its message counters
/// continue from there. Call it right after start-up, before any communication; the program
/// restores its own state from what it saved.
pub fn resume(comm: &mut Comm, token: &[u8]) -> Result<()> {
    if token.is_empty() {
        return Err(Error::new(ErrorKind::InvalidArgument, "resume")
            .on_rank(comm.rank())
            .with_detail("empty checkpoint token"));
    }
    comm.transport().retain_resume(token)
}
