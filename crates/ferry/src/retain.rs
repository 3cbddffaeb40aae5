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
//! there ([`Comm::is_restart`] tells whether this process is a restart). The restart must
//! repeat the communication after the checkpoint in the same order: point-to-point messages
//! and the collectives of the [`Comm`] it checkpointed (the token carries their sequence
//! numbers too). Not covered: communicators derived from it after start-up and data-layer
//! containers, whose state a program would have to rebuild the same way.

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
    let Some(mut token) = comm.transport().retain_token() else {
        return Ok(());
    };
    // The collectives' sequence numbers live in the communicator, not in the transport's
    // flow counters: they travel in the token's trailer.
    let (typed, group) = comm.collective_sequences();
    token.extend_from_slice(&typed.to_le_bytes());
    token.extend_from_slice(&group.to_le_bytes());
    token.extend_from_slice(SEQ_MAGIC);
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
    let (flows, seqs) = match token.len().checked_sub(12) {
        Some(at) if &token[at + 8..] == SEQ_MAGIC => (&token[..at], Some(&token[at..at + 8])),
        _ => (token, None),
    };
    comm.transport().retain_resume(flows)?;
    if let Some(s) = seqs {
        let word = |i: usize| u32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]]);
        comm.resume_collective_sequences(word(0), word(4));
    }
    Ok(())
}

/// Last bytes of a token that carries the communicator's collective sequence numbers.
const SEQ_MAGIC: &[u8; 4] = b"FCSQ";
