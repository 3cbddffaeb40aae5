//! Typed point-to-point messages of a [`Comm`].
//!
//! A message is identified by (source, destination, communicator generation, tag); messages of
//! one such flow arrive in the order they were sent (M2). Every receive names its source: the
//! backends match a receive against one flow, by the flow's serial numbers, and an any-source
//! receive would need a matching step across flows that none of them has (MPI's
//! `MPI_ANY_SOURCE`). Receive from every possible source in one [`Comm::sendrecv_into`] or a
//! batched [`ferry_core::Exchange`] instead.

use ferry_core::element::{as_bytes, as_bytes_mut};
use ferry_core::{Element, Error, ErrorKind, MsgKey, MsgKind, Result};

use super::Comm;

impl Comm {
    fn user_key(&self, tag: u32) -> MsgKey {
        MsgKey::new(self.group.generation(), MsgKind::USER, tag)
    }

    /// Sends `data` to member `dest` with `tag`; returns when `data` may be reused.
    pub fn send<T: Element>(&mut self, data: &[T], dest: usize, tag: u32) -> Result<()> {
        let peer = self.member(dest, "send")?;
        let key = self.user_key(tag);
        self.world.transport().send(peer, key, as_bytes(data))
    }

    /// Sends one value (see [`Comm::send`]).
    pub fn send_value<T: Element>(&mut self, value: T, dest: usize, tag: u32) -> Result<()> {
        self.send(std::slice::from_ref(&value), dest, tag)
    }

    /// Receives the next message of member `src` with `tag` into `buf`; the message must have
    /// exactly `buf.len()` elements (another length is an error naming both lengths).
    pub fn recv_into<T: Element>(&mut self, buf: &mut [T], src: usize, tag: u32) -> Result<()> {
        let peer = self.member(src, "recv")?;
        let key = self.user_key(tag);
        let t = self.world.transport();
        Comm::run_exchange(t, &mut self.sends, &mut self.recvs, |ex| {
            ex.recv_into(peer, key, as_bytes_mut(buf))
        })
    }

    /// Receives one value (see [`Comm::recv_into`]).
    pub fn recv_value<T: Element>(&mut self, src: usize, tag: u32) -> Result<T> {
        let mut v = [T::default()];
        self.recv_into(&mut v, src, tag)?;
        Ok(v[0])
    }

    /// Receives the next message of member `src` with `tag`, of any length, as a new vector.
    pub fn recv_vec<T: Element>(&mut self, src: usize, tag: u32) -> Result<Vec<T>> {
        let peer = self.member(src, "recv")?;
        let key = self.user_key(tag);
        let mut bytes = Vec::new();
        self.world.transport().recv(peer, key, &mut bytes)?;
        ferry_core::element::from_bytes(&bytes).ok_or_else(|| {
            Error::new(ErrorKind::InvalidArgument, "recv")
                .on_rank(self.world.rank())
                .with_peer(peer)
                .with_detail(format!(
                    "message of {} bytes is not a whole number of {} ({} bytes each)",
                    bytes.len(),
                    T::NAME,
                    std::mem::size_of::<T>()
                ))
        })
    }

    /// Sends `send` to member `dest` and receives `recv.len()` elements from member `src`,
    /// progressed together so that neither waits for the other (a ring shift or halo swap
    /// cannot deadlock, M3). Both messages carry `tag`.
    pub fn sendrecv_into<T: Element>(
        &mut self,
        send: &[T],
        dest: usize,
        recv: &mut [T],
        src: usize,
        tag: u32,
    ) -> Result<()> {
        let to = self.member(dest, "sendrecv")?;
        let from = self.member(src, "sendrecv")?;
        let key = self.user_key(tag);
        let t = self.world.transport();
        Comm::run_exchange(t, &mut self.sends, &mut self.recvs, |ex| {
            ex.send(to, key, as_bytes(send));
            ex.recv_into(from, key, as_bytes_mut(recv));
        })
    }
}
