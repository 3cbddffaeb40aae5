//! A threads-as-ranks transport with a fault hook, shared by the test files that make a
//! backend report what tcp or shm report (a withdrawn message, a dead peer) at a moment the
//! test chooses.
#![allow(dead_code)]

use std::time::Duration;

use ferry_core::mem::MemTransport;
use ferry_core::{Error, Exchange, Result, Stats, Transport, WaitPolicy};

/// The memory transport, except that every progress call asks `hook` first: an error it
/// returns is reported instead of making progress.
pub struct Hooked<F> {
    inner: MemTransport,
    name: &'static str,
    hook: F,
    /// See [`Hooked::polling`].
    polling: bool,
}

impl<F> Hooked<F>
where
    F: FnMut(&MemTransport, &Exchange<'_>) -> Option<Error> + Send,
{
    /// `inner` with `hook`, reporting itself as `name`.
    pub fn new(inner: MemTransport, name: &'static str, hook: F) -> Hooked<F> {
        Hooked {
            inner,
            name,
            hook,
            polling: false,
        }
    }

    /// Waits for input at most 5 ms at a time, so that a hook whose condition another thread
    /// sets is asked again soon, and keeps the memory backend's operation timeout, so that a
    /// notice that never comes fails the test instead of hanging it.
    pub fn polling(mut self) -> Hooked<F> {
        self.polling = true;
        self
    }
}

impl<F> Transport for Hooked<F>
where
    F: FnMut(&MemTransport, &Exchange<'_>) -> Option<Error> + Send,
{
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn name(&self) -> &'static str {
        self.name
    }
    fn progress_exchange(&mut self, ex: &mut Exchange<'_>) -> Result<bool> {
        if let Some(e) = (self.hook)(&self.inner, ex) {
            return Err(e);
        }
        self.inner.progress_exchange(ex)
    }
    fn wait_for_input(&mut self, timeout: Duration) -> Result<()> {
        if self.polling {
            self.inner
                .wait_for_input(timeout.min(Duration::from_millis(5)))
        } else {
            self.inner.wait_for_input(timeout)
        }
    }
    fn wait_policy(&self) -> WaitPolicy {
        if self.polling {
            self.inner.wait_policy()
        } else {
            WaitPolicy::default()
        }
    }
    fn stats(&self) -> Stats {
        self.inner.stats()
    }
}
