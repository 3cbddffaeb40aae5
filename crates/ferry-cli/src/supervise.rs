//! Watching a job: the checks between two ranks of the launch, the supervisor loop that
//! notices failed ranks and ends the job (R1, T5), and the end of a job (output drained,
//! leftovers of the ranks ended, ranks reaped).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use ferry_core::respawn::boot::{Decision, EpochTracker, Proc};
use ferry_core::respawn::{respawn_key, respawn_started, INCARNATION_VAR, RESPAWN_VAR};
use ferry_core::Store;

use crate::collapse;
use crate::ctl::STATUS_KEY;
use crate::forward::{Output, Tracker};
use crate::guard;
use crate::run::{describe, Rank};
use crate::spawn::Spawner;
use crate::{signals, RunArgs};

/// Poll interval while ending ranks after a failed start.
const TICK: Duration = Duration::from_millis(5);
/// Longest sleep of the main loop without a signal (a safety net: SIGCHLD wakes it anyway).
const IDLE: Duration = Duration::from_millis(500);
/// How long the launcher waits for the ranks' last output once every rank is gone (a rank's
/// own child may hold the pipes open).
const DRAIN: Duration = Duration::from_secs(1);
/// How long processes left behind by the ranks get between SIGTERM and SIGKILL at the end.
const TERM_WAIT: Duration = Duration::from_millis(200);

/// What the launch loop watches between two ranks: an interrupt, or a rank that failed
/// already (then the job is over and starting more ranks would only multiply errors).
pub(crate) struct Launch {
    /// Ranks seen ended with success (not checked again).
    done: Vec<bool>,
    /// The launch stopped because of SIGINT, SIGTERM or SIGHUP.
    pub(crate) interrupted: bool,
}

impl Launch {
    pub(crate) fn new(total: usize) -> Launch {
        Launch {
            done: vec![false; total],
            interrupted: false,
        }
    }

    /// Whether to stop starting ranks. Interrupts stay pending and no rank is reaped: the
    /// supervisor takes the same signals and sees the same exits afterwards, and reports
    /// them.
    pub(crate) fn must_stop(&mut self, ranks: &[Rank], keep_going: bool) -> bool {
        let pending = signals::pending();
        if pending.stop {
            self.interrupted = true;
            return true;
        }
        if !pending.child || keep_going {
            return false;
        }
        // Consumed here so that the next child exit raises it again; the supervisor looks
        // at every rank when it starts anyway.
        signals::take_child();
        for (r, rank) in ranks.iter().enumerate() {
            if self.done[r] {
                continue;
            }
            match guard::observe(rank.pid) {
                Ok(Some(status)) if status.success() => self.done[r] = true,
                Ok(Some(_)) | Err(_) => return true,
                Ok(None) => {}
            }
        }
        false
    }
}

/// After the last rank ended: waits up to [`DRAIN`] for the ranks' last output (a process a
/// rank started in the background may still be writing it), then ends what the ranks left in
/// their process groups (SIGTERM, SIGKILL shortly after), reaps the ranks, and kills orphans
/// of theirs that came to the launcher as subreaper.
pub(crate) fn finish(ranks: &mut [Rank], output: &Output, tracker: &Tracker, guardian: i32) {
    let drained = tracker.wait(DRAIN);
    ranks.iter().for_each(|r| r.signal(libc::SIGTERM));
    if !drained && !tracker.wait(TERM_WAIT) {
        output.message(
            "ferry: some output may be missing: a process started by a rank still holds its pipes",
        );
    }
    ranks.iter().for_each(|r| r.signal(libc::SIGKILL));
    for rank in ranks.iter_mut().filter(|r| !r.reaped) {
        if let Ok(status) = rank.child.wait() {
            rank.status.get_or_insert(status);
        }
        rank.reaped = true;
    }
    guard::sweep_strays(&[guardian], DRAIN);
}

/// How the job ended: the launcher's exit status and its closing messages.
pub(crate) struct Outcome {
    pub(crate) exit: u8,
    pub(crate) messages: Vec<String>,
    /// Processes of ranks that were replaced (`--respawn`), still to be reaped.
    pub(crate) retired: Vec<Rank>,
    /// Rebuild epochs the ranks went through (`--respawn`).
    pub(crate) epochs: u64,
}

/// How long the launcher keeps collecting failures after the first one before it decides
/// which rank to blame and ends the job. Ranks that die together are seen in an order that
/// says little about which went first: a SIGKILLed rank becomes reapable only after its
/// sockets closed, so its peers may report its death and exit before it does.
const SETTLE: Duration = Duration::from_millis(150);

/// A failed rank, as seen by the supervisor.
struct Failure {
    rank: usize,
    signaled: bool,
    /// What happened, after `rank R ` (so that equal failures of many ranks merge).
    text: String,
    code: u8,
}

/// The messages of `pending` failures (emptied), equal ones of several ranks as one.
fn merge(pending: &mut Vec<Failure>) -> Vec<String> {
    collapse::merge_messages(pending.drain(..).map(|f| (f.rank, f.text)).collect())
}

/// Watches the ranks until all are gone; ends the job after the first failure (unless
/// --keep-going) or on SIGINT/SIGTERM/SIGHUP.
pub(crate) fn supervise(
    ranks: &mut [Rank],
    args: &RunArgs,
    output: &Output,
    store: &dyn Store,
    mut respawn: Respawner<'_>,
) -> Outcome {
    let keep_going = args.keep_going || respawn.budget > 0;
    let local_host = ferry_core::launch::hostname();
    let mut states: Vec<String> = vec!["running".to_string(); ranks.len()];
    publish_status(store, ranks, &states, &local_host);
    let grace = Duration::from_millis(args.grace_ms);
    let mut messages = Vec::new();
    let mut exit: Option<u8> = None;
    // Failures seen before the blame was decided, and until when to keep collecting them.
    let mut pending: Vec<Failure> = Vec::new();
    // Failures reported once the blame was decided (with --keep-going, later ones join
    // them), merged at the end so that equal failures of many ranks give one line however
    // far apart in time they came; `reported_at` is where in `messages` they go.
    let mut reported: Vec<Failure> = Vec::new();
    let mut reported_at: Option<usize> = None;
    let mut settle_until: Option<Instant> = None;
    // When the job is being ended: since when, and whether SIGKILL went out already.
    let mut ending: Option<(Instant, bool)> = None;
    let mut stop: Option<i32> = None;
    let mut ended_by_us = 0usize;
    loop {
        let mut running = 0;
        let mut changed = false;
        if ending.is_none() {
            respawn.poll_rebuilds(ranks, store);
        }
        // Ranks not seen ended before this round: a replacement needs one to rebuild with.
        let unfinished: Vec<bool> = ranks.iter().map(|x| x.status.is_none()).collect();
        for (r, rank) in ranks.iter_mut().enumerate() {
            if rank.status.is_some() {
                continue;
            }
            match guard::observe(rank.pid) {
                Ok(Some(status)) => {
                    rank.status = Some(status);
                    changed = true;
                    if !status.success() {
                        // What the failed rank started goes with it (its group; a rank that
                        // ended well keeps its group until the job ends).
                        rank.signal(libc::SIGTERM);
                    }
                    let failure = describe(r, status);
                    states[r] = match &failure {
                        None => "done".to_string(),
                        Some(_) if ending.is_some() => "ended by ferry".to_string(),
                        Some((text, _)) => text.replacen(&format!("rank {r} "), "", 1),
                    };
                    if ending.is_some() {
                        ended_by_us += 1;
                        continue;
                    }
                    let others = unfinished.iter().enumerate().any(|(k, &u)| k != r && u);
                    if let (Some((text, _)), None) = (&failure, stop) {
                        if respawn.replace(rank, r, text, others, store, output) {
                            // Ranks still starting read this: the job lost a rank before it
                            // was up, which a replacement cannot make good.
                            states[r] = format!("running (replacement {})", rank.incarnation);
                            running += 1;
                            continue;
                        }
                    }
                    if let Some((text, code)) = failure {
                        let prefix = format!("rank {r} ");
                        let f = Failure {
                            rank: r,
                            signaled: status.signal().is_some(),
                            text: text.strip_prefix(&prefix).unwrap_or(&text).to_string()
                                + &rank.where_(),
                            code,
                        };
                        if exit.is_some() {
                            reported.push(f); // blame already decided (--keep-going)
                        } else {
                            settle_until.get_or_insert(Instant::now() + SETTLE);
                            pending.push(f);
                        }
                    }
                }
                Ok(None) => running += 1,
                Err(e) => {
                    // Cannot happen for our own child; treat as failed rather than loop forever.
                    messages.push(format!("rank {r}: cannot wait for its process: {e}"));
                    exit.get_or_insert(1);
                    rank.status = Some(ExitStatus::from_raw(1 << 8));
                    rank.reaped = true;
                }
            }
        }
        if changed {
            publish_status(store, ranks, &states, &local_host);
        }
        if ending.is_none() {
            respawn.check_start_up(ranks, store, output);
        }
        let settled = settle_until.is_some_and(|t| running == 0 || Instant::now() >= t);
        if settled && exit.is_none() {
            // A rank killed by a signal is the likelier cause (its peers typically exit with
            // an error about it): it is named first and gives the exit status.
            pending.sort_by_key(|f| !f.signaled);
            exit = pending.first().map(|f| f.code);
            reported_at.get_or_insert(messages.len());
            reported.append(&mut pending);
        }
        if running == 0 {
            break;
        }
        if let Some(sig) = stop.take() {
            if ending.is_none() {
                output.message(&format!(
                    "ferry: received {}, ending {running} rank{}",
                    signals::name(sig),
                    if running == 1 { "" } else { "s" }
                ));
                // Failures still settling are reported; the interrupt gives the status.
                reported_at.get_or_insert(messages.len());
                reported.append(&mut pending);
                exit.get_or_insert((128 + sig).clamp(1, 255) as u8);
                ending = Some((Instant::now(), false));
                ranks.iter().for_each(|r| r.signal(libc::SIGTERM));
            } else if let Some((_, killed)) = ending.as_mut() {
                // A second interrupt: no more patience.
                *killed = true;
                ranks.iter().for_each(|r| r.signal(libc::SIGKILL));
            }
        }
        if ending.is_none() && exit.is_some() && !keep_going {
            ending = Some((Instant::now(), false));
            ranks.iter().for_each(|r| r.signal(libc::SIGTERM));
        }
        // Rebuild records are polled: they do not wake the launcher.
        let mut sleep = if respawn.budget > 0 {
            REBUILD_POLL
        } else {
            IDLE
        };
        if exit.is_none() {
            if let Some(t) = settle_until {
                sleep = sleep.min(t.saturating_duration_since(Instant::now()));
            }
        }
        if let Some((since, killed)) = ending.as_mut() {
            let waited = since.elapsed();
            if !*killed && waited >= grace {
                *killed = true;
                ranks.iter().for_each(|r| r.signal(libc::SIGKILL));
            } else if !*killed {
                sleep = sleep.min(grace - waited);
            }
        }
        match signals::wait(sleep) {
            signals::Event::Stop(sig) => stop = Some(sig),
            signals::Event::Suspend => {
                ranks.iter().for_each(|r| r.signal(libc::SIGTSTP));
                // SIGTSTP is blocked here, so stop ourselves the way the shell expects.
                // SAFETY: kill(2) on our own pid.
                unsafe {
                    libc::kill(libc::getpid(), libc::SIGSTOP);
                }
            }
            signals::Event::Resume => ranks.iter().for_each(|r| r.signal(libc::SIGCONT)),
            signals::Event::Child | signals::Event::Timeout => {}
        }
    }
    let at = reported_at.unwrap_or(messages.len());
    messages.splice(at..at, merge(&mut reported));
    if ended_by_us > 0 {
        messages.push(format!(
            "ended {ended_by_us} remaining rank{}",
            if ended_by_us == 1 { "" } else { "s" }
        ));
    }
    if respawn.used > 0 {
        messages.push(format!(
            "{} failed rank{} replaced (--respawn {})",
            respawn.used,
            if respawn.used == 1 { " was" } else { "s were" },
            respawn.budget
        ));
    }
    Outcome {
        exit: exit.unwrap_or(0),
        messages,
        retired: std::mem::take(&mut respawn.retired),
        epochs: respawn.tracker.epochs(),
    }
}

/// How often the supervisor of a `--respawn` job reads the survivors' rebuild records: a
/// member that died before the record of the epoch it should start came is found this long
/// after the record at most.
const REBUILD_POLL: Duration = Duration::from_millis(20);

/// `ferry run --respawn K`: restarts failed ranks, at most K times per job (issue 08).
///
/// A replacement gets the rank's variables plus `FERRY_INCARNATION`; the launcher's answer
/// for each failure is written to the store (`ferry_core::respawn::respawn_key`), where the
/// survivors' rebuild waits for it. A rank the survivors declared failed in a rebuild record
/// but whose process still runs (stopped, or cut off) is killed, and so replaced as well. A
/// rank that dies while an epoch starts makes the launcher call the epoch off and record the
/// next one ([`ferry_core::respawn::boot`]).
pub(crate) struct Respawner<'a> {
    spawner: &'a Spawner<'a>,
    pub(crate) budget: u32,
    used: u32,
    retired: Vec<Rank>,
    tracker: EpochTracker,
}

impl<'a> Respawner<'a> {
    pub(crate) fn new(spawner: &'a Spawner<'a>, budget: u32, size: usize) -> Respawner<'a> {
        Respawner {
            spawner,
            budget,
            used: 0,
            retired: Vec::new(),
            tracker: EpochTracker::new(size),
        }
    }

    /// Rank `r` (`rank`) failed as `text` says: starts its replacement in its place if the
    /// budget allows and `others` (some other rank still runs, to rebuild with), and tells the
    /// survivors either way. Returns whether it did.
    fn replace(
        &mut self,
        rank: &mut Rank,
        r: usize,
        text: &str,
        others: bool,
        store: &dyn Store,
        output: &Output,
    ) -> bool {
        if self.budget == 0 {
            return false;
        }
        let incarnation = rank.incarnation + 1;
        let key = respawn_key(r, incarnation);
        let tell = |value: String| {
            if let Err(e) = store.set(&key, value.as_bytes()) {
                tracing::warn!("cannot record the respawn of rank {r}: {e}");
            }
        };
        if !others {
            tell("refused: every other rank has ended".to_string());
            output.message(&format!(
                "ferry: {text}; not replaced: every other rank has ended"
            ));
            return false;
        }
        if self.used >= self.budget {
            tell(format!(
                "refused: the job's {} respawns (--respawn {}) are used up",
                self.budget, self.budget
            ));
            return false;
        }
        let extra = [
            (RESPAWN_VAR.to_string(), self.budget.to_string()),
            (INCARNATION_VAR.to_string(), incarnation.to_string()),
        ];
        match self.spawner.spawn(r, incarnation, &extra) {
            Ok(new) => {
                self.used += 1;
                let pid = new.pid;
                self.retired.push(std::mem::replace(rank, new));
                tell(format!("started pid {pid}"));
                output.message(&format!(
                    "ferry: {text}; started a replacement, pid {pid} (respawn {} of {})",
                    self.used, self.budget
                ));
                true
            }
            Err(e) => {
                if let Some(started) = e.started {
                    started.signal(libc::SIGKILL);
                    self.retired.push(started);
                }
                tell(format!("refused: {}", e.msg));
                output.message(&format!("ferry: {text}; no replacement: {}", e.msg));
                false
            }
        }
    }

    /// Reads the rebuild records written since the last call and kills the processes they
    /// name that still run (see the type's doc).
    fn poll_rebuilds(&mut self, ranks: &[Rank], store: &dyn Store) {
        if self.budget == 0 {
            return;
        }
        for record in self.tracker.read_records(store) {
            for k in record.replaced {
                if let Some(rank) = ranks.get(k) {
                    if rank.status.is_none() && rank.incarnation < self.tracker.named(k) {
                        tracing::info!("rank {k} was declared failed by the survivors: ending it");
                        rank.signal(libc::SIGKILL);
                    }
                }
            }
        }
    }

    /// Calls off the epoch whose start-up is open if one of its members died, and records
    /// the next one (see [`ferry_core::respawn::boot`]).
    fn check_start_up(&mut self, ranks: &[Rank], store: &dyn Store, output: &Output) {
        if self.budget == 0 {
            return;
        }
        let procs: Vec<Proc> = ranks
            .iter()
            .map(|r| Proc {
                incarnation: r.incarnation,
                alive: r.status.is_none(),
            })
            .collect();
        let (epoch, next) = match self.tracker.check(store, &procs) {
            Ok(Some(Decision::Aborted { epoch, next })) => (epoch, next),
            Ok(Some(Decision::Committed(epoch))) => {
                tracing::info!("rebuild epoch {epoch} had started before a member died");
                return;
            }
            Ok(None) => return,
            Err(e) => {
                tracing::warn!("rebuild: {e}");
                return;
            }
        };
        // Every rank the next epoch replaces has the launcher's answer: the restart, its
        // refusal, or (a rank that ended without being restarted, e.g. with status 0) one
        // said here. An epoch that needs a rank not restarted cannot start: its members fail
        // naming it, and no further epoch is opened for their ends.
        let mut refused = false;
        for &k in &next.replaced {
            let key = respawn_key(k, self.tracker.named(k));
            match store.get(&key, Duration::ZERO) {
                Ok(v) => refused |= !respawn_started(&v),
                Err(_) => {
                    refused = true;
                    let earlier = ranks
                        .get(k)
                        .and_then(|r| {
                            store
                                .get(&respawn_key(k, r.incarnation + 1), Duration::ZERO)
                                .ok()
                        })
                        .filter(|v| !respawn_started(v));
                    let why = match earlier {
                        Some(v) => String::from_utf8_lossy(&v).into_owned(),
                        None => format!("refused: rank {k} ended and was not restarted"),
                    };
                    if let Err(e) = store.set(&key, why.as_bytes()) {
                        tracing::warn!("cannot record the respawn of rank {k}: {e}");
                    }
                }
            }
        }
        if refused {
            self.tracker.close();
        }
        output.message(&format!(
            "ferry: rank{} {} died during the start-up of rebuild epoch {epoch}; {}",
            if next.replaced.len() == 1 { "" } else { "s" },
            crate::collapse::rank_list(&next.replaced),
            if refused {
                "not every one was restarted, so the rebuild fails".to_string()
            } else {
                format!("the ranks start epoch {} instead", next.epoch)
            }
        ));
    }
}

/// Publishes the process table for `ferry ctl NAME status`: one line per process,
/// `L<id>:<host>:<pid> rank <r> <state>`.
fn publish_status(store: &dyn Store, ranks: &[Rank], states: &[String], local_host: &str) {
    let mut table = String::new();
    for (r, (rank, state)) in ranks.iter().zip(states).enumerate() {
        let host = rank.host.as_deref().unwrap_or(local_host);
        table.push_str(&format!("L{r}:{host}:{} rank {r} {state}\n", rank.pid));
    }
    if let Err(e) = store.set(STATUS_KEY, table.as_bytes()) {
        tracing::warn!("cannot publish the job status: {e}");
    }
}

/// Ends the ranks started so far (start-up failed part way) and reaps them.
pub(crate) fn end_all(
    ranks: &mut [Rank],
    grace_ms: u64,
    output: &Output,
    tracker: &Tracker,
    guardian: i32,
) {
    ranks.iter().for_each(|r| r.signal(libc::SIGTERM));
    let deadline = Instant::now() + Duration::from_millis(grace_ms);
    let mut killed = false;
    loop {
        let mut running = 0;
        for rank in ranks.iter_mut().filter(|r| r.status.is_none()) {
            match guard::observe(rank.pid) {
                Ok(Some(s)) => rank.status = Some(s),
                Ok(None) => running += 1,
                Err(_) => rank.status = Some(ExitStatus::from_raw(1 << 8)),
            }
        }
        if running == 0 {
            finish(ranks, output, tracker, guardian);
            return;
        }
        if !killed && Instant::now() >= deadline {
            killed = true;
            ranks.iter().for_each(|r| r.signal(libc::SIGKILL));
        }
        std::thread::sleep(TICK);
    }
}
