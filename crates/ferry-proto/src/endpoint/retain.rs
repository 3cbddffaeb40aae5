//! Retained messages (T6; 000 §4.5.7, §5.3.3-5.3.4): a rank killed and restarted by hand
//! catches up by getting again every message it had consumed, and recomputes.
//!
//! With retention on ([`super::EndpointConfig::retain`]):
//! - **Retained outbox.** A message the receiver ACCEPTed is not forgotten: its copy moves to
//!   the retained store (every send is copied, so large messages do not use the zero-copy
//!   rendezvous). The store is bounded: a send that would take the retained and outbox bytes
//!   past [`RetainConfig::cap_bytes`] fails with an error naming the cap, instead of growing
//!   without bound (000's outbox grows forever). A receiver's checkpoint mark
//!   ([`Endpoint::retain_checkpoint`], CONSUMED frames) and its DONE drop what no restart of
//!   it can need any more.
//! - **Incarnations.** Every process draws a nonce, carried in the serial field of its
//!   `Hello`/`HelloAck`. A peer whose connection ends without goodbye is *down*, not failed:
//!   operations with it keep waiting, what it had not ACCEPTed and what this rank retains for
//!   it go back to the outbox, and the peer is dialled again (the driver re-reads the
//!   addresses, so the restart may listen elsewhere). A handshake with a new nonce is its
//!   restart: it gets all of that again (it recomputes from the start, or from its
//!   checkpoint). A peer still down after [`RetainConfig::restart_timeout`]
//!   (`general.failure_timeout_ms`) fails, and the operations waiting for it fail with it: a
//!   permanently dead peer ends in an error, not in endless retries.
//! - **Duplicates.** A restarted rank sends its messages again. Sequence numbers per pair
//!   and flow tell which ones the receiver already has: a message whose serial is below the
//!   flow's next receive (and is not awaited by a posted receive) was consumed, one held in
//!   the inbox arrived before; both are ACCEPTed and dropped, so survivors never see a
//!   message twice and the restarted rank's outbox empties.
//! - **End.** A rank that finished its program tells every peer DONE and leaves only once
//!   every peer did so too (or failed): until then a peer may still restart and need the
//!   messages this rank retains for it.
//!
//! A sender that dies while it retains messages for another dead rank loses nothing that
//! matters: when both are restarted, the sender recomputes and sends those messages again
//! (and the survivors give both what they retained). Only a rank whose peers all ended (every
//! DONE said) can no longer be restarted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::outbox::{OutMsg, OutState};
use super::{
    inbox::RecvState, Action, ConnId, Endpoint, EndpointError, ErrorKind, MsgId, Payload,
    PeerStatus,
};
use crate::fasthash::FastMap;
use crate::frame::{FrameType, Header};
use crate::ident::MsgKey;
use crate::matching::Arrival;

/// Settings of message retention.
#[derive(Debug, Clone)]
pub struct RetainConfig {
    /// Most bytes of sent messages kept (retained plus not yet taken) before a send fails.
    pub cap_bytes: usize,
    /// How long a peer whose connection ended without goodbye may take to come back.
    pub restart_timeout: Duration,
    /// This process's incarnation nonce (non-zero, different for every process).
    pub nonce: u64,
}

/// Counters of message retention (T7).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RetainCounters {
    /// Bytes retained now.
    pub retained_bytes: usize,
    /// Messages retained now.
    pub retained_messages: usize,
    /// Most bytes retained at once.
    pub peak_bytes: usize,
    /// Restarted peers seen (handshakes with a new nonce).
    pub restarts_seen: u64,
    /// Messages sent again to a peer after it went down or restarted.
    pub resent: u64,
    /// Duplicate messages from restarted peers that were ACCEPTed and dropped.
    pub duplicates_dropped: u64,
    /// Retained messages dropped because their receiver marked a checkpoint after them.
    pub dropped_by_checkpoint: u64,
}

#[derive(Debug)]
pub(crate) struct Retain {
    pub cfg: RetainConfig,
    /// Nonce of each peer's current incarnation (0: not met yet).
    peer_nonce: Vec<u64>,
    /// The incarnation each connection was opened with.
    conn_nonce: FastMap<ConnId, u64>,
    /// Peers whose connection ended without goodbye, since when.
    down_since: Vec<Option<Duration>>,
    /// Why each down peer went down.
    down_cause: Vec<String>,
    /// Messages their receivers ACCEPTed, kept for a restart of the receiver.
    kept: BTreeMap<MsgId, Arc<Vec<u8>>>,
    kept_bytes: usize,
    /// DONE received from the peer's current incarnation.
    done_from: Vec<bool>,
    /// DONE sent to the peer's current incarnation.
    done_sent: Vec<bool>,
    /// A peer knew an earlier incarnation of this rank.
    restarted: bool,
    /// Each peer's answer to the question whether it knew an earlier incarnation of this
    /// rank (REJOINED after every handshake; `None` until one came).
    verdict: Vec<Option<bool>>,
    /// This process saw a new incarnation of the peer (its answer on every handshake).
    peer_restarted: Vec<bool>,
    counters: RetainCounters,
}

impl Retain {
    pub fn new(cfg: RetainConfig, size: usize) -> Retain {
        Retain {
            cfg,
            peer_nonce: vec![0; size],
            conn_nonce: FastMap::default(),
            down_since: vec![None; size],
            down_cause: vec![String::new(); size],
            kept: BTreeMap::new(),
            kept_bytes: 0,
            done_from: vec![false; size],
            done_sent: vec![false; size],
            restarted: false,
            verdict: vec![None; size],
            peer_restarted: vec![false; size],
            counters: RetainCounters::default(),
        }
    }

    pub(crate) fn debug(&self) -> String {
        format!(
            "nonces {:x?} down {:?} kept {} done_from {:?} done_sent {:?} restarted {}",
            self.peer_nonce,
            self.down_since,
            self.kept.len(),
            self.done_from,
            self.done_sent,
            self.restarted
        )
    }

    fn drop_kept_where(&mut self, mut gone: impl FnMut(&MsgId) -> bool) -> usize {
        let mut freed = 0;
        let mut n = 0;
        self.kept.retain(|id, d| {
            let drop = gone(id);
            if drop {
                freed += d.len();
                n += 1;
            }
            !drop
        });
        self.kept_bytes -= freed;
        n
    }
}

impl Endpoint {
    /// This process's incarnation nonce for the handshake (0 without retention).
    pub(crate) fn own_nonce(&self) -> u64 {
        self.retain.as_ref().map_or(0, |r| r.cfg.nonce)
    }

    /// Whether message retention is on.
    pub fn retains(&self) -> bool {
        self.retain.is_some()
    }

    /// Whether a peer told this process that it knew an earlier incarnation of its rank
    /// (this process is a restart), as far as the peers it met so far said.
    pub fn is_restart(&self) -> bool {
        self.retain.as_ref().is_some_and(|r| r.restarted)
    }

    /// Whether this process is a restart, once that is known: `Some(true)` as soon as a peer
    /// said it knew an earlier incarnation of this rank, `Some(false)` once every other rank
    /// this endpoint serves said it did not (each answers after every handshake), `None`
    /// before. Without retention always `Some(false)`. See [`Endpoint::contact`].
    pub fn restart_verdict(&self) -> Option<bool> {
        let Some(r) = self.retain.as_ref() else {
            return Some(false);
        };
        if r.restarted {
            return Some(true);
        }
        let all = (0..self.cfg.size)
            .filter(|&p| p != self.cfg.rank && !self.cfg.is_excluded(p))
            .all(|p| r.verdict[p].is_some());
        all.then_some(false)
    }

    /// Opens a connection to `peer` if there is none (its handshake brings its answer for
    /// [`Endpoint::restart_verdict`]); an error if the peer is gone.
    pub fn contact(&mut self, peer: usize, now: Duration) -> Result<(), EndpointError> {
        self.check_peer(peer, "is_restart")?;
        self.now = self.now.max(now);
        if peer == self.cfg.rank {
            return Ok(());
        }
        self.get_conn(peer, "is_restart", now).map(|_| ())
    }

    /// Whether `peer` already answered whether it knew an earlier incarnation of this rank.
    pub fn has_verdict_of(&self, peer: usize) -> bool {
        self.retain
            .as_ref()
            .is_none_or(|r| r.verdict.get(peer).is_some_and(|v| v.is_some()))
    }

    /// Counters of message retention, if it is on.
    pub fn retain_counters(&self) -> Option<RetainCounters> {
        self.retain.as_ref().map(|r| RetainCounters {
            retained_bytes: r.kept_bytes,
            retained_messages: r.kept.len(),
            ..r.counters
        })
    }

    /// Error for a send that would exceed the retention cap, checked before the send takes
    /// its serial (so the flow is not disturbed).
    pub(crate) fn retain_check_room(&self, peer: usize, len: usize) -> Option<EndpointError> {
        let r = self.retain.as_ref()?;
        if peer == self.cfg.rank {
            return None;
        }
        let held = r.kept_bytes.saturating_add(self.outbox_bytes);
        if held.saturating_add(len) <= r.cfg.cap_bytes || held == 0 {
            return None;
        }
        Some(self.error(
            ErrorKind::Exhausted,
            "send",
            peer,
            format!(
                "retained messages would exceed tcp.retain_bytes = {} ({held} bytes held, \
                 message of {len} bytes): with tcp.retain every sent message is kept until \
                 its receiver marks a checkpoint or ends; mark checkpoints or raise the cap",
                r.cfg.cap_bytes
            ),
        ))
    }

    /// An ACCEPTed outbox message: kept for a restart of its receiver.
    pub(crate) fn retain_accepted(&mut self, id: MsgId, m: &OutMsg) {
        let Some(r) = self.retain.as_mut() else {
            return;
        };
        let Some(d) = m.data.as_ref() else {
            return;
        };
        if r.done_from[id.0] {
            // The receiver is done: no restart of it will ask.
            return;
        }
        if let Some(old) = r.kept.insert(id, d.clone()) {
            r.kept_bytes -= old.len();
        }
        r.kept_bytes += d.len();
        r.counters.peak_bytes = r.counters.peak_bytes.max(r.kept_bytes);
    }

    /// Whether `a` is a message this rank already consumed or holds: a restarted peer's
    /// duplicate, ACCEPTed and dropped.
    pub(crate) fn retain_duplicate(&self, a: &Arrival) -> bool {
        if self.retain.is_none() {
            return false;
        }
        (a.serial < self.flows.next_recv(a.source, a.key) && !self.posted.contains_key(a))
            || self.inbox.contains(a)
            || self.overflow.contains_key(a)
    }

    /// Counts a duplicate dropped.
    pub(crate) fn retain_count_duplicate(&mut self) {
        if let Some(r) = self.retain.as_mut() {
            r.counters.duplicates_dropped += 1;
        }
    }

    /// The incarnation of the connection, if recorded.
    pub(crate) fn conn_nonce(&self, conn: ConnId) -> Option<u64> {
        self.retain.as_ref()?.conn_nonce.get(&conn).copied()
    }

    /// Forgets a connection's incarnation.
    pub(crate) fn retain_forget_conn(&mut self, conn: ConnId) {
        if let Some(r) = self.retain.as_mut() {
            r.conn_nonce.remove(&conn);
        }
    }

    /// A handshake on `conn` told the nonce of `peer`'s process: a new one is a restart.
    pub(crate) fn retain_hello(&mut self, conn: ConnId, peer: usize, nonce: u64, now: Duration) {
        let Some(r) = self.retain.as_mut() else {
            return;
        };
        r.conn_nonce.insert(conn, nonce);
        let old = r.peer_nonce[peer];
        r.peer_nonce[peer] = nonce;
        let was_down = r.down_since[peer].take().is_some();
        let restart = old != 0 && old != nonce && nonce != 0;
        if restart {
            r.peer_restarted[peer] = true;
        }
        if nonce != 0 {
            // Tell it on every handshake whether it is a restart (serial 0) or not (1), so
            // that it can find out before it communicates, and resume from a checkpoint of
            // its own or not.
            let serial = u64::from(!r.peer_restarted[peer]);
            let h = Header::control(
                FrameType::Rejoined,
                MsgKey::user(0),
                self.cfg.rank as u32,
                peer as u32,
                serial,
            );
            self.transmit(conn, h, Payload::None);
        }
        if !restart {
            return;
        }
        let Some(r) = self.retain.as_mut() else {
            return;
        };
        r.counters.restarts_seen += 1;
        r.done_from[peer] = false;
        r.done_sent[peer] = false;
        if !was_down {
            // Its death was not noticed (no connection, or its end of stream is still on the
            // way): connections of the old incarnation go now, and it gets everything again.
            let stale: Vec<ConnId> = {
                let Some(r) = self.retain.as_ref() else {
                    return;
                };
                let mut v: Vec<ConnId> = r
                    .conn_nonce
                    .iter()
                    .filter(|(_, &n)| n == old)
                    .map(|(&c, _)| c)
                    .collect();
                v.sort_unstable();
                v
            };
            for c in stale {
                if self.conns.get(&c).is_some_and(|c| c.peer == Some(peer)) {
                    self.forget(c);
                    self.actions.push_back(Action::Drop(c));
                }
            }
            self.reset_peer(peer, now);
        }
        self.peers[peer].first_failure = None;
        self.peers[peer].retry_at = None;
    }

    /// `peer`'s connection ended without goodbye: with retention it is down (waiting for a
    /// restart), not failed. Returns `false` if retention is off (the caller fails it).
    pub(crate) fn retain_peer_down(
        &mut self,
        conn_nonce: Option<u64>,
        peer: usize,
        cause: String,
    ) -> bool {
        let now = self.now;
        let Some(r) = self.retain.as_mut() else {
            return false;
        };
        if conn_nonce.is_some_and(|n| n != r.peer_nonce[peer]) {
            // A connection of an earlier incarnation: its end is old news.
            return true;
        }
        if r.done_from[peer] {
            // It had finished its program: nothing more is owed either way; it ends like a
            // peer that said goodbye.
            self.peers[peer].status = PeerStatus::Finished {
                after_failure_of: None,
            };
            self.fail_ops_with(peer);
            return true;
        }
        if r.down_since[peer].is_some() {
            return true;
        }
        r.down_since[peer] = Some(now);
        r.down_cause[peer] = cause;
        r.done_sent[peer] = false;
        let mut ids: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.peer == Some(peer))
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            self.forget(id);
            self.actions.push_back(Action::Drop(id));
        }
        self.reset_peer(peer, now);
        true
    }

    /// Everything exchanged with `peer`'s lost incarnation starts over: its announcements
    /// are void (its outbox died with it), receives from it wait afresh, and what this rank
    /// sent it, ACCEPTed or not, goes out again.
    fn reset_peer(&mut self, peer: usize, now: Duration) {
        self.remote.retain(|a, _| a.source != peer);
        self.want_get.retain(|a| a.source != peer);
        for (a, p) in self.posted.iter_mut() {
            if a.source == peer && p.state != RecvState::Waiting {
                p.state = RecvState::Waiting;
            }
        }
        let mut again: Vec<MsgId> = Vec::new();
        for (id, m) in self.outbox.iter_mut() {
            if id.0 == peer && m.state != OutState::Unsent {
                m.state = OutState::Unsent;
                m.since = now;
                again.push(*id);
            }
        }
        let Some(r) = self.retain.as_mut() else {
            return;
        };
        let lo = (peer, MsgKey::new(0, crate::ident::MsgKind(0), 0), 0);
        let hi = (peer + 1, MsgKey::new(0, crate::ident::MsgKind(0), 0), 0);
        let ids: Vec<MsgId> = r.kept.range(lo..hi).map(|(id, _)| *id).collect();
        for id in ids {
            if let Some(d) = r.kept.remove(&id) {
                r.kept_bytes -= d.len();
                let len = d.len();
                self.outbox_bytes += len;
                self.outbox.insert(
                    id,
                    OutMsg {
                        data: Some(d),
                        op: None,
                        len,
                        state: OutState::Unsent,
                        since: now,
                    },
                );
                again.push(id);
            }
        }
        again.sort_unstable();
        r.counters.resent += again.len() as u64;
        self.unsent.extend(again);
    }

    /// REJOINED: whether the peer knew an earlier incarnation of this rank (serial 0) or not
    /// (serial 1).
    pub(crate) fn on_rejoined(&mut self, peer: usize, serial: u64) {
        if let Some(r) = self.retain.as_mut() {
            let knew = serial == 0;
            r.restarted |= knew;
            if let Some(v) = r.verdict.get_mut(peer) {
                *v = Some(v.unwrap_or(false) || knew);
            }
        }
    }

    /// The peer is done: it asks nothing of this rank any more.
    pub(crate) fn on_done(&mut self, peer: usize) {
        let Some(r) = self.retain.as_mut() else {
            return;
        };
        r.done_from[peer] = true;
        r.drop_kept_where(|id| id.0 == peer);
    }

    /// CONSUMED from `peer`: it checkpointed after consuming flow `h.key` below `h.serial`.
    pub(crate) fn on_consumed(&mut self, peer: usize, h: &Header) {
        let Some(r) = self.retain.as_mut() else {
            return;
        };
        let lo = (peer, h.key, 0);
        let hi = (peer, h.key, h.serial);
        if lo >= hi {
            return;
        }
        let ids: Vec<MsgId> = r.kept.range(lo..hi).map(|(id, _)| *id).collect();
        for id in &ids {
            if let Some(d) = r.kept.remove(id) {
                r.kept_bytes -= d.len();
            }
        }
        r.counters.dropped_by_checkpoint += ids.len() as u64;
    }

    /// Marks a checkpoint of this rank's program: every message it consumed so far will never
    /// be asked for again (a restart resumes after this point), so each sender is told to drop
    /// its retained copies (CONSUMED per flow). The program must have no receive pending.
    /// Frames to peers without a connection go once one is open (they are re-sent at the next
    /// checkpoint otherwise); a later checkpoint covers an earlier one.
    pub fn retain_checkpoint(&mut self, now: Duration) {
        if self.retain.is_none() {
            return;
        }
        for peer in 0..self.cfg.size {
            if peer == self.cfg.rank || self.peers[peer].status != PeerStatus::Alive {
                continue;
            }
            let flows = self.flows.recv_counters_from(peer);
            if flows.is_empty() {
                continue;
            }
            let Ok(Some(c)) = self.get_conn(peer, "checkpoint", now) else {
                continue;
            };
            for (key, next) in flows {
                let h = Header::control(
                    FrameType::Consumed,
                    key,
                    peer as u32,
                    self.cfg.rank as u32,
                    next,
                );
                self.transmit(c, h, Payload::None);
            }
        }
    }

    /// When a retention deadline (a down peer's restart timeout) is due.
    pub(crate) fn retain_deadline(&self) -> Option<Duration> {
        let r = self.retain.as_ref()?;
        r.down_since
            .iter()
            .enumerate()
            .filter_map(|(p, since)| {
                let t = (*since)? + r.cfg.restart_timeout;
                // Its next dial, if none is under way.
                let dial = self.peers[p]
                    .retry_at
                    .filter(|_| self.peers[p].n_conns == 0);
                Some(dial.map_or(t, |d| d.min(t)))
            })
            .min()
    }

    /// Fails the down peers whose restart did not come in time.
    pub(crate) fn retain_expire(&mut self, now: Duration) {
        let Some(r) = self.retain.as_mut() else {
            return;
        };
        let timeout = r.cfg.restart_timeout;
        let mut expired = Vec::new();
        for (p, since) in r.down_since.iter_mut().enumerate() {
            if since.is_some_and(|t| now >= t + timeout) {
                *since = None;
                expired.push((p, std::mem::take(&mut r.down_cause[p])));
            }
        }
        // The others are dialled until they answer: a restart that needs nothing from this rank
        // would not dial it, yet must get what this rank retains for it.
        let down: Vec<usize> = r
            .down_since
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .map(|(p, _)| p)
            .collect();
        for p in down {
            if self.peers[p].n_conns == 0 && self.peers[p].retry_at.is_none_or(|t| now >= t) {
                let _ = self.get_conn(p, "probe", now);
            }
        }
        for (p, cause) in expired {
            self.mark_dead(
                p,
                format!(
                    "{cause}, and it was not restarted within {timeout:?} \
                     (general.failure_timeout_ms)"
                ),
            );
        }
    }

    /// A down peer is retried without the connect timeout's limit (its restart timeout
    /// decides); returns whether `peer` is down.
    pub(crate) fn retain_is_down(&self, peer: usize) -> bool {
        self.retain
            .as_ref()
            .is_some_and(|r| r.down_since[peer].is_some())
    }

    /// How long a peer may take to (re)start with retention on (zero when off).
    pub(crate) fn retain_restart_timeout(&self) -> Duration {
        self.retain
            .as_ref()
            .map_or(Duration::ZERO, |r| r.cfg.restart_timeout)
    }

    /// Drops what is retained for `peer`, which failed for good.
    pub(crate) fn retain_peer_dead(&mut self, peer: usize) {
        if let Some(r) = self.retain.as_mut() {
            r.drop_kept_where(|id| id.0 == peer);
            r.down_since[peer] = None;
        }
    }

    /// With retention a peer that failed for good (not restarted in time) fails this rank's
    /// end too: the job did not complete.
    pub(crate) fn retain_finish_error(&self) -> Option<EndpointError> {
        self.retain.as_ref()?;
        let p = (0..self.cfg.size)
            .find(|&p| matches!(self.peers[p].status, PeerStatus::Dead { .. }))?;
        self.peer_gone("finish", p)
    }

    /// Finish with retention: DONE to every peer, then wait for every peer's DONE (or its
    /// end). `true` once this rank may say goodbye.
    pub(crate) fn retain_may_leave(&mut self, now: Duration) -> bool {
        if self.retain.is_none() {
            return true;
        }
        if (0..self.cfg.size).any(|p| matches!(self.peers[p].status, PeerStatus::Dead { .. })) {
            // The job failed (a peer did not come back): nobody will restart to use what this
            // rank retains; its goodbye tells the others which rank failed.
            return true;
        }
        let mut all = true;
        for p in 0..self.cfg.size {
            if p == self.cfg.rank || self.peers[p].status != PeerStatus::Alive {
                continue;
            }
            let sent = self.retain.as_ref().is_some_and(|r| r.done_sent[p]);
            if !sent {
                if let Ok(Some(c)) = self.get_conn(p, "finish", now) {
                    let h = Header::control(
                        FrameType::Done,
                        MsgKey::user(0),
                        self.cfg.rank as u32,
                        p as u32,
                        0,
                    );
                    self.transmit(c, h, Payload::None);
                    if let Some(r) = self.retain.as_mut() {
                        r.done_sent[p] = true;
                    }
                }
            }
            if !self.retain.as_ref().is_some_and(|r| r.done_from[p]) {
                all = false;
            }
        }
        all
    }
}

/// First bytes of a checkpoint token.
const TOKEN_MAGIC: &[u8; 4] = b"FRTK";
/// Bytes per flow in a token: peer, generation, kind, tag, next send, next receive.
const TOKEN_FLOW: usize = 4 + 4 + 1 + 4 + 8 + 8;

impl Endpoint {
    /// The flow counters of this rank as a token the program saves with its checkpoint; a
    /// restart resumes them with [`Endpoint::retain_resume`], so its serials continue where
    /// the checkpoint was.
    pub fn retain_token(&self) -> Vec<u8> {
        let flows = self.flows.counters();
        let mut t = Vec::with_capacity(16 + flows.len() * TOKEN_FLOW);
        t.extend_from_slice(TOKEN_MAGIC);
        t.extend_from_slice(&(self.cfg.rank as u32).to_le_bytes());
        t.extend_from_slice(&(self.cfg.size as u32).to_le_bytes());
        t.extend_from_slice(&(flows.len() as u32).to_le_bytes());
        for (peer, key, send, recv) in flows {
            t.extend_from_slice(&(peer as u32).to_le_bytes());
            t.extend_from_slice(&key.generation.to_le_bytes());
            t.push(key.kind.0);
            t.extend_from_slice(&key.tag.to_le_bytes());
            t.extend_from_slice(&send.to_le_bytes());
            t.extend_from_slice(&recv.to_le_bytes());
        }
        t
    }

    /// Resumes the flow counters of a checkpoint token of this rank (see
    /// [`Endpoint::retain_token`]). A token of another rank or job size, or a damaged one, is
    /// refused with the reason.
    pub fn retain_resume(&mut self, token: &[u8]) -> Result<(), String> {
        let u32_at = |i: usize| -> Option<u32> {
            Some(u32::from_le_bytes(token.get(i..i + 4)?.try_into().ok()?))
        };
        let u64_at = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(token.get(i..i + 8)?.try_into().ok()?))
        };
        if token.get(..4) != Some(&TOKEN_MAGIC[..]) {
            return Err("not a ferry checkpoint token".into());
        }
        let (Some(rank), Some(size), Some(n)) = (u32_at(4), u32_at(8), u32_at(12)) else {
            return Err("truncated checkpoint token".into());
        };
        if rank as usize != self.cfg.rank || size as usize != self.cfg.size {
            return Err(format!(
                "checkpoint token of rank {rank} of {size}, this is rank {} of {}",
                self.cfg.rank, self.cfg.size
            ));
        }
        let n = n as usize;
        if token.len() != 16 + n * TOKEN_FLOW {
            return Err(format!(
                "checkpoint token of {} bytes, {n} flows need {}",
                token.len(),
                16 + n * TOKEN_FLOW
            ));
        }
        let mut flows = Vec::with_capacity(n);
        for f in 0..n {
            let o = 16 + f * TOKEN_FLOW;
            let fields = (|| {
                let peer = u32_at(o)? as usize;
                let generation = u32_at(o + 4)?;
                let kind = *token.get(o + 8)?;
                let tag = u32_at(o + 9)?;
                Some((
                    peer,
                    MsgKey::new(generation, crate::ident::MsgKind(kind), tag),
                    u64_at(o + 13)?,
                    u64_at(o + 21)?,
                ))
            })();
            match fields {
                Some(f) if f.0 < self.cfg.size => flows.push(f),
                _ => return Err(format!("checkpoint token: flow {f} is damaged")),
            }
        }
        for (peer, key, send, recv) in flows {
            self.flows.set_counters(peer, key, send, recv);
        }
        // What arrived before the resume (e.g. while `contact` found out that this process is
        // a restart) and lies before the checkpoint is a duplicate now: dropped, or pulled
        // and dropped if it waits in its sender's outbox, so that the sender frees it.
        let old = |a: &Arrival, flows: &crate::ident::FlowTable| {
            a.serial < flows.next_recv(a.source, a.key)
        };
        let flows = &self.flows;
        self.inbox.retain(|a| !old(a, flows));
        self.overflow.retain(|a, _| !old(a, flows));
        let mut pull: Vec<Arrival> = self
            .remote
            .iter()
            .filter(|(a, asked)| !**asked && old(a, &self.flows))
            .map(|(a, _)| *a)
            .collect();
        pull.sort_unstable_by_key(|a| (a.source, a.key, a.serial));
        self.want_get.extend(pull);
        Ok(())
    }
}
