//! Split single copy: both sides copy half of a large message at the same time.
//!
//! A large message on the default path (`shm.pipeline = auto` on a host with a core per rank)
//! goes by single-copy descriptor. The receiver that claims it offers the first half of its
//! receive buffer to the sender (a [`WriteOffer`] entry in its own ring to the sender) and reads
//! the second half with `process_vm_readv`, while the sender writes the first half with
//! `process_vm_writev`. Cross-memory attach is bound by the kernel's per-page work on one core
//! (Open MPI's vader and ferry's receiver-only single copy both stream at about 13 GB/s here),
//! so two cores each copying once move a message about twice as fast; a copy through the ring
//! costs two copies and moves every line across the core-to-core path twice.
//!
//! The offer is a descriptor of the receiver's, with the same claim/withdraw/complete race as
//! a single-copy read in the other direction: the sender claims it before writing and completes
//! it after; the receiver withdraws it when the sender has not claimed it for `eager_wait`
//! (the sender may be busy elsewhere) and reads that half itself, as it does when the sender
//! refuses an offer it cannot serve. No use after failure (issue 05) on either side: a receiver
//! whose exchange fails withdraws its offer or waits until the claimed write is over before it
//! returns, and completes the sender's descriptor (it has finished reading); a sender whose
//! exchange failed has withdrawn or settled its descriptor, so it no longer finds the send an
//! offer names and refuses it.

use super::*;
use crate::ring::offer::{self, Poll, Serve};
use crate::ring::{decode_write, encode_write, WriteOffer, T_WRITE, WRITE_OFFER};

/// Messages at least this large are split between the two sides on the default path; smaller
/// ones stream through the ring (lower latency for medium messages: no system call).
pub(super) const SPLIT_MIN: usize = 64 * 1024;

/// Flag in a receive's progress: its message is being copied by split single copy.
pub(super) const SPLIT_PENDING: usize = 1 << (usize::BITS - 3);

/// A split single copy whose receiver has read its half and waits for the sender's.
#[derive(Clone, Copy)]
pub(super) struct Split {
    /// Index of the receive in its exchange, and the receive's key and flow serial: the
    /// caller may drive another exchange meanwhile, whose receive at that index is another.
    pub recv: usize,
    pub key: MsgKey,
    pub serial: u64,
    pub l: usize,
    pub desc: CmaDesc,
    pub offer: WriteOffer,
    pub since: Instant,
}

/// A split copy finished while another exchange was driven: (segment index, key, serial)
/// of its receive, and the message's length.
pub(super) type SplitDone = (usize, MsgKey, u64, usize);

impl ShmTransport {
    /// Where split `sp`'s receive is in `ex`, if `ex` is the exchange that started it.
    fn split_recv(&self, ex: &Exchange<'_>, sp: &Split) -> Option<usize> {
        let peer = self.global_of[sp.l];
        ex.recvs.get(sp.recv).and_then(|r| {
            let mine = r.peer == peer
                && r.key == sp.key
                && matches!(r.state, OpState::Active { serial, progress }
                    if serial == sp.serial && progress & SPLIT_PENDING != 0);
            mine.then_some(sp.recv)
        })
    }

    /// Takes the record of a split of receive (`l`, `key`, `serial`) that the sender
    /// finished while another exchange was driven; returns the message's length.
    pub(super) fn take_split_done(&mut self, l: usize, key: MsgKey, serial: u64) -> Option<usize> {
        let i = self
            .splits_done
            .iter()
            .position(|&(dl, dk, ds, _)| (dl, dk, ds) == (l, key, serial))?;
        Some(self.splits_done.swap_remove(i).3)
    }

    /// Starts a split single copy of claimed descriptor `d` from `l` into receive `i` of
    /// `ex`, or returns `Ok(false)` when it cannot be split (the caller reads it whole). On
    /// `Ok(true)` this rank has read its half; [`ShmTransport::progress_splits`] finishes it.
    pub(super) fn try_split(
        &mut self,
        l: usize,
        peer: usize,
        d: CmaDesc,
        i: usize,
        ex: &mut Exchange<'_>,
    ) -> Result<bool> {
        let len = d.len as usize;
        let half = offer::split_point(len, 4096);
        if !self.split || d.heap.is_some() || len < SPLIT_MIN || half == 0 || l == self.me {
            return Ok(false);
        }
        let Some(r) = ex.recvs.get_mut(i) else {
            return Ok(false);
        };
        let OpState::Active { serial, progress } = r.state else {
            return Ok(false);
        };
        let dst = match r.buf.prepare(len) {
            Ok(dst) => dst,
            Err(want) => return Err(self.len_error(peer, len, want)),
        };
        let addr = dst.as_mut_ptr() as u64;
        self.open_tx(l);
        let seq = self.cma_next[l];
        let Some(tx) = self.tx[l].as_mut() else {
            return Ok(false);
        };
        if !window_free(tx.ring(), seq) {
            return Ok(false);
        }
        let offer = WriteOffer {
            desc: d.seq,
            addr,
            len: half as u64,
            seq,
        };
        let e = Entry {
            typ: T_WRITE,
            key: MsgKey::new(0, ferry_proto::MsgKind::DATA, 0),
            serial: 0,
            total_len: 0,
        };
        if !tx.push(&e, &encode_write(&offer)) {
            return Ok(false);
        }
        self.cma_next[l] = seq + 1;
        self.wake(l);
        // This rank's half, while the sender writes the other.
        let read = sys::cma_read(self.pids[l], d.addr + half as u64, &mut dst[half..]);
        r.state = OpState::Active {
            serial,
            progress: progress | SPLIT_PENDING,
        };
        self.splits.push(Split {
            recv: i,
            key: r.key,
            serial,
            l,
            desc: d,
            offer,
            since: Instant::now(),
        });
        if let Err(e) = read {
            // The exchange fails: `settle_splits` withdraws the offer (or waits for the write).
            return Err(self.cma_error(peer, len, e));
        }
        Ok(true)
    }

    /// Finishes the split copies whose sender has written its half (or refused, or let the
    /// offer idle for `eager_wait`: then this rank reads that half itself). A split of
    /// another exchange (the caller drives several) is finished here only once the sender has
    /// written its half (nothing is left to copy into that exchange's buffer; its receive is
    /// completed when that exchange is driven again); otherwise it waits for its exchange.
    pub(super) fn progress_splits(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        let mut k = 0;
        while k < self.splits.len() {
            let sp = self.splits[k];
            let (l, seq) = (sp.l, sp.offer.seq);
            let Some(tx) = self.tx[l].as_ref() else {
                k += 1;
                continue;
            };
            let word = tx.ring().ack(seq);
            let Some(i) = self.split_recv(ex, &sp) else {
                if offer::finish_elsewhere(word, seq) {
                    self.splits.swap_remove(k);
                    if let Some(rx) = self.rx[l].as_ref() {
                        ring::complete(rx.ring().ack(sp.desc.seq), sp.desc.seq);
                    }
                    self.wake(l);
                    self.stats.bump("shm split copies", 1);
                    self.splits_done
                        .push((l, sp.key, sp.serial, sp.desc.len as usize));
                } else {
                    k += 1;
                }
                continue;
            };
            let idle = sp.since.elapsed() >= self.eager_wait;
            let read_myself = match offer::poll(word, seq, idle, || self.peer_alive(l)) {
                Poll::Written => false,
                Poll::ReadItYourself { withdrawn_here } => {
                    if withdrawn_here {
                        self.stats.bump("shm split offers withdrawn", 1);
                    }
                    true
                }
                Poll::WriterDied => {
                    // Left in `splits`: `settle_splits` completes the sender's descriptor.
                    return Err(self
                        .err(ErrorKind::PeerFailed, "recv")
                        .with_peer(self.root_cause(l))
                        .with_detail(format!(
                            "rank {} died while writing its half of a message{}",
                            self.global_of[l],
                            self.blame_note(l)
                        )));
                }
                Poll::Wait => {
                    self.want_acks.push((l, seq));
                    self.waiting.push(l);
                    k += 1;
                    continue;
                }
            };
            self.splits.swap_remove(k);
            let peer = self.global_of[l];
            let len = sp.desc.len as usize;
            let half = sp.offer.len as usize;
            let r = &mut ex.recvs[i];
            let result = if read_myself {
                match r.buf.prepare(len) {
                    Ok(dst) => sys::cma_read(self.pids[l], sp.desc.addr, &mut dst[..half])
                        .map_err(|e| self.cma_error(peer, len, e)),
                    Err(want) => Err(self.len_error(peer, len, want)),
                }
            } else {
                Ok(())
            };
            if let Some(rx) = self.rx[l].as_ref() {
                ring::complete(rx.ring().ack(sp.desc.seq), sp.desc.seq);
            }
            self.wake(l);
            result?;
            r.state = OpState::Done;
            self.stats.bump(
                if read_myself {
                    "shm split copies read whole"
                } else {
                    "shm split copies"
                },
                1,
            );
            self.stats.record_recv(peer, len);
        }
        Ok(())
    }

    /// After exchange `ex` failed: no peer writes into its receive buffers any more. Each of
    /// its pending offers is withdrawn, or waited for while the sender writes (bounded by the
    /// sender's life), and the sender's descriptor completed (this rank read its half).
    /// Splits of other exchanges are theirs to finish.
    pub(super) fn settle_splits(&mut self, ex: &Exchange<'_>) {
        let mut k = 0;
        while k < self.splits.len() {
            let sp = self.splits[k];
            if self.split_recv(ex, &sp).is_none() {
                k += 1;
                continue;
            }
            self.splits.swap_remove(k);
            self.withdraw_or_wait(sp.l, sp.offer.seq);
            if let Some(rx) = self.rx[sp.l].as_ref() {
                ring::complete(rx.ring().ack(sp.desc.seq), sp.desc.seq);
            }
            self.wake(sp.l);
        }
    }

    /// The sender's side: takes the write offer at the head of `l`'s ring and writes its half
    /// when the send it names is still offered in `ex`; refuses it otherwise (the receiver then
    /// reads that half itself).
    pub(super) fn serve_write(&mut self, l: usize, peer: usize, ex: &Exchange<'_>) {
        let Some(rx) = self.rx[l].as_mut() else {
            return;
        };
        let mut raw = [0u8; WRITE_OFFER];
        rx.read_payload(&mut raw);
        rx.pop();
        let w = decode_write(&raw);
        let src = ex.sends.iter().find_map(|s| match s.state {
            OpState::Active { progress, .. }
                if s.peer == peer
                    && progress & (FORCED_FRAG | SETTLED) == 0
                    && progress != 0
                    && offer::answers(Some(progress as u64 - 1), s.data.len(), &w) =>
            {
                Some(&s.data[..w.len as usize])
            }
            _ => None,
        });
        let word = rx.ring().ack(w.seq);
        match (offer::serve(word, w.seq, src.is_some()), src) {
            (Serve::Write, Some(src)) => {
                let wrote = sys::cma_write(self.pids[l], w.addr, src);
                if let Err(e) = &wrote {
                    tracing::debug!(rank = self.rank, peer, error = %e, "split write failed");
                } else {
                    self.stats.bump("shm split writes", 1);
                }
                offer::written(word, w.seq, wrote.is_ok());
            }
            (Serve::Refused, _) => self.stats.bump("shm split offers refused", 1),
            _ => {}
        }
        self.wake(l);
    }

    /// The error of a failed cross-memory read of a message from `peer`.
    pub(super) fn cma_error(&self, peer: usize, len: usize, e: std::io::Error) -> Error {
        let kind = if sys::is_no_such_process(&e) {
            ErrorKind::PeerFailed
        } else {
            ErrorKind::Io
        };
        Error::new(kind, "recv")
            .on_rank(self.rank)
            .with_peer(peer)
            .with_detail(format!("single-copy read of {len} bytes"))
            .with_source(e)
    }
}
