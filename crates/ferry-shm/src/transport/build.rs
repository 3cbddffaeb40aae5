//! Joining the segment and building a rank's transport: from the environment (launcher or
//! hand start), in-process groups of threads, and one node of the hybrid backend.

use super::*;

/// How a rank joins its segment.
pub(crate) struct JoinSpec<'a> {
    /// Segment name; None: anonymous (already created, in-process).
    pub name: Option<String>,
    /// Index in the segment, or None to draw one from the shared counter (R2b).
    pub local: Option<usize>,
    /// Global ranks of the segment's members, in segment order (None: identity, size = local
    /// size, standalone).
    pub members: Option<(Vec<usize>, usize, usize)>,
    pub config: &'a Config,
    /// Asked while this rank waits for the others to attach.
    pub watch: StartupWatch<'a>,
}

impl ShmTransport {
    /// Builds this rank from the environment (S1, R2b).
    ///
    /// Launcher mode: `FERRY_JOB_ID`, `FERRY_RANK` and `FERRY_SIZE` are set; the segment is
    /// named after the job id (with a job id but no rank, ranks come from the counter). Hand
    /// start: `FERRY_SIZE=N` plus an optional job name
    /// (`FERRY_SHM_JOB` / `shm.job`, default `default`); ranks are drawn from a counter in the
    /// segment (001 §4.2), so N copies started by hand number themselves 0..N-1.
    pub fn from_env(config: &Config, launch: &LaunchInfo) -> Result<ShmTransport> {
        ShmTransport::from_env_watched(config, launch, &|| None)
    }

    /// [`ShmTransport::from_env`], giving up the wait for the ranks of the launcher's segment
    /// when `watch` returns an error (see [`StartupWatch`]).
    pub fn from_env_watched(
        config: &Config,
        launch: &LaunchInfo,
        watch: StartupWatch<'_>,
    ) -> Result<ShmTransport> {
        let size = launch
            .size
            .ok_or_else(|| Error::config("the shm backend needs FERRY_SIZE (number of ranks)"))?;
        // A job id (launcher, or mpirun/srun discovery) names the segment; without one the
        // hand-start name does. The rank is FERRY_RANK when given, else drawn from the counter.
        let job = match &launch.job_id {
            Some(job) => format!("j{job}"),
            None => format!(
                "h{}",
                config.shm.job.clone().unwrap_or_else(|| DEFAULT_JOB.into())
            ),
        };
        let local = launch.rank;
        // Started by `ferry run`: the launcher made the segment and passed it down, so it was
        // never named (S4 during start-up, see handoff.rs).
        let layout = Layout::for_job(size, config.shm.ring_slots, config.shm.slot_bytes)?;
        if let Some(seg) = crate::handoff::inherited_segment(layout)? {
            let deadline = Instant::now() + config.startup_timeout();
            return ShmTransport::join_segment(seg, local, None, size, config, deadline, watch);
        }
        let name = segment_name(&job, None);
        let t = ShmTransport::join(
            JoinSpec {
                name: Some(name),
                local,
                members: None,
                config,
                watch,
            },
            size,
            None,
        )?;
        Ok(t)
    }

    /// Creates all `size` ranks of a job inside this process over one anonymous segment
    /// (threads-as-ranks tests and embedding). Hand one transport to each thread.
    pub fn create_in_process(size: usize, config: &Config) -> Result<Vec<ShmTransport>> {
        if size == 0 {
            return Err(Error::invalid("shm init", "a job needs at least one rank"));
        }
        let layout = Layout::for_job(size, config.shm.ring_slots, config.shm.slot_bytes)?;
        let seg = Arc::new(Segment::anonymous(layout)?);
        // Attach every rank first (the start-up barriers need all of them), then probe.
        let mut probes = Vec::new();
        for r in 0..size {
            probes.push(attach_block(&seg, r)?);
        }
        let all: Vec<usize> = (0..size).collect();
        let single_copy = decide_single_copy(
            &seg,
            config,
            Instant::now() + config.startup_timeout(),
            &all,
        )?;
        probes
            .into_iter()
            .enumerate()
            .map(|(r, probe)| {
                ShmTransport::build(seg.clone(), r, None, size, config, single_copy, probe)
            })
            .collect()
    }

    /// Runs `f` on `size` threads, one shm rank each, and returns their results in rank order.
    pub fn run_threads<R, F>(size: usize, config: &Config, f: F) -> Result<Vec<R>>
    where
        R: Send,
        F: Fn(ShmTransport) -> R + Sync,
    {
        let ranks = ShmTransport::create_in_process(size, config)?;
        Ok(std::thread::scope(|scope| {
            let handles: Vec<_> = ranks
                .into_iter()
                .map(|t| {
                    let f = &f;
                    scope.spawn(move || f(t))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h.join() {
                    Ok(r) => r,
                    Err(p) => std::panic::resume_unwind(p),
                })
                .collect()
        }))
    }

    /// Joins node `node`'s segment of job `job` as the node-local part of a job spread over
    /// several nodes (the hybrid backend): `members` are the global ranks on this node in
    /// segment order, `rank` is this process's global rank among `size`.
    pub fn join_node(
        job: &str,
        node: usize,
        members: Vec<usize>,
        rank: usize,
        size: usize,
        config: &Config,
    ) -> Result<ShmTransport> {
        ShmTransport::join_node_watched(job, node, members, rank, size, config, &|| None)
    }

    /// [`ShmTransport::join_node`] that gives up waiting for the others to attach when
    /// `watch` returns an error (whoever started the ranks may know that one ended before it
    /// attached, which the segment cannot show).
    pub fn join_node_watched(
        job: &str,
        node: usize,
        members: Vec<usize>,
        rank: usize,
        size: usize,
        config: &Config,
        watch: StartupWatch<'_>,
    ) -> Result<ShmTransport> {
        let local = members.iter().position(|&r| r == rank).ok_or_else(|| {
            Error::invalid("shm init", format!("rank {rank} is not among {members:?}"))
        })?;
        let local_size = members.len();
        ShmTransport::join(
            JoinSpec {
                name: Some(segment_name(&format!("j{job}"), Some(node))),
                local: Some(local),
                members: Some((members, rank, size)),
                config,
                watch,
            },
            local_size,
            None,
        )
    }

    /// Joins (or creates) a named segment of `local_size` ranks; `members` maps segment
    /// indices to global ranks for the hybrid backend.
    pub(crate) fn join(
        spec: JoinSpec<'_>,
        local_size: usize,
        deadline: Option<Instant>,
    ) -> Result<ShmTransport> {
        let config = spec.config;
        let deadline = deadline.unwrap_or_else(|| Instant::now() + config.startup_timeout());
        let layout = Layout::for_job(local_size, config.shm.ring_slots, config.shm.slot_bytes)?;
        let name = spec
            .name
            .ok_or_else(|| Error::invalid("shm init", "a joined segment needs a name"))?;
        // Segments of jobs that died while gathering are removed before this one gathers.
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(|| {
            crate::handoff::sweep_stale();
        });
        let seg = Segment::open_named(&name, layout, deadline)?;
        ShmTransport::join_segment(
            seg,
            spec.local,
            spec.members,
            local_size,
            config,
            deadline,
            spec.watch,
        )
    }

    /// Joins the opened segment `seg` of `local_size` ranks as index `local` (drawn from the
    /// counter when None).
    pub(super) fn join_segment(
        seg: Segment,
        local: Option<usize>,
        members: Option<(Vec<usize>, usize, usize)>,
        local_size: usize,
        config: &Config,
        deadline: Instant,
        watch: StartupWatch<'_>,
    ) -> Result<ShmTransport> {
        let seg = Arc::new(seg);
        let name = seg.name.clone().unwrap_or_else(|| "(inherited)".into());
        let fail = |seg: &Segment, e: Error| {
            // A rank that cannot complete the gathering removes the name so nothing is left.
            seg.unlink();
            e
        };
        let me = match local {
            Some(r) if r < local_size => r,
            Some(r) => {
                return Err(fail(
                    &seg,
                    Error::config(format!("rank {r} is not below size {local_size}")),
                ))
            }
            None => {
                let r = seg.counter().fetch_add(1, Ordering::AcqRel) as usize;
                if r >= local_size {
                    return Err(Error::config(format!(
                        "shm job {name} already has its {local_size} ranks; start this \
                         process under another job name (FERRY_SHM_JOB)"
                    )));
                }
                r
            }
        };
        let probe = attach_block(&seg, me).map_err(|e| fail(&seg, e))?;
        let prev = arrive(&seg, local_size, |s| s.attached());
        if prev + 1 == local_size as u64 {
            // Last to arrive: every rank has the segment mapped, the name can go (S4).
            seg.unlink();
        }
        wait_all(
            &seg,
            local_size,
            |s| s.attached(),
            deadline,
            "attach",
            me,
            watch,
        )
        .map_err(|e| fail(&seg, e.on_rank(me)))?;
        let single_copy =
            decide_single_copy(&seg, config, deadline, &[me]).map_err(|e| e.on_rank(me))?;
        let (global_of, rank, size) = match members {
            Some((m, rank, size)) => (Some(m), rank, size),
            None => (None, me, local_size),
        };
        let t = ShmTransport::build(
            seg,
            me,
            global_of.map(|g| (g, rank)),
            size,
            config,
            single_copy,
            probe,
        )?;
        if me == 0 {
            tracing::info!(
                ranks = local_size,
                single_copy = t.single_copy,
                "shm: job started"
            );
        }
        Ok(t)
    }

    pub(super) fn build(
        seg: Arc<Segment>,
        me: usize,
        members: Option<(Vec<usize>, usize)>,
        size: usize,
        config: &Config,
        single_copy: bool,
        probe: Box<u64>,
    ) -> Result<ShmTransport> {
        let n = seg.layout.size;
        let (global_of, rank) = match members {
            Some((g, rank)) => (g, rank),
            None => ((0..n).collect(), me),
        };
        if global_of.len() != n || global_of.iter().any(|&g| g >= size) {
            return Err(Error::invalid(
                "shm init",
                "node member list does not fit the job",
            ));
        }
        let mut local_of = vec![None; size];
        for (l, &g) in global_of.iter().enumerate() {
            local_of[g] = Some(l);
        }
        let l = seg.layout;
        let pids: Vec<u32> = (0..n)
            .map(|p| seg.pid(p).load(Ordering::Acquire) as u32)
            .collect();
        let inline_cap = l.slot_bytes - crate::ring::SLOT_HEADER;
        // The job's ranks on this host, not only this segment's: the hybrid backend's node
        // segments may share one host (nodes named by `FERRY_NODE`).
        let host_ranks = n.max(ferry_core::config::local_ranks_hint(n));
        // The host's cores, not this rank's affinity mask: a bound rank (`general.bind`,
        // mpirun) sees one CPU and would turn both the split and pipelining off.
        let cores = shared_cores();
        let mut stats = Stats::new(rank, size, "shm");
        stats.bump("shm single copy enabled", single_copy as u64);
        Ok(ShmTransport {
            seg,
            rank,
            size,
            me,
            local_of,
            global_of,
            tx: (0..n).map(|_| None).collect(),
            rx: (0..n).map(|_| None).collect(),
            active_rx: Vec::new(),
            known_senders: vec![0; l.map_words],
            peer_open: vec![false; n],
            pids,
            watch: (0..n).map(|_| None).collect(),
            send_flows: Flows::default(),
            recv_flows: Flows::default(),
            inbox: EarlyArrivals::new(config.shm.inbox_messages, config.shm.inbox_bytes),
            inbox_cap_bytes: config.shm.inbox_bytes,
            inbox_cap_messages: config.shm.inbox_messages,
            pending_cma: HashMap::new(),
            partial: (0..n).map(|_| None).collect(),
            partial_bytes: 0,
            partial_count: 0,
            cma_next: vec![0; n],
            posted_at: vec![Instant::now(); n * ACK_WINDOW as usize],
            eager_wait: config.spin().max(Duration::from_micros(200)),
            peer_progress: vec![Instant::now(); n],
            deferred: vec![None; n],
            frag_owner: vec![None; n],
            abort_pending: vec![Vec::new(); n],
            aborts_queued: false,
            abandoned: std::collections::HashSet::new(),
            given_up: std::collections::HashSet::new(),
            to_read: Vec::new(),
            splits: Vec::new(),
            splits_done: Vec::new(),
            split: split_single_copy(config.shm.pipeline, host_ranks, cores),
            heap_maps: HeapMaps::default(),
            spare_sends: Vec::new(),
            spare_recvs: Vec::new(),
            single_copy,
            inline_cap,
            chunk_span: CHUNK_SPAN,
            pipelined: pipelined(config.shm.pipeline, n, cores),
            threshold: config.shm.single_copy_threshold.max(inline_cap + 1),
            stats,
            waits: super::waits::WaitLog::new(
                config.general.stats || std::env::var("FERRY_STATS").is_ok_and(|v| v == "1"),
            ),
            policy: config.wait_policy(n),
            blocked: vec![false; n],
            busy: vec![false; n],
            waiting: Vec::new(),
            want_acks: Vec::new(),
            want_space: Vec::new(),
            drain_start: 0,
            last_liveness: Instant::now(),
            tolerant: false,
            finished: false,
            _probe: probe,
        })
    }
}

/// Whether large messages stream pipelined through the rings. Under `auto` while this
/// segment's ranks (the node's, in a hybrid job) do not outnumber the host's cores. Unlike the
/// split, this counts the segment, not the host: the ring lets either side copy its part while
/// the other is descheduled (up to the ring's size), and with the hybrid backend's two node
/// segments of two ranks on one 2-core host the rings moved a 1 MiB allreduce faster than
/// single copy (570 against 761 us, median of six interleaved rounds; see docs/PERFORMANCE.md,
/// "Split single copy under simulation").
fn pipelined(pipeline: Pipeline, segment_ranks: usize, cores: usize) -> bool {
    match pipeline {
        Pipeline::On => true,
        Pipeline::Off => false,
        Pipeline::Auto => segment_ranks <= cores,
    }
}

/// Whether large messages go by split single copy: only under `shm.pipeline = auto` with a
/// core for every rank this host runs. `host_ranks` counts the job's ranks on the host, not
/// only this segment's: the hybrid backend's node segments may share one host (nodes named by
/// `FERRY_NODE`), and a split needs the sender to answer the receiver's offer at once, which a
/// descheduled sender does not (the receiver then waits `eager_wait` before reading alone;
/// 4 ranks in two segments on 2 cores made a 1 MiB allreduce 1.3x slower).
/// Cores the host's ranks share, for the split and pipelining choices: the host's, not this
/// rank's affinity mask, which a launcher binding ranks (`ferry run`, mpirun) narrows to one CPU
/// although each peer has a CPU of its own (counting the mask turned both off for bound ranks
/// and halved 1 MiB bandwidth).
fn shared_cores() -> usize {
    ferry_core::config::host_cores()
}

fn split_single_copy(pipeline: Pipeline, host_ranks: usize, cores: usize) -> bool {
    pipeline == Pipeline::Auto && host_ranks <= cores
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank bound to one CPU still splits and pipelines when its host has a core per rank.
    #[test]
    fn a_bound_rank_counts_the_hosts_cores() {
        let host = ferry_core::config::host_cores();
        let bound = std::thread::spawn(|| {
            ferry_core::config::bind_thread_to_its_first_cpu().expect("narrow the mask");
            assert_eq!(ferry_core::config::available_cores(), 1, "mask narrowed");
            shared_cores()
        })
        .join()
        .expect("bound thread");
        assert_eq!(bound, host);
        assert_eq!(
            split_single_copy(Pipeline::Auto, host, bound),
            split_single_copy(Pipeline::Auto, host, host)
        );
    }

    #[test]
    fn pipelining_counts_the_segments_ranks() {
        // A segment of two ranks on a 2-core host pipelines, also when another segment shares
        // the host (hybrid nodes on one host); four ranks in one segment copy once.
        assert!(pipelined(Pipeline::Auto, 2, 2));
        assert!(!pipelined(Pipeline::Auto, 4, 2));
        assert!(pipelined(Pipeline::On, 4, 2));
        assert!(!pipelined(Pipeline::Off, 2, 8));
    }

    #[test]
    fn split_copies_need_a_core_for_every_rank_of_the_host() {
        assert!(split_single_copy(Pipeline::Auto, 2, 2));
        // Two segments of two ranks on one 2-core host: no split.
        assert!(!split_single_copy(Pipeline::Auto, 4, 2));
        assert!(!split_single_copy(Pipeline::On, 2, 8));
        assert!(!split_single_copy(Pipeline::Off, 2, 8));
    }
}
