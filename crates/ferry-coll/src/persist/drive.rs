//! Running a started [`Persistent`]: `start` posts the first step, `wait` drives the steps
//! to the end of the round, and a failure is kept so that every later start reports it (see
//! the parent module's doc).

use ferry_core::{Element, Error, Exchange, Result, Transport};

use super::raw::RawBuf;
use super::schedule::{Combine, Region};
use super::{Persistent, State};

impl<T: Element> Persistent<T> {
    fn check_transport(&self, t: &dyn Transport, what: &str) -> Result<()> {
        if t.rank() != self.rank {
            return Err(Error::invalid(
                self.kind.name(),
                format!(
                    "{what} on the transport of rank {}, but the collective was set up on rank {}",
                    t.rank(),
                    self.rank
                ),
            )
            .on_rank(t.rank()));
        }
        Ok(())
    }

    fn earlier_failure(&self) -> Option<Error> {
        match &self.state {
            State::Failed { kind, peer, why } => {
                let mut e = Error::new(*kind, self.kind.name())
                    .with_detail(format!("an earlier start failed: {why}"))
                    .on_rank(self.rank);
                if let Some(p) = peer {
                    e = e.with_peer(*p);
                }
                Some(e)
            }
            _ => None,
        }
    }

    /// Starts one round: puts this rank's block in place and posts the first step (moved by
    /// [`Persistent::wait`]); never waits for a peer. Every member starts its persistent
    /// collectives in the same order. Errors: a start while started, a collective that failed
    /// earlier.
    pub fn start(&mut self, t: &mut dyn Transport) -> Result<()> {
        self.check_transport(t, "start")?;
        if let Some(e) = self.earlier_failure() {
            return Err(e);
        }
        if self.is_active() {
            return Err(self.busy("start"));
        }
        if let Some(at) = self.shape.own_at {
            let n = self.data.len();
            let src = self.data.as_slice();
            self.stage.as_mut_slice()[at..at + n].copy_from_slice(src);
        }
        if self.shape.steps.is_empty() {
            self.finish_round();
            return Ok(());
        }
        let ex = self.post(0);
        self.state = State::Active { step: 0, ex };
        Ok(())
    }

    /// Completes the round started last: moves its data and returns when this rank's part is
    /// done (the buffers are then readable). Waiting with nothing started is a no-op. A failed
    /// peer is an error naming it; the collective then reports that failure on every later
    /// call.
    pub fn wait(&mut self, t: &mut dyn Transport) -> Result<()> {
        self.check_transport(t, "wait")?;
        if let Some(e) = self.earlier_failure() {
            return Err(e);
        }
        if !self.is_active() {
            return Ok(());
        }
        self.advance(t)
    }

    /// [`Persistent::start`] then [`Persistent::wait`].
    pub fn run(&mut self, t: &mut dyn Transport) -> Result<()> {
        self.start(t)?;
        self.wait(t)
    }

    /// The buffer a schedule step's range refers to.
    fn region(&self, r: Region) -> &RawBuf<T> {
        match r {
            Region::Data => &self.data,
            Region::Stage => &self.stage,
        }
    }

    /// The exchange of step `i`, over this collective's own buffers.
    fn post(&mut self, i: usize) -> Exchange<'static> {
        let mut ex = Exchange::from_parts(
            std::mem::take(&mut self.sends),
            std::mem::take(&mut self.recvs),
        );
        let members = self.group.members();
        let step = &self.shape.steps[i];
        for x in &step.sends {
            let buf = self.region(x.region);
            // SAFETY: the range lies inside the buffer (the schedule is built from its length);
            // the buffer is a heap allocation owned by `self` that is neither freed, moved nor
            // written while this exchange lives (accessors refuse while started; `advance`
            // drops or abandons the exchange before touching the buffers; `Drop` sees only an
            // exchange no backend has progressed); no receive of this step overlaps the range
            // (`schedule::tests::ranges_of_a_step_never_overlap`).
            let bytes = unsafe { buf.bytes(x.bytes.clone()) };
            ex.send(members[x.peer], self.key, bytes);
        }
        for x in &step.recvs {
            let buf = self.region(x.region);
            // SAFETY: as above; in addition no other operation of this step touches this range,
            // so the one mutable view is unique until the exchange completes or is abandoned.
            let bytes = unsafe { buf.bytes_mut(x.bytes.clone()) };
            ex.recv_into(members[x.peer], self.key, bytes);
        }
        ex
    }

    /// Drives the posted step and the ones after it to completion.
    fn advance(&mut self, t: &mut dyn Transport) -> Result<()> {
        loop {
            let State::Active { step, ex } = &mut self.state else {
                return Ok(());
            };
            let step = *step;
            match t.exchange(ex) {
                Ok(()) => {}
                Err(e) => {
                    // A backend that did not say which peer failed: the one this step still
                    // waited for, when there is only one.
                    let e = match ex.pending_peers().as_slice() {
                        [one] if e.peer().is_none() => e.with_peer(*one),
                        _ => e,
                    };
                    return Err(self.fail(t, e));
                }
            }
            let State::Active { ex, .. } = std::mem::replace(&mut self.state, State::Idle) else {
                return Ok(());
            };
            let (s, r) = ex.into_parts();
            self.sends = s;
            self.recvs = r;
            if let Some(c) = self.shape.steps[step].combine {
                self.combine(c);
            }
            if step + 1 == self.shape.steps.len() {
                self.finish_round();
                return Ok(());
            }
            let ex = self.post(step + 1);
            self.state = State::Active { step: step + 1, ex };
        }
    }

    fn combine(&mut self, c: Combine) {
        let Some(op) = &self.op else { return };
        let data = self.data.as_mut_slice();
        let stage = self.stage.as_mut_slice();
        match c {
            Combine::Right => op.apply(data, stage),
            Combine::Left => {
                op.apply(stage, data);
                data.copy_from_slice(stage);
            }
        }
    }

    fn finish_round(&mut self) {
        if self.out.len() > 0 {
            // Binomial gather to a root other than 0: the staging buffer holds the blocks in
            // positions relative to the root.
            let p = self.group.size();
            let n = self.data.len();
            let rot = self.shape.rot;
            let stage = self.stage.as_slice();
            let out = self.out.as_mut_slice();
            for i in 0..p {
                let v = (i + p - rot) % p;
                out[i * n..(i + 1) * n].copy_from_slice(&stage[v * n..(v + 1) * n]);
            }
        }
        self.starts += 1;
    }

    /// Gives up the posted step after `e` and remembers the failure.
    fn fail(&mut self, t: &mut dyn Transport, e: Error) -> Error {
        let name = self.kind.name();
        let e = if e.op() == name {
            e.or_rank(self.rank)
        } else {
            e.context(name).or_rank(self.rank)
        };
        if let State::Active { mut ex, .. } = std::mem::replace(&mut self.state, State::Idle) {
            // After this no peer reads from or writes into the buffers (backend contract).
            t.abandon_exchange(&mut ex, &e);
            let (s, r) = ex.into_parts();
            self.sends = s;
            self.recvs = r;
        }
        self.state = State::Failed {
            kind: e.kind(),
            peer: e.peer(),
            why: e.to_string(),
        };
        e
    }
}
