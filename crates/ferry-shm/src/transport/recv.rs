//! Receiving: taking messages out of the rings, claiming and reading single-copy
//! descriptors, matching arrivals to posted receives and keeping early arrivals.

use super::*;

impl ShmTransport {
    // ----- receiving -----------------------------------------------------------------------

    pub(super) fn len_error(&self, peer: usize, len: usize, want: PrepareError) -> Error {
        want.to_error("recv", len)
            .on_rank(self.rank)
            .with_peer(peer)
    }

    /// Takes descriptor `seq` from `l` for reading. Withdrawn: its fragments follow in the
    /// ring. Aborted (the sender's operation failed): an error naming the sender, or the rank
    /// whose failure made the sender fail.
    pub(super) fn claim(&self, l: usize, peer: usize, seq: u64) -> Result<bool> {
        let Some(rx) = self.rx[l].as_ref() else {
            return Ok(false);
        };
        match ring::claim(rx.ring().ack(seq), seq) {
            Claim::Got => Ok(true),
            Claim::Withdrawn => Ok(false),
            Claim::Aborted => {
                debug_assert_eq!(self.global_of[l], peer);
                Err(self.sender_gave_up(l, "its send failed before this rank took it"))
            }
        }
    }

    /// Reads a claimed single-copy message into `buf` and completes the descriptor.
    pub(super) fn cma_into(
        &mut self,
        l: usize,
        peer: usize,
        d: CmaDesc,
        buf: &mut RecvBuf<'_>,
    ) -> Result<()> {
        let len = d.len as usize;
        let mut mapped = false;
        let result = match buf.prepare(len) {
            Ok(dst) => {
                if let Some(h) = d.heap {
                    // One memcpy from the sender's region; where it cannot be mapped
                    // (freed, not permitted), cross-memory attach reads the same bytes.
                    match self.heap_maps.copy(self.pids[l], &h, d.addr, dst) {
                        Ok(()) => mapped = true,
                        Err(e) => {
                            tracing::debug!(rank = self.rank, peer, error = %e, "shared-heap region not mapped");
                            self.stats.bump("shm heap regions not mapped", 1);
                        }
                    }
                }
                if mapped {
                    Ok(())
                } else {
                    sys::cma_read(self.pids[l], d.addr, dst)
                        .map_err(|e| self.cma_error(peer, len, e))
                }
            }
            Err(want) => Err(self.len_error(peer, len, want)),
        };
        // Complete the descriptor even on failure so the sender does not wait forever; the
        // error surfaces here.
        if let Some(rx) = self.rx[l].as_ref() {
            ring::complete(rx.ring().ack(d.seq), d.seq);
        }
        self.wake(l);
        result?;
        self.stats.bump(
            if mapped {
                "shm shared-heap copies"
            } else {
                "shm single-copy reads"
            },
            1,
        );
        self.stats.record_recv(peer, len);
        Ok(())
    }

    pub(super) fn find_recv(ex: &Exchange<'_>, peer: usize, a: &Arrival) -> Option<usize> {
        ex.recvs.iter().position(|r| {
            r.peer == peer
                && r.key == a.key
                && matches!(r.state, OpState::Active { serial, .. } if serial == a.serial)
        })
    }

    /// Consumes entries of the ring from segment index `l`; stops when it is empty, when an
    /// early arrival does not fit (back-pressure) or after a bounded number of entries.
    pub(super) fn drain(&mut self, l: usize, ex: &mut Exchange<'_>) -> Result<()> {
        let peer = self.global_of[l];
        let mut popped = 0usize;
        let mut result = self.drain_inner(l, peer, ex, &mut popped);
        if popped > 0 {
            // The sender may wait for room.
            self.wake(l);
        }
        // Descriptors were claimed as they came (so the sender does not withdraw them while
        // earlier ones are read); read them now. Claimed ones are always completed.
        let mut reads = std::mem::take(&mut self.to_read);
        for (i, d) in reads.drain(..) {
            let r = match self.try_split(l, peer, d, i, ex) {
                Ok(true) => Ok(()),
                Ok(false) => {
                    let r = &mut ex.recvs[i];
                    let read = self.cma_into(l, peer, d, &mut r.buf);
                    if read.is_ok() {
                        r.state = OpState::Done;
                    }
                    read
                }
                Err(e) => {
                    // Claimed ones are always completed (a started split by `settle_splits`).
                    if !self.splits.iter().any(|s| s.desc.seq == d.seq && s.l == l) {
                        if let Some(rx) = self.rx[l].as_ref() {
                            ring::complete(rx.ring().ack(d.seq), d.seq);
                        }
                    }
                    Err(e)
                }
            };
            if let Err(e) = r {
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        self.to_read = reads;
        result
    }

    pub(super) fn drain_inner(
        &mut self,
        l: usize,
        peer: usize,
        ex: &mut Exchange<'_>,
        popped: &mut usize,
    ) -> Result<()> {
        let cap = self.inline_cap;
        while *popped < 256 {
            let Some(e) = self.rx[l].as_ref().and_then(|c| c.peek()) else {
                return Ok(());
            };
            if e.typ == T_WRITE {
                // Not a message: the peer offers part of its receive buffer for one of this
                // rank's sends (`split.rs`).
                self.serve_write(l, peer, ex);
                *popped += 1;
                continue;
            }
            let arrival = Arrival {
                source: peer,
                key: e.key,
                serial: e.serial,
            };
            let total = e.total_len as usize;
            if e.typ != T_CMA && !self.pending_cma.is_empty() {
                // The same message as a withdrawn descriptor kept earlier: forget that.
                self.pending_cma.remove(&arrival);
            }
            if !self.given_up.is_empty()
                && e.typ != T_FRAG
                && self.given_up.contains(&arrival)
                && self.drop_given_up(l, &arrival, e.typ)
            {
                *popped += 1;
                continue;
            }
            match e.typ {
                T_INLINE => {
                    if total > cap {
                        return Err(self.protocol(peer, "inline entry longer than a slot"));
                    }
                    match Self::find_recv(ex, peer, &arrival) {
                        Some(i) => {
                            let r = &mut ex.recvs[i];
                            let Some(rx) = self.rx[l].as_mut() else {
                                return Ok(());
                            };
                            match r.buf.prepare(total) {
                                Ok(dst) => rx.read_payload(dst),
                                Err(want) => {
                                    rx.pop();
                                    *popped += 1;
                                    return Err(self.len_error(peer, total, want));
                                }
                            }
                            rx.pop();
                            r.state = OpState::Done;
                            self.stats.record_recv(peer, total);
                        }
                        None => {
                            if !self.room_for(total) {
                                self.stats.bump("shm inbox full stops", 1);
                                return Ok(());
                            }
                            let Some(rx) = self.rx[l].as_mut() else {
                                return Ok(());
                            };
                            let mut v = vec![0u8; total];
                            rx.read_payload(&mut v);
                            rx.pop();
                            self.inbox.insert(arrival, v).map_err(|err| {
                                self.protocol(peer, "duplicate message").with_source(err)
                            })?;
                        }
                    }
                }
                T_FRAG => {
                    if self.partial[l].is_none() {
                        let given_up = !self.given_up.is_empty() && self.given_up.remove(&arrival);
                        let target = match Self::find_recv(ex, peer, &arrival) {
                            _ if given_up => Target::Discard,
                            Some(i) => {
                                if let Err(want) = ex.recvs[i].buf.prepare(total) {
                                    return Err(self.len_error(peer, total, want));
                                }
                                Target::Op(i)
                            }
                            None => {
                                if self.defer_early(l, peer, &arrival, ex) {
                                    return Ok(());
                                }
                                if !self.room_for(total) {
                                    self.stats.bump("shm inbox full stops", 1);
                                    return Ok(());
                                }
                                self.stats.bump("shm pipelined messages buffered early", 1);
                                self.partial_bytes += total;
                                self.partial_count += 1;
                                Target::Buf(vec![0u8; total])
                            }
                        };
                        self.partial[l] = Some(Partial {
                            arrival,
                            total,
                            received: 0,
                            target,
                        });
                    }
                    let Some(mut p) = self.partial[l].take() else {
                        return Ok(());
                    };
                    if p.arrival != arrival || p.total != total {
                        return Err(self.protocol(peer, "fragment of another message interleaved"));
                    }
                    let Some(span_cap) = self.rx[l].as_ref().map(|c| c.head_cap()) else {
                        return Ok(());
                    };
                    let chunk = span_cap.min(total - p.received);
                    if let Target::Op(i) = p.target {
                        let ok = ex.recvs.get(i).is_some_and(|r| {
                            r.peer == peer
                                && r.key == arrival.key
                                && matches!(r.state, OpState::Active { serial, .. } if serial == arrival.serial)
                        });
                        if !ok {
                            return Err(self.protocol(
                                peer,
                                "fragmented message lost its receive (an earlier exchange failed)",
                            ));
                        }
                    }
                    let Some(rx) = self.rx[l].as_mut() else {
                        return Ok(());
                    };
                    let mut len_err = None;
                    match &mut p.target {
                        Target::Op(i) => match ex.recvs[*i].buf.prepare(total) {
                            Ok(dst) => rx.read_chunk(&mut dst[p.received..p.received + chunk]),
                            Err(want) => len_err = Some(want),
                        },
                        Target::Buf(v) => rx.read_chunk(&mut v[p.received..p.received + chunk]),
                        Target::Discard => {}
                    }
                    rx.pop();
                    *popped += 1;
                    if let Some(want) = len_err {
                        return Err(self.len_error(peer, total, want));
                    }
                    p.received += chunk;
                    if p.received == total {
                        match p.target {
                            Target::Op(i) => {
                                ex.recvs[i].state = OpState::Done;
                                self.stats.record_recv(peer, total);
                            }
                            Target::Discard => {
                                self.stats
                                    .bump("shm messages dropped (receive given up)", 1);
                            }
                            Target::Buf(v) => {
                                self.partial_bytes -= total;
                                self.partial_count -= 1;
                                // Its receive may have been posted while it streamed in: hand
                                // it over now. Parked in the inbox, it would be taken only by
                                // the next pass, and a liveness check in between would see an
                                // empty ring and a finished sender and report a message that
                                // is here as missing.
                                match Self::find_recv(ex, peer, &arrival) {
                                    Some(i) => {
                                        let r = &mut ex.recvs[i];
                                        r.buf
                                            .fill_from(v)
                                            .map_err(|want| self.len_error(peer, total, want))?;
                                        r.state = OpState::Done;
                                        self.stats.record_recv(peer, total);
                                    }
                                    None => {
                                        self.inbox.insert(arrival, v).map_err(|err| {
                                            self.protocol(peer, "duplicate message")
                                                .with_source(err)
                                        })?;
                                    }
                                }
                            }
                        }
                    } else {
                        self.partial[l] = Some(p);
                    }
                    continue;
                }
                T_CMA => {
                    let Some(rx) = self.rx[l].as_mut() else {
                        return Ok(());
                    };
                    let mut raw = [0u8; CMA_DESC];
                    rx.read_payload(&mut raw);
                    rx.pop();
                    let d = decode_cma(&raw);
                    if d.len != e.total_len {
                        *popped += 1;
                        return Err(self.protocol(peer, "descriptor length mismatch"));
                    }
                    match Self::find_recv(ex, peer, &arrival) {
                        Some(i) => {
                            *popped += 1;
                            if self
                                .claim(l, peer, d.seq)
                                .map_err(|e| e.with_key(arrival.key))?
                            {
                                self.to_read.push((i, d));
                            }
                            continue;
                        }
                        None => {
                            self.pending_cma.insert(arrival, d);
                        }
                    }
                }
                T_ABORT => {
                    if let Some(rx) = self.rx[l].as_mut() {
                        rx.pop();
                    }
                    *popped += 1;
                    if let Some(p) = self.partial[l].take_if(|p| p.arrival == arrival) {
                        match p.target {
                            Target::Buf(_) => {
                                self.partial_bytes -= p.total;
                                self.partial_count -= 1;
                            }
                            Target::Discard => continue,
                            Target::Op(_) => {
                                return Err(self.abandoned_error(l).with_key(arrival.key))
                            }
                        }
                    }
                    if Self::find_recv(ex, peer, &arrival).is_some() {
                        return Err(self.abandoned_error(l).with_key(arrival.key));
                    }
                    self.abandoned.insert(arrival);
                    continue;
                }
                other => {
                    return Err(self.protocol(peer, &format!("unknown entry type {other}")));
                }
            }
            *popped += 1;
        }
        Ok(())
    }

    /// Whether the first chunk of a pipelined message from `l` whose receive is not posted
    /// stays in the ring for now. Taken early, it would be copied into a buffer of its own and
    /// once more into the receive buffer later (three copies instead of two); left in the
    /// ring, its receive (typically the program's next call) takes it straight into place
    /// while the sender keeps filling the ring behind it. It is taken early all the same when
    /// a receive of this exchange from the same peer waits behind it, or once it has waited
    /// `eager_wait`: a send never waits for its receive to be posted (no send/send deadlock).
    fn defer_early(&mut self, l: usize, peer: usize, arrival: &Arrival, ex: &Exchange<'_>) -> bool {
        if ex
            .recvs
            .iter()
            .any(|r| r.peer == peer && r.state != OpState::Done)
        {
            return false;
        }
        match self.deferred[l] {
            Some((a, since)) if a == *arrival => since.elapsed() < self.eager_wait,
            _ => {
                self.deferred[l] = Some((*arrival, Instant::now()));
                true
            }
        }
    }

    /// Drops the entry at the head of `l`'s ring, of type `typ`, for a message whose receive
    /// was given up (see `given_up`). False if it is not to be dropped here (a fragment, which
    /// the fragment path discards). A withdrawn descriptor stays given up: its fragments
    /// follow.
    fn drop_given_up(&mut self, l: usize, arrival: &Arrival, typ: u8) -> bool {
        let Some(rx) = self.rx[l].as_mut() else {
            return false;
        };
        match typ {
            T_CMA => {
                let mut raw = [0u8; CMA_DESC];
                rx.read_payload(&mut raw);
                rx.pop();
                if self.drop_descriptor(l, decode_cma(&raw).seq) {
                    self.given_up.remove(arrival);
                }
            }
            T_INLINE | T_ABORT => {
                rx.pop();
                self.given_up.remove(arrival);
                if typ == T_INLINE {
                    self.stats
                        .bump("shm messages dropped (receive given up)", 1);
                }
            }
            _ => return false,
        }
        true
    }

    pub(super) fn protocol(&self, peer: usize, what: &str) -> Error {
        self.err(ErrorKind::Protocol, "recv")
            .with_peer(peer)
            .with_detail(what.to_string())
    }

    pub(super) fn progress_recvs(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        // Assign serials and take what already arrived.
        for i in 0..ex.recvs.len() {
            let r = &mut ex.recvs[i];
            if r.state == OpState::Done {
                continue;
            }
            check_peer(self.rank, self.size, r.peer, "recv")?;
            let Some(l) = self.local_of[r.peer] else {
                continue;
            };
            self.open_rx(l);
            let serial = match r.state {
                OpState::New => {
                    let serial = self.recv_flows.take(r.peer, r.key);
                    r.state = OpState::Active {
                        serial,
                        progress: 0,
                    };
                    serial
                }
                OpState::Active { serial, progress } => {
                    if progress & SETTLED != 0 {
                        return Err(self
                            .err(ErrorKind::InvalidArgument, "recv")
                            .with_peer(r.peer)
                            .with_detail(
                                "this receive was given up when an earlier attempt of its \
                                 exchange failed",
                            ));
                    }
                    if progress & split::SPLIT_PENDING != 0 {
                        // Its split copy is progressed by `progress_splits`, or was finished
                        // while another exchange was driven.
                        let peer = r.peer;
                        if let Some(len) = self.take_split_done(l, r.key, serial) {
                            r.state = OpState::Done;
                            self.stats.record_recv(peer, len);
                        }
                        continue;
                    }
                    serial
                }
                OpState::Done => continue,
            };
            if matches!(&self.partial[l], Some(Partial { target: Target::Op(j), .. }) if *j == i) {
                continue;
            }
            let arrival = Arrival {
                source: r.peer,
                key: r.key,
                serial,
            };
            if !self.inbox.is_empty() {
                if let Some(payload) = self.inbox.take(&arrival) {
                    let len = payload.len();
                    let peer = r.peer;
                    r.buf
                        .fill_from(payload)
                        .map_err(|want| self.len_error(peer, len, want))?;
                    r.state = OpState::Done;
                    self.stats.record_recv(peer, len);
                    continue;
                }
            }
            if !self.abandoned.is_empty() && self.abandoned.remove(&arrival) {
                return Err(self.abandoned_error(l).with_key(arrival.key));
            }
            if !self.pending_cma.is_empty() {
                if let Some(d) = self.pending_cma.remove(&arrival) {
                    // A withdrawn descriptor is dropped: its fragments follow.
                    if self
                        .claim(l, r.peer, d.seq)
                        .map_err(|e| e.with_key(arrival.key))?
                    {
                        let peer = r.peer;
                        match self.try_split(l, peer, d, i, ex) {
                            Ok(true) => {}
                            Ok(false) => {
                                let r = &mut ex.recvs[i];
                                self.cma_into(l, peer, d, &mut r.buf)?;
                                r.state = OpState::Done;
                            }
                            Err(e) => {
                                if !self.splits.iter().any(|s| s.desc.seq == d.seq && s.l == l) {
                                    if let Some(rx) = self.rx[l].as_ref() {
                                        ring::complete(rx.ring().ack(d.seq), d.seq);
                                    }
                                }
                                return Err(e);
                            }
                        }
                    }
                }
            }
        }
        // Then drain the open rings (and those of peers that started sending to this rank),
        // round-robin from a moving start for fairness.
        self.discover_senders();
        let n = self.active_rx.len();
        let start = self.drain_start % n.max(1);
        self.drain_start = (start + 1) % n.max(1);
        for k in 0..n {
            let l = self.active_rx[(start + k) % n];
            if self.rx[l].as_ref().is_some_and(|c| c.has_data()) {
                self.drain(l, ex)?;
            }
        }
        if !self.splits.is_empty() {
            self.progress_splits(ex)?;
        }
        for r in ex.recvs.iter() {
            if r.state != OpState::Done {
                if let Some(l) = self.local_of.get(r.peer).copied().flatten() {
                    self.waiting.push(l);
                }
            }
        }
        Ok(())
    }

    /// The lean path of `recv` for a message waiting inline at the head of `l`'s ring.
    /// Returns Ok(true) when it delivered the message, Ok(false) when the general path must
    /// take over (serial already assigned).
    pub(super) fn try_fast_recv(
        &mut self,
        l: usize,
        peer: usize,
        key: MsgKey,
        serial: u64,
        buf: &mut RecvBuf<'_>,
    ) -> Result<bool> {
        let arrival = Arrival {
            source: peer,
            key,
            serial,
        };
        // The clock is read only once the message is late (a read costs ~40 ns here).
        let mut start: Option<Instant> = None;
        let mut spins: u32 = 0;
        // With statistics on: since when this receive waits (set at its first empty poll).
        let mut waited_from: Option<Instant> = None;
        let result = loop {
            let Some(rx) = self.rx[l].as_mut() else {
                break Ok(false);
            };
            if let Some(e) = rx.peek() {
                if e.typ != T_INLINE || e.total_len as usize > self.inline_cap {
                    break Ok(false);
                }
                let len = e.total_len as usize;
                if e.key == key && e.serial == serial {
                    // A length mismatch is reported by the general path.
                    let Ok(dst) = buf.prepare(len) else {
                        break Ok(false);
                    };
                    rx.read_payload(dst);
                    rx.pop();
                    self.wake(l);
                    self.stats.record_recv(peer, len);
                    break Ok(true);
                }
                let other = Arrival {
                    source: peer,
                    key: e.key,
                    serial: e.serial,
                };
                if !self.given_up.is_empty() && self.given_up.remove(&other) {
                    // Its receive was given up: nobody takes it.
                    rx.pop();
                    self.wake(l);
                    self.stats
                        .bump("shm messages dropped (receive given up)", 1);
                    continue;
                }
                // Another flow's message: keep it for its receive.
                let room = self.inbox.len() + self.partial_count < self.inbox_cap_messages
                    && self.inbox.bytes() + self.partial_bytes + len <= self.inbox_cap_bytes;
                if !room {
                    break Ok(false);
                }
                let mut v = vec![0u8; len];
                rx.read_payload(&mut v);
                rx.pop();
                self.inbox
                    .insert(other, v)
                    .map_err(|err| self.protocol(peer, "duplicate message").with_source(err))?;
                self.wake(l);
                if let Some(p) = self.inbox.take(&arrival) {
                    let n = p.len();
                    buf.fill_from(p)
                        .map_err(|want| self.len_error(peer, n, want))?;
                    self.stats.record_recv(peer, n);
                    break Ok(true);
                }
                continue;
            }
            if spins == 0 && self.waits.on {
                waited_from = Some(Instant::now());
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                let waited = start.get_or_insert_with(Instant::now).elapsed();
                if waited >= self.policy.spin {
                    break Ok(false);
                }
                // A yield costs about a microsecond here: pure spinning first, so that a
                // dedicated core answers in tens of nanoseconds; then yield, so that ranks
                // outnumbering cores let the sender run (not a rank alone on its CPU).
                if waited >= PURE_SPIN && !self.policy.yield_each_poll && self.policy.spin_yields {
                    self.waits.yield_now();
                }
            }
            // Oversubscribed host (more local ranks than cores, `general.yield_when_idle`):
            // the sender may be waiting for this core, so hand it over on every idle poll.
            if self.policy.yield_each_poll {
                self.waits.yield_now();
            }
            std::hint::spin_loop();
        };
        if let Some(t) = waited_from {
            self.waits.lean_waits += 1;
            self.waits.lean_ns = self.waits.lean_ns.saturating_add(super::waits::ns_since(t));
        }
        result
    }

    /// The lean start of a receive from the node-local `peer` (validated): taken when the
    /// message is already here or arrives inline while this rank spins (at most the wait
    /// policy's spin time; it never blocks). Otherwise returns the flow serial it took, like
    /// [`ShmTransport::send_start`].
    pub fn recv_start(
        &mut self,
        peer: usize,
        key: MsgKey,
        buf: &mut RecvBuf<'_>,
    ) -> Result<Option<u64>> {
        let serial = self.recv_flows.take(peer, key);
        if let Some(l) = self.local_of[peer] {
            if l != self.me && self.partial[l].is_none() {
                self.open_rx(l);
                let arrival = Arrival {
                    source: peer,
                    key,
                    serial,
                };
                if !self.inbox.is_empty() {
                    if let Some(p) = self.inbox.take(&arrival) {
                        let n = p.len();
                        buf.fill_from(p)
                            .map_err(|want| self.len_error(peer, n, want))?;
                        self.stats.record_recv(peer, n);
                        return Ok(None);
                    }
                }
                if (self.pending_cma.is_empty() || !self.pending_cma.contains_key(&arrival))
                    && self.try_fast_recv(l, peer, key, serial, buf)?
                {
                    return Ok(None);
                }
            }
        }
        Ok(Some(serial))
    }
}
