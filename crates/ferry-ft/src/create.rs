//! Making communicators from communicators (ULFM and MPI's `MPI_Comm_dup`, `MPI_Comm_split`,
//! `MPI_Comm_free`), so a process can hold several, each with its own modes, generation,
//! revoke and agreements.
//!
//! Making one is a collective over the parent's live members: each contributes its color, its
//! key and, per communicator id, the first generation it could start that id at (`u32::MAX`
//! for ids in use here); everyone picks the lowest id free at every member, starting at the
//! highest of those generations, so the new communicator's messages never match those of an
//! earlier communicator with the same id. The exchange is followed by an agreement of the
//! parent (unless the parent is in ABORT mode, where a failure ends the job anyway), so the
//! new communicator exists at every surviving member or at none, with the same members: the
//! members of the color that took part, minus the ranks the agreement declares failed.

use std::collections::BTreeSet;

use ferry_coll::Group;
use ferry_core::{Error, ErrorKind, Result};

use crate::comm::Link;
use crate::engine::{message_generation, COMM_IDS, MAX_GENERATIONS};
use crate::{Communicator, FailureMode, Options};

/// Color of a member that takes no part in any new communicator (MPI's `MPI_UNDEFINED`).
const NO_COLOR: u32 = u32::MAX;

impl Communicator {
    /// A new communicator over the same live members in the same order, with the same
    /// options (`MPI_Comm_dup`), collective over the live members. BLANK gaps are left out.
    pub fn dup(&self) -> Result<Communicator> {
        self.dup_with(self.opts)
    }

    /// As [`Communicator::dup`], with other failure and message modes: e.g. a BLANK/CONT copy
    /// of a SHRINK world for a master-worker phase.
    pub fn dup_with(&self, opts: Options) -> Result<Communicator> {
        let key = self.rank() as u32;
        self.make("dup", Some(0), key, opts)?.ok_or_else(|| {
            Error::new(ErrorKind::Protocol, "dup")
                .on_rank(self.world_rank())
                .with_detail("this rank is not a member of its own duplicate")
        })
    }

    /// Splits the live members by `color` into disjoint communicators (`MPI_Comm_split`),
    /// collective over the live members: the members with the same color form one, ordered
    /// by `key` and then by their rank here, with options `opts`. A member passing `None`
    /// (MPI's `MPI_UNDEFINED`) gets `None`. E.g. one communicator per MPMD application: the
    /// application's index as the color.
    pub fn split(
        &self,
        color: Option<u32>,
        key: u32,
        opts: Options,
    ) -> Result<Option<Communicator>> {
        if color == Some(NO_COLOR) {
            return Err(Error::invalid(
                "split",
                format!("color {NO_COLOR} is reserved (pass None for no communicator)"),
            )
            .on_rank(self.world_rank()));
        }
        self.make("split", color, key, opts)
    }

    /// Frees this communicator (`MPI_Comm_free`): every member frees its copy once its own
    /// operations on it are done. With the last handle of the communicator here (older
    /// generations kept by the program count too) the id is free for a new communicator and
    /// the transport forgets its message flows; its control messages are still answered for
    /// a while (a member that has not freed its copy yet may need an agreement answer).
    /// Dropping the communicator does the same.
    pub fn free(self) -> Result<()> {
        let mut eng = self.eng.borrow_mut();
        if !eng.is_finished() {
            // Control messages still queued (e.g. answers of this communicator's last
            // agreement) leave before the handle goes; `Drop` gives the handle up.
            eng.flush_control();
        }
        Ok(())
    }

    /// Communicators of this process in use, and freed ones still answering their peers
    /// (diagnostics: the table is bounded).
    pub fn communicators_in_use(&self) -> (usize, usize) {
        self.eng.borrow().table_size()
    }

    fn make(
        &self,
        op: &'static str,
        color: Option<u32>,
        key: u32,
        opts: Options,
    ) -> Result<Option<Communicator>> {
        let me = self.world_rank();
        if opts.failure == FailureMode::Rebuild {
            return Err(Error::new(ErrorKind::Unsupported, op)
                .on_rank(me)
                .with_detail(
                    "REBUILD replaces processes with a new transport, which only the world \
                     communicator (`ferry::World::ft_communicator`) can do; make \
                     communicators in REBUILD mode's world again after its rebuild, in another \
                     mode",
                ));
        }
        let mut eng = self.eng.borrow_mut();
        self.check_current(op, &eng)?;
        let plain = eng.t.name() == "mpi";
        if plain && opts.failure != FailureMode::Abort {
            return Err(Error::new(ErrorKind::Unsupported, op)
                .on_rank(me)
                .with_detail(format!(
                    "failure mode {:?} needs ULFM, which the MPI library of the mpi backend \
                     does not provide (Open MPI 4): only ABORT is available there",
                    opts.failure
                )));
        }
        let mut payload = Vec::with_capacity(8 + 4 * COMM_IDS as usize);
        payload.extend_from_slice(&color.unwrap_or(NO_COLOR).to_le_bytes());
        payload.extend_from_slice(&key.to_le_bytes());
        for entry in eng.id_entries() {
            payload.extend_from_slice(&entry.to_le_bytes());
        }
        let interest = self.collective_interest(op);
        let res = match eng.interruption(&interest) {
            Some(e) => Err(e),
            None => {
                let mut link = Link {
                    eng: &mut eng,
                    interest,
                };
                ferry_coll::allgather(&mut link, &self.group, &payload).map_err(|e| e.or_rank(me))
            }
        };
        // Made everywhere or nowhere: an agreement on "the exchange worked at every member",
        // and on who failed meanwhile (they are left out).
        let mut failed = BTreeSet::new();
        let all = if plain || self.opts.failure == FailureMode::Abort {
            res.map_err(|e| self.fail(&mut eng, e))?
        } else {
            let d = eng.agree(self.id, u64::from(res.is_ok()))?;
            failed = d.failed.iter().map(|&r| r as usize).collect();
            match res {
                Ok(all) if d.value & 1 == 1 => all,
                Ok(_) => {
                    let first = failed.iter().next().copied();
                    let mut e = Error::new(ErrorKind::PeerFailed, op)
                        .on_rank(me)
                        .with_detail(format!(
                            "the exchange failed on another member (failed ranks {failed:?}); \
                             no communicator was made"
                        ));
                    if let Some(f) = first {
                        e = e.with_peer(f);
                    } else {
                        e = Error::new(ErrorKind::Revoked, op).on_rank(me).with_detail(
                            "the exchange failed on another member; no communicator was made",
                        );
                    }
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
        };
        let parsed = parse(&all, op, me)?;
        // The lowest id free at every member, and the first generation none of them used.
        let mut chosen = None;
        for id in 0..COMM_IDS {
            let g0 = parsed
                .iter()
                .map(|p| p.entries[id as usize])
                .max()
                .unwrap_or(0);
            if g0 <= MAX_GENERATIONS {
                chosen = Some((id, g0));
                break;
            }
        }
        let Some((id, g0)) = chosen else {
            return Err(Error::new(ErrorKind::ResourceExhausted, op)
                .on_rank(me)
                .with_detail(format!(
                    "no communicator id is free at every member ({COMM_IDS} per process, \
                     {MAX_GENERATIONS} generations each over the process's life): free \
                     communicators no longer used"
                )));
        };
        let Some(color) = color else {
            return Ok(None);
        };
        // Same color, by key then by rank here; members the agreement declared failed are out.
        let mut chosen_members: Vec<(u32, usize, usize)> = parsed
            .iter()
            .enumerate()
            .filter(|(_, p)| p.color == color)
            .map(|(i, p)| (p.key, i, self.group.members()[i]))
            .filter(|&(_, _, w)| !failed.contains(&w))
            .collect();
        chosen_members.sort_unstable();
        let members: Vec<usize> = chosen_members.iter().map(|m| m.2).collect();
        let my_index = members.iter().position(|&w| w == me).ok_or_else(|| {
            Error::new(ErrorKind::Protocol, op)
                .on_rank(me)
                .with_detail("this rank is not among the members of its own color")
        })?;
        let mut sorted = members.clone();
        sorted.sort_unstable();
        eng.register(id, g0, sorted);
        let group = Group::new(members.clone(), message_generation(id, g0))?;
        tracing::debug!(
            "rank {me}: {op}: communicator {id} (generation {g0}) over {members:?}, {:?}",
            opts
        );
        if opts.failure != FailureMode::Abort {
            eng.t.tolerate_failures();
        }
        drop(eng);
        Ok(Some(Communicator {
            eng: self.eng.clone(),
            id,
            base: g0,
            opts,
            generation: g0,
            members,
            gaps: BTreeSet::new(),
            group,
            my_index,
            rebuild: Default::default(),
        }))
    }
}

/// One member's contribution.
struct Contribution {
    color: u32,
    key: u32,
    entries: Vec<u32>,
}

fn parse(all: &[Vec<u8>], op: &'static str, me: usize) -> Result<Vec<Contribution>> {
    let want = 8 + 4 * COMM_IDS as usize;
    all.iter()
        .enumerate()
        .map(|(i, b)| {
            if b.len() != want {
                return Err(Error::new(ErrorKind::Protocol, op)
                    .on_rank(me)
                    .with_detail(format!(
                        "member {i} sent {} bytes, expected {want} (a peer of another version?)",
                        b.len()
                    )));
            }
            let word =
                |k: usize| u32::from_le_bytes([b[4 * k], b[4 * k + 1], b[4 * k + 2], b[4 * k + 3]]);
            Ok(Contribution {
                color: word(0),
                key: word(1),
                entries: (0..COMM_IDS as usize).map(|k| word(2 + k)).collect(),
            })
        })
        .collect()
}
