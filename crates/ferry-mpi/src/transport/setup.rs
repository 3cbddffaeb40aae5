//! Start-up: the communicator (`MPI_COMM_WORLD` itself or private duplicates, see
//! [`MpiTransport::init`]), the tag layout from `MPI_TAG_UB`, and the node of every rank.

use std::ffi::{c_int, c_void};
use std::ptr;

use ferry_core::error::{Error, ErrorKind, Result};
use ferry_core::stats::Stats;
use mpi::ffi;

use super::call::check;
use super::MpiTransport;
use crate::tags::TagMap;

impl MpiTransport {
    pub(super) fn setup(&mut self) -> Result<()> {
        // SAFETY: plain MPI calls on handles created here; out-pointers point to locals.
        unsafe {
            let (mut rank, mut size): (c_int, c_int) = (0, 0);
            check(
                ffi::MPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut rank),
                0,
                "mpi init",
            )?;
            check(
                ffi::MPI_Comm_size(ffi::RSMPI_COMM_WORLD, &mut size),
                0,
                "mpi init",
            )?;
            self.rank = rank as usize;
            self.size = size as usize;
            self.stats = Stats::new(self.rank, self.size, "mpi");

            let mut ub_ptr: *mut c_int = ptr::null_mut();
            let mut flag: c_int = 0;
            check(
                ffi::MPI_Comm_get_attr(
                    ffi::RSMPI_COMM_WORLD,
                    ffi::MPI_TAG_UB as c_int,
                    (&mut ub_ptr as *mut *mut c_int).cast::<c_void>(),
                    &mut flag,
                ),
                self.rank,
                "mpi init (MPI_TAG_UB)",
            )?;
            let tag_ub = if flag != 0 && !ub_ptr.is_null() {
                *ub_ptr
            } else {
                32767
            };
            self.tags = TagMap::new(tag_ub).ok_or_else(|| {
                Error::new(ErrorKind::Mpi, "mpi init")
                    .on_rank(self.rank)
                    .with_detail(format!(
                        "MPI_TAG_UB is {tag_ub}, below the 32767 the MPI standard guarantees"
                    ))
            })?;
            let force_dup = std::env::var("FERRY_MPI_DUP_COMM").is_ok_and(|v| v == "1");
            let layout = TagMap::with_rest_bit(tag_ub);
            // Every rank must choose alike (a rank on MPI_COMM_WORLD never matches one on a
            // duplicate), and the variable or the program's own MPI_Init may differ between
            // the applications of an MPMD launch: the ranks agree with one blocking
            // MPI_Allreduce (a blocking collective registers no libnbc callback).
            let mine: i32 = i32::from(layout.is_some() && self.universe.is_some() && !force_dup);
            let mut all: i32 = 0;
            check(
                ffi::MPI_Allreduce(
                    (&mine as *const i32).cast::<c_void>(),
                    (&mut all as *mut i32).cast::<c_void>(),
                    1,
                    ffi::RSMPI_INT32_T,
                    ffi::RSMPI_MIN,
                    ffi::RSMPI_COMM_WORLD,
                ),
                self.rank,
                "mpi init (MPI_Allreduce)",
            )?;
            match layout {
                Some((tags, rest_bit)) if all == 1 => {
                    self.tags = tags;
                    self.rest_bit = rest_bit;
                    self.world = true;
                    self.comm = ffi::RSMPI_COMM_WORLD;
                    self.rest_comm = ffi::RSMPI_COMM_WORLD;
                    check(
                        ffi::MPI_Comm_set_errhandler(self.comm, ffi::RSMPI_ERRORS_RETURN),
                        self.rank,
                        "mpi init (MPI_Comm_set_errhandler)",
                    )?;
                    self.nodes = self.nodes_by_name()?;
                }
                _ => self.setup_duplicates(rank)?,
            }
        }
        tracing::debug!(
            rank = self.rank,
            size = self.size,
            world = self.world,
            max_exact_tag = self.tags.max_exact_tag(),
            "mpi backend ready"
        );
        Ok(())
    }

    /// The node of every rank, numbered in order of the nodes' lowest ranks, from the
    /// processor names of all ranks (Open MPI and MPICH name the host): one `MPI_Allgather`, a
    /// blocking collective, which creates no communicator (see [`MpiTransport::init`]).
    fn nodes_by_name(&self) -> Result<Vec<usize>> {
        const NAME: usize = ffi::MPI_MAX_PROCESSOR_NAME as usize;
        let mut mine = vec![0u8; NAME];
        let mut len: c_int = 0;
        // SAFETY: `mine` holds MPI_MAX_PROCESSOR_NAME bytes, as the call requires.
        let rc = unsafe { ffi::MPI_Get_processor_name(mine.as_mut_ptr().cast(), &mut len) };
        check(rc, self.rank, "mpi init (MPI_Get_processor_name)")?;
        let mut all = vec![0u8; NAME * self.size];
        // SAFETY: `all` holds `size` blocks of NAME bytes; both buffers outlive the call.
        let rc = unsafe {
            ffi::MPI_Allgather(
                mine.as_ptr().cast::<c_void>(),
                NAME as c_int,
                ffi::RSMPI_UINT8_T,
                all.as_mut_ptr().cast::<c_void>(),
                NAME as c_int,
                ffi::RSMPI_UINT8_T,
                self.comm,
            )
        };
        check(rc, self.rank, "mpi init (MPI_Allgather)")?;
        let names: Vec<&[u8]> = all.chunks(NAME).collect();
        let mut leaders: Vec<&[u8]> = Vec::new();
        Ok(names
            .iter()
            .map(|name| {
                leaders.iter().position(|l| l == name).unwrap_or_else(|| {
                    leaders.push(name);
                    leaders.len() - 1
                })
            })
            .collect())
    }

    /// Sets up the two private duplicates of `MPI_COMM_WORLD` and finds nodes with
    /// `MPI_Comm_split_type` (see [`MpiTransport::init`]).
    ///
    /// # Safety
    /// MPI must be initialised; called once, from `setup`.
    unsafe fn setup_duplicates(&mut self, rank: c_int) -> Result<()> {
        // SAFETY: plain MPI calls on handles created here; out-pointers point to locals.
        unsafe {
            let mut comm = ffi::RSMPI_COMM_NULL;
            check(
                ffi::MPI_Comm_dup(ffi::RSMPI_COMM_WORLD, &mut comm),
                self.rank,
                "mpi init (MPI_Comm_dup)",
            )?;
            self.comm = comm;
            check(
                ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN),
                self.rank,
                "mpi init (MPI_Comm_set_errhandler)",
            )?;
            let mut rest_comm = ffi::RSMPI_COMM_NULL;
            check(
                ffi::MPI_Comm_dup(comm, &mut rest_comm),
                self.rank,
                "mpi init (MPI_Comm_dup)",
            )?;
            self.rest_comm = rest_comm;
            check(
                ffi::MPI_Comm_set_errhandler(rest_comm, ffi::RSMPI_ERRORS_RETURN),
                self.rank,
                "mpi init (MPI_Comm_set_errhandler)",
            )?;

            // Node discovery: the lowest rank of each shared-memory group names the node.
            let mut node_comm = ffi::RSMPI_COMM_NULL;
            check(
                ffi::MPI_Comm_split_type(
                    comm,
                    ffi::RSMPI_COMM_TYPE_SHARED,
                    rank,
                    ffi::RSMPI_INFO_NULL,
                    &mut node_comm,
                ),
                self.rank,
                "mpi init (MPI_Comm_split_type)",
            )?;
            let mut leader: c_int = rank;
            let rc = ffi::MPI_Bcast(
                (&mut leader as *mut c_int).cast::<c_void>(),
                1,
                ffi::RSMPI_INT32_T,
                0,
                node_comm,
            );
            ffi::MPI_Comm_free(&mut node_comm);
            check(rc, self.rank, "mpi init (MPI_Bcast)")?;
            let mut leaders: Vec<c_int> = vec![0; self.size];
            check(
                ffi::MPI_Allgather(
                    (&leader as *const c_int).cast::<c_void>(),
                    1,
                    ffi::RSMPI_INT32_T,
                    leaders.as_mut_ptr().cast::<c_void>(),
                    1,
                    ffi::RSMPI_INT32_T,
                    comm,
                ),
                self.rank,
                "mpi init (MPI_Allgather)",
            )?;
            let mut distinct = leaders.clone();
            distinct.sort_unstable();
            distinct.dedup();
            self.nodes = leaders
                .iter()
                .map(|l| distinct.binary_search(l).unwrap_or(0))
                .collect();
        }
        Ok(())
    }
}
