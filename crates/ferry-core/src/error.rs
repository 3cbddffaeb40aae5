//! Errors as values (T5, F2): every failure names the rank it happened on, the operation, the
//! peer when there is one, and the cause, printed once as part of the message.

use std::borrow::Cow;
use std::fmt;

use crate::MsgKey;

/// Result type of every communicating call in ferry.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, coarsely, so that callers can decide how to react without parsing text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A peer died, closed its connection or is unreachable.
    PeerFailed,
    /// An operation did not complete within its configured timeout.
    Timeout,
    /// A peer sent something that violates the protocol (malformed or truncated frame, bad
    /// handshake, wrong secret).
    Protocol,
    /// Configuration file or environment is wrong.
    Config,
    /// The caller passed an invalid argument (rank out of range, size mismatch, ...).
    InvalidArgument,
    /// An operating-system call failed locally.
    Io,
    /// A bounded resource is exhausted (back-pressure, not failure).
    ResourceExhausted,
    /// The operation is not available on this backend or platform.
    Unsupported,
    /// The MPI library reported an error.
    Mpi,
    /// The communicator was revoked or shrunk underneath the operation.
    Revoked,
}

impl ErrorKind {
    fn describe(self) -> &'static str {
        match self {
            ErrorKind::PeerFailed => "peer failed",
            ErrorKind::Timeout => "timed out",
            ErrorKind::Protocol => "protocol violation",
            ErrorKind::Config => "configuration error",
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::Io => "I/O error",
            ErrorKind::ResourceExhausted => "resource exhausted",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Mpi => "MPI error",
            ErrorKind::Revoked => "communicator revoked",
        }
    }
}

/// A ferry error: kind, the operation, on which rank, with which peer, and why.
///
/// Displayed as `rank 2: recv (peer rank 3): peer failed: connection reset by peer`: the
/// detail and the whole cause chain follow the kind, each part once (see the `Display` impl;
/// [`Error::cause`] gives the cause to code).
pub struct Error {
    kind: ErrorKind,
    op: Cow<'static, str>,
    rank: Option<usize>,
    peer: Option<usize>,
    detail: Option<String>,
    /// The message the failed operation was about, when the backend knows it (a receive whose
    /// message its live sender withdrew): lets a caller tell which of several pending
    /// operations with the same peer the error concerns. Boxed: it is rare, and errors stay
    /// small enough to pass around by value.
    key: Option<Box<MsgKey>>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    /// A new error of `kind` raised by operation `op` (e.g. `"recv"`, `"allreduce"`).
    pub fn new(kind: ErrorKind, op: impl Into<Cow<'static, str>>) -> Error {
        Error {
            kind,
            op: op.into(),
            rank: None,
            peer: None,
            detail: None,
            key: None,
            source: None,
        }
    }

    /// Sets the rank the error happened on.
    pub fn on_rank(mut self, rank: usize) -> Error {
        self.rank = Some(rank);
        self
    }

    /// Sets the rank the operation talked to.
    pub fn with_peer(mut self, peer: usize) -> Error {
        self.peer = Some(peer);
        self
    }

    /// Adds a human-readable detail (what was expected, which limit, ...).
    pub fn with_detail(mut self, detail: impl Into<String>) -> Error {
        self.detail = Some(detail.into());
        self
    }

    /// Names the message the failed operation was about (see [`Error::key`]).
    pub fn with_key(mut self, key: MsgKey) -> Error {
        self.key = Some(Box::new(key));
        self
    }

    /// Chains the underlying cause.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Error {
        self.source = Some(Box::new(source));
        self
    }

    /// Wraps this error as the cause of a higher-level operation on the same rank, keeping the
    /// kind (so a collective that failed because a peer died is still a peer failure).
    pub fn context(self, op: impl Into<Cow<'static, str>>) -> Error {
        let kind = self.kind;
        let rank = self.rank;
        let peer = self.peer;
        let key = self.key.clone();
        Error {
            kind,
            op: op.into(),
            rank,
            peer,
            detail: None,
            key,
            source: Some(Box::new(self)),
        }
    }

    /// Fills in the rank if the lower layer did not know it.
    pub fn or_rank(mut self, rank: usize) -> Error {
        if self.rank.is_none() {
            self.rank = Some(rank);
        }
        self
    }

    /// The coarse kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The operation that failed.
    pub fn op(&self) -> &str {
        &self.op
    }

    /// The rank the error happened on, if known.
    pub fn rank(&self) -> Option<usize> {
        self.rank
    }

    /// The peer rank involved, if any.
    pub fn peer(&self) -> Option<usize> {
        self.peer
    }

    /// The message the failed operation was about, if the backend said (a withdrawn message:
    /// tcp and shm name it, so that the fault-tolerance layer fails only the receive it was
    /// for).
    pub fn key(&self) -> Option<MsgKey> {
        self.key.as_deref().copied()
    }

    /// Whether the error means a peer is gone or unreachable (timeouts count: a silent peer is
    /// presumed dead, seed 000 §5.3.2).
    pub fn is_peer_failure(&self) -> bool {
        matches!(self.kind, ErrorKind::PeerFailed | ErrorKind::Timeout)
    }

    /// Whether retrying the same operation later can succeed (back-pressure, transient timeouts).
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, ErrorKind::ResourceExhausted | ErrorKind::Timeout)
    }

    /// Shorthand for an I/O error of `op` on `rank` with `peer`.
    pub fn io(op: impl Into<Cow<'static, str>>, err: std::io::Error) -> Error {
        let kind = match err.kind() {
            std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::NotConnected => ErrorKind::PeerFailed,
            std::io::ErrorKind::TimedOut => ErrorKind::Timeout,
            _ => ErrorKind::Io,
        };
        Error::new(kind, op).with_source(err)
    }

    /// Shorthand for an invalid-argument error.
    pub fn invalid(op: impl Into<Cow<'static, str>>, detail: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidArgument, op).with_detail(detail)
    }

    /// Shorthand for a configuration error.
    pub fn config(detail: impl Into<String>) -> Error {
        Error::new(ErrorKind::Config, "configure").with_detail(detail)
    }
}

impl fmt::Display for Error {
    /// The whole story on one line, each part once: the rank, then each level of the chain
    /// (operation and peer), the kind and the detail, then the foreign cause (an I/O error, ...)
    /// and its own causes. A nested ferry error on the same rank or with the same peer does not
    /// repeat them, and a kind shared with the level above is shown once, at the top (so a
    /// message always starts `rank R: OP (peer rank P): KIND`):
    /// `rank 3: allreduce (peer rank 1): peer failed: exchange: connection reset by peer`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown_rank = None;
        let mut shown_peer = None;
        let mut shown_kind = None;
        let mut level = self;
        loop {
            if let Some(rank) = level.rank.filter(|r| shown_rank != Some(*r)) {
                write!(f, "rank {rank}: ")?;
                shown_rank = Some(rank);
            }
            f.write_str(&level.op)?;
            if let Some(peer) = level.peer.filter(|p| shown_peer != Some(*p)) {
                write!(f, " (peer rank {peer})")?;
                shown_peer = Some(peer);
            }
            if shown_kind != Some(level.kind) {
                write!(f, ": {}", level.kind.describe())?;
                shown_kind = Some(level.kind);
            }
            let inner = level.inner();
            if let Some(detail) = &level.detail {
                write!(f, ": {detail}")?;
            }
            match inner {
                Some(i) => {
                    f.write_str(": ")?;
                    level = i;
                }
                None => break,
            }
        }
        let mut cause = level
            .cause()
            .map(|e| e as &(dyn std::error::Error + 'static));
        while let Some(err) = cause {
            write!(f, ": {err}")?;
            cause = err.source();
        }
        Ok(())
    }
}

impl Error {
    /// The cause of this error (a lower-level ferry error, an I/O error, ...), if any.
    ///
    /// [`std::error::Error::source`] returns `None` instead, because the cause is already
    /// part of this error's `Display`: error reporters that print the `source()` chain
    /// (anyhow, eyre, ...) would otherwise print every cause twice.
    pub fn cause(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.source.as_deref()
    }

    /// The innermost cause of the chain that is not a ferry error (e.g. the
    /// [`std::io::Error`] of a failed system call), for callers that inspect it.
    pub fn root_cause(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        let mut level = self;
        while let Some(inner) = level.inner() {
            level = inner;
        }
        level.cause()
    }

    /// The cause if it is itself a ferry error (a lower level of the same failure).
    fn inner(&self) -> Option<&Error> {
        let cause = self.source.as_deref()? as &(dyn std::error::Error + 'static);
        cause.downcast_ref::<Error>()
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// `source()` is `None`: the cause is printed by `Display` (see [`Error::cause`]).
impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_stay_small_and_keep_their_key_through_context() {
        // Results carry errors by value; clippy's `result_large_err` draws the line at 128
        // bytes, and callers wrap an error with a flag or two.
        assert!(std::mem::size_of::<Error>() <= 112);
        let key = MsgKey::user(7);
        let e = Error::new(ErrorKind::Revoked, "recv").with_key(key);
        assert_eq!(e.context("allreduce").key(), Some(key));
        assert_eq!(Error::new(ErrorKind::Revoked, "recv").key(), None);
    }

    #[test]
    fn display_names_rank_op_peer_and_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
        let e = Error::io("recv", io).on_rank(2).with_peer(3);
        assert_eq!(e.kind(), ErrorKind::PeerFailed);
        assert!(e.is_peer_failure());
        assert_eq!(
            e.to_string(),
            "rank 2: recv (peer rank 3): peer failed: connection reset"
        );
        let outer = e.context("allreduce");
        assert_eq!(outer.kind(), ErrorKind::PeerFailed);
        assert_eq!(
            outer.to_string(),
            "rank 2: allreduce (peer rank 3): peer failed: recv: connection reset"
        );
        assert!(outer.cause().is_some());
        assert!(outer
            .root_cause()
            .and_then(|c| c.downcast_ref::<std::io::Error>())
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionReset));
    }

    /// What anyhow, eyre and similar reporters print: the error, then every `source()`.
    fn report(e: &(dyn std::error::Error + 'static)) -> String {
        let mut text = e.to_string();
        let mut cause = e.source();
        while let Some(c) = cause {
            text.push_str(&format!(": {c}"));
            cause = c.source();
        }
        text
    }

    #[test]
    fn a_chain_is_told_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
        let e = Error::io("exchange", io)
            .on_rank(3)
            .with_peer(1)
            .context("allreduce");
        let text = report(&e);
        assert_eq!(
            text,
            "rank 3: allreduce (peer rank 1): peer failed: exchange: connection reset"
        );
        // Wrapped once more in a foreign error that reports its source, as anyhow does.
        #[derive(Debug)]
        struct App(Error);
        impl fmt::Display for App {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("solver step 7")
            }
        }
        impl std::error::Error for App {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let text = report(&App(e));
        for part in ["rank 3", "peer failed", "connection reset", "exchange"] {
            assert_eq!(
                text.matches(part).count(),
                1,
                "`{part}` not once in: {text}"
            );
        }
    }

    #[test]
    fn different_ranks_peers_and_kinds_are_all_shown() {
        let inner = Error::new(ErrorKind::Timeout, "recv")
            .on_rank(1)
            .with_peer(2)
            .with_detail("waited 5 s");
        let outer = Error::new(ErrorKind::PeerFailed, "barrier")
            .on_rank(0)
            .with_peer(1)
            .with_source(inner);
        assert_eq!(
            outer.to_string(),
            "rank 0: barrier (peer rank 1): peer failed: rank 1: recv (peer rank 2): timed out: waited 5 s"
        );
    }
}
