//! C programs of our own over the calls and semantics that LAIK's current example and test
//! sources use and the conformance programs of `c_programs.rs` did not (found by building
//! LAIK's sources and reconstructions of them with `laik-sources.sh`, docs/C-API.md), each
//! run through `ferry run` on tcp, shm and hybrid and checking its own results:
//!
//! * `tests/c/laik_locations.c`: the group fields and the location exchange of
//!   `laik-internal.h` (LAIK's `locationtest`);
//! * `tests/c/laik_any_copy.c`: halo switches with `LAIK_RO_Any` and a collection with
//!   `LAIK_RO_Single` (LAIK's `anytest`), checked value by value;
//! * `tests/c/laik_subset_sum.c`: values held by some processes only (overlapping ranges of an
//!   application partitioner) summed at the master and sent back, as LAIK's current ping_pong
//!   sums its pairs' times;
//! * `tests/c/laik_pull.c -c`: a compact mapping on several ranks (markov's `-c`);
//! * `tests/c/laik_pull.c`, `laik_chain.c` on more ranks than states, where ranks hold
//!   nothing, and `tests/c/laik_no_local.c`, the fatal error of asking such a rank for a
//!   global index;
//! * `tests/c/laik_bitwise.c`: `LAIK_RO_And` / `LAIK_RO_Or` over LAIK's integer types;
//! * `tests/c/laik_world_calls.c`: the world, allocator and agent calls of LAIK's headers
//!   (`laik_set_world`, `laik_get_guid`, `laik_set_args`, `laik_index_global2local`,
//!   allocators, `ext.h`);
//! * `tests/c/laik_printers.c`: the debug printers of range lists, transitions, action
//!   sequences and checksums;
//! * `tests/c/laik_layout_lex.c`: strides and offsets of LAIK's lexicographic layout objects.
//! * `tests/c/laik_user_layout.c`: a layout of the program's own (`struct _Laik_Layout`)
//!   placing the container's elements, generic pack and unpack, a non-strided layout refused;
//! * `tests/c/laik_setup_calls.c`: logging set-up, program-control and profiling records,
//!   empty action sequences, action names and the action and switch-statistic printers;
//! * `tests/c/laik_alloc_memory.c`: mappings in the memory of the program's allocator.
//!
//! Needs `cc` and the launcher of this profile (`cargo build --release --workspace`); the
//! library is (re)built by the test itself. Without them the tests fail under `CI=true` and say
//! why they skip otherwise.

#[path = "../../ferry/tests/support/mod.rs"]
mod support;

mod c_support;

use c_support::{Prog, BACKENDS};

/// The group fields and location exchange of `laik-internal.h` that LAIK's `locationtest`
/// uses (`world->myid`, `world->size`, `laik_sync_location`, `laik_group_location` of other
/// members): `tests/c/laik_locations.c` checks them on every process (exit 1 on a mismatch)
/// on 2 and 4 processes on tcp, shm and hybrid.
#[test]
fn laik_group_fields_and_locations_of_the_internal_header() {
    let test = "laik_group_fields_and_locations_of_the_internal_header";
    let Some(p) = Prog::build(test, "laik_locations") else {
        return;
    };
    for b in BACKENDS {
        for n in [2, 4] {
            p.expect_stdout(b, n, &[], &format!("group fields and {n} locations: ok\n"));
        }
    }
}

/// `LAIK_RO_Any` and `LAIK_RO_Single` (LAIK's own test programs switch halos with
/// `LAIK_RO_Any`; ferry rejected both as unsupported): `tests/c/laik_any_copy.c` switches a
/// block partitioning to its corner halo and the halo to itself with Any, sums every copy at
/// the master and collects with Single, checking each value (exit 1 on a mismatch), on 1, 3
/// and 4 processes on tcp, shm and hybrid.
#[test]
fn laik_any_and_single_reductions_copy_one_of_equal_copies() {
    let test = "laik_any_and_single_reductions_copy_one_of_equal_copies";
    let Some(p) = Prog::build(test, "laik_any_copy") else {
        return;
    };
    for b in BACKENDS {
        for n in [1, 3, 4] {
            p.expect_stdout(b, n, &[], &format!("Any and Single on {n} processes: ok\n"));
        }
    }
}

/// Values held by some processes only, summed at the master and sent back, as LAIK's current
/// ping_pong sums its pairs' times (`tests/c/laik_subset_sum.c`: an application partitioner
/// gives the whole space to the first process of every pair, close or spread; the program
/// checks which processes get memory from `laik_get_map_1d`, the sum at the master and the
/// values back at the holders, and exits 1 on a mismatch), with odd process counts where the
/// last process is in no pair.
#[test]
fn laik_values_held_by_some_processes_sum_at_the_master() {
    let test = "laik_values_held_by_some_processes_sum_at_the_master";
    let Some(p) = Prog::build(test, "laik_subset_sum") else {
        return;
    };
    for b in BACKENDS {
        for (n, spread, holders) in [(2, false, 1), (5, false, 2), (4, true, 2), (5, true, 2)] {
            let args: &[&str] = if spread { &["-s"] } else { &[] };
            let what = if spread { "spread" } else { "close" };
            p.expect_stdout(
                b,
                n,
                args,
                &format!(
                    "{what} pairs of {n} processes: {holders} holders summed at the master \
                     and back: ok\n"
                ),
            );
        }
    }
}

/// `LAIK_PF_Compact` on more than one rank: markov's read partitioning (`laik_pull.c -c`,
/// merged ranges of the sources of a rank's states, several disjoint ranges per rank with
/// `-f`) keeps all of a rank's ranges in mapping 0, so offsets from `laik_local2global_1d` /
/// `laik_global2local_1d` index the memory the program reads (with one mapping per range they
/// pointed into another range's memory and the sums came out wrong). The results must equal
/// those of the plain run on tcp, shm and hybrid.
#[test]
fn laik_compact_mappings_index_like_plain_ones_across_ranks() {
    let test = "laik_compact_mappings_index_like_plain_ones_across_ranks";
    let Some(p) = Prog::build(test, "laik_pull") else {
        return;
    };
    let results = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.contains("result probs"))
            .map(str::to_string)
            .collect()
    };
    for b in BACKENDS {
        let plain = p.expect(b, 4, &["-f", "60", "4", "5"], 0);
        let compact = p.expect(b, 4, &["-c", "-f", "60", "4", "5"], 0);
        assert!(
            compact
                .stdout
                .contains(" Using compact mapping. Using indirection.\n"),
            "{b}: {}",
            compact.stdout
        );
        assert_eq!(results(&plain.stdout).len(), 3, "{b}: {}", plain.stdout);
        assert_eq!(
            results(&compact.stdout),
            results(&plain.stdout),
            "{b}: results differ with a compact read mapping"
        );
    }
}

/// Ranks that hold no state: our markov (`laik_pull.c`, also with `-i`) and markov2
/// (`laik_chain.c`) on 8 ranks over 5 states, where the block partitioner leaves ranks without
/// elements. Such a rank has no local index to translate (`laik_local2global_1d` is fatal
/// there, as LAIK asserts), so the programs must not ask; their output must equal that of one
/// rank.
#[test]
fn laik_programs_run_with_more_ranks_than_states() {
    let test = "laik_programs_run_with_more_ranks_than_states";
    let Some(pull) = Prog::build(test, "laik_pull") else {
        return;
    };
    let chain = pull.other("laik_chain");
    let runs: [(&Prog, &[&str]); 3] = [
        (&pull, &["5", "2"]),
        (&pull, &["-i", "5", "2"]),
        (&chain, &["5", "2"]),
    ];
    for (p, args) in runs {
        let one = p.expect("tcp", 1, args, 0);
        for b in BACKENDS {
            p.expect_stdout(b, 8, args, &one.stdout);
        }
    }
}

/// A process that holds nothing asking for the global index of its local index 0 (what
/// `laik_chain.c` / `laik_pull.c` did on 8 ranks): fatal as in LAIK, and the message names
/// the rank, the call the program made (`laik_local2global_1d`, not an inner one) and why.
/// `tests/c/laik_no_local.c` on 4 processes over 2 elements, where ranks 0 and 2 hold nothing
/// (each report must name one of them).
#[test]
fn laik_index_translation_without_elements_names_the_call_and_rank() {
    let test = "laik_index_translation_without_elements_names_the_call_and_rank";
    let Some(p) = Prog::build(test, "laik_no_local") else {
        return;
    };
    for b in BACKENDS {
        // The first process to fail ends the job, so the other one may not get to report.
        let tail = ": laik_local2global_1d: laik_local2global_1d: invalid argument: no mapping \
                    0 on this process (it holds no element)";
        let r = p.expect_fatal(b, 4, &[], &[tail], "");
        for l in r
            .stderr
            .lines()
            .filter(|l| l.contains("laik_local2global_1d"))
        {
            assert!(
                [0, 2]
                    .iter()
                    .any(|rank| l == format!("LAIK error: rank {rank}{tail}")),
                "{b}: `{l}`"
            );
        }
    }
}

/// `LAIK_RO_And` and `LAIK_RO_Or`, LAIK's bitwise reductions over its integer types (ferry
/// refused both as unsupported): `tests/c/laik_bitwise.c` checks the neutral elements of the
/// Init flow, the combination at the master, an all-reduce and a reduction into blocks over
/// int32, uint64 and uchar containers value by value, on 1, 3 and 4 processes on tcp, shm
/// and hybrid. Over doubles (`-f`) the switch is LAIK's fatal error, as LAIK defines the
/// bitwise operations for integers only.
#[test]
fn laik_bitwise_and_or_reductions_over_integer_types() {
    let test = "laik_bitwise_and_or_reductions_over_integer_types";
    let Some(p) = Prog::build(test, "laik_bitwise") else {
        return;
    };
    for b in BACKENDS {
        for n in [1, 3, 4] {
            p.expect_stdout(b, n, &[], &format!("And and Or on {n} processes: ok\n"));
        }
    }
    p.expect_fatal(
        "tcp",
        2,
        &["-f"],
        &[
            "unsupported: bitwise reduction (LAIK_RO_And / LAIK_RO_Or)",
            "floating point",
        ],
        "accepted",
    );
}

/// The world, allocator and agent calls of LAIK's headers (`tests/c/laik_world_calls.c`,
/// which checks each and exits 1 on a mismatch): `laik_get_guid`, `laik_set_args`,
/// `laik_index_global2local` on 1d and 2d block partitionings, `laik_allocator_def`,
/// `laik_new_allocator(_def)`, `laik_set_allocator` / `laik_get_allocator`, `laik_ext_init`,
/// `laik_get_failed` and `laik_ext_cleanup` without agents, and `laik_set_world` (with the
/// world itself: nothing changes; with the world minus its last process: the epoch advances,
/// the removed process is unmanaged and ends, the rest sum over the new world), on 1, 3 and 4
/// processes on tcp, shm and hybrid. Loading an agent (`-a`) and `laik_create_group` (`-g`)
/// are LAIK's fatal error with the reason.
#[test]
fn laik_world_allocator_and_agent_calls() {
    let test = "laik_world_allocator_and_agent_calls";
    let Some(p) = Prog::build(test, "laik_world_calls") else {
        return;
    };
    for b in BACKENDS {
        for n in [1, 3, 4] {
            let m = if n > 1 { n - 1 } else { 1 };
            p.expect_stdout(
                b,
                n,
                &[],
                &format!("world calls on {n} processes, {m} in the new world: ok\n"),
            );
        }
    }
    p.expect_fatal(
        "tcp",
        2,
        &["-a"],
        &[
            "laik_ext_load_agent_from_function",
            "external agents (ext.h) are not provided",
        ],
        "an agent was loaded",
    );
    p.expect_fatal(
        "shm",
        2,
        &["-g"],
        &["laik_create_group", "unsupported: an empty group"],
        "an empty group was made",
    );
}

/// LAIK's debug printers of internal objects (`tests/c/laik_printers.c`): rank 0 logs a range
/// list, a transition, the action sequence made from it and a checksum in one warning line,
/// and at level 1 the "if changed" lines of the sequence, which every process then executes
/// (the master checks the sum), on 1 and 3 processes on tcp, shm and hybrid. A checksum of
/// int32 elements (`-c`) is LAIK's fatal error, as LAIK asserts a double buffer.
#[test]
fn laik_debug_printers_of_range_lists_transitions_and_sequences() {
    let test = "laik_debug_printers_of_range_lists_transitions_and_sequences";
    let Some(p) = Prog::build(test, "laik_printers") else {
        return;
    };
    let transition = "transition to 'collect' (flow preserve, reduction sum)";
    let line = format!(
        "LAIK warning rank 0: printers2: 2 ranges: T0 [0;4[, T1 [4;10[ | {transition} | \
         actions for {transition} on 'vec' | checksum 6.750000\n\
         LAIK debug rank 0: aseq: nothing changed\n\
         LAIK debug rank 0: aseq:\nactions for {transition} on 'vec'\n"
    );
    for b in BACKENDS {
        for n in [1, 3] {
            let r = p.expect(b, n, &[], 0);
            assert_eq!(
                r.stdout, "printers and the printed sequence: ok\n",
                "{b} -n {n}"
            );
            assert!(r.stderr.contains(&line), "{b} -n {n}: {}", r.stderr);
        }
    }
    p.expect_fatal(
        "tcp",
        2,
        &["-c"],
        &["laik_log_Checksum", "a type other than laik_Double"],
        "accepted",
    );
}

/// LAIK's lexicographic layout objects (`tests/c/laik_layout_lex.c`): a layout over this
/// process's ranges of a 2d block partitioning with two cycles gives the x and y strides of
/// each section, and `laik_offset` of every index finds its value in the container's mapping
/// of that range; a 3d box checks the z stride and the last offset. On 1, 3 and 4 processes
/// on tcp, shm and hybrid.
#[test]
fn laik_lexicographic_layouts_give_strides_and_offsets() {
    let test = "laik_lexicographic_layouts_give_strides_and_offsets";
    let Some(p) = Prog::build(test, "laik_layout_lex") else {
        return;
    };
    for b in BACKENDS {
        for n in [1, 3, 4] {
            p.expect_stdout(
                b,
                n,
                &[],
                &format!("lexicographic layouts of {n} processes: ok\n"),
            );
        }
    }
}

/// A layout of the program's own (`tests/c/laik_user_layout.c`: `struct _Laik_Layout` filled
/// by `laik_init_layout`, column-major with padding) given through the layout factory: the
/// processes write their blocks at the layout's offsets, pack them with the generic pack
/// (checked in x-fastest order), unpack negated values (checked at the layout's offsets), and
/// the master collects the space and finds every value where its own layout says, on 1, 3 and
/// 4 processes on tcp, shm and hybrid; the same with LAIK's lexicographic layout as the
/// factory (`-l`) on 3. A layout that is not made of strides (`-s`, serpentine rows) is
/// LAIK's fatal error naming it.
#[test]
fn laik_own_layouts_place_the_elements_of_mappings() {
    let test = "laik_own_layouts_place_the_elements_of_mappings";
    let Some(p) = Prog::build(test, "laik_user_layout") else {
        return;
    };
    for b in BACKENDS {
        for n in [1, 3, 4] {
            p.expect_stdout(b, n, &[], &format!("own layout on {n} processes: ok\n"));
        }
        p.expect_stdout(b, 3, &["-l"], "own layout on 3 processes: ok\n");
    }
    p.expect_fatal(
        "shm",
        2,
        &["-s"],
        &[
            "laik_data_set_layout_factory",
            "layout 'serpentine' is not a strided layout",
        ],
        "own layout on",
    );
}

/// The set-up calls of LAIK's logging, program control and profiling, empty action sequences
/// and the printers of actions and switch statistics (`tests/c/laik_setup_calls.c`): the
/// program checks thresholds, records, user time and action names itself; its log lines show
/// the early location, the counter and time base in the prefix and their removal by
/// `laik_log_cleanup`, and the printers' text. On 1 and 3 processes on tcp, shm and hybrid.
#[test]
fn laik_logging_program_control_and_profiling_set_up() {
    let test = "laik_logging_program_control_and_profiling_set_up";
    let Some(p) = Prog::build(test, "laik_setup_calls") else {
        return;
    };
    let lines = [
        "LAIK error early-location: before init\n",
        "LAIK error rank 0 #2 +100.0",
        "s: counted and timed\n",
        "LAIK error rank 0: after cleanup\n",
        "LAIK error rank 0: printers: empty action sequence | BufSend (24 bytes) | \
         6 switches (2 without actions)\n    messages: 4 sent (0 async, 16 elements, 128 B), \
         0 received (0 async, 0 elements, 0 B)\n",
    ];
    for b in BACKENDS {
        for n in [1, 3] {
            let r = p.expect(b, n, &[], 0);
            assert_eq!(
                r.stdout,
                format!("set-up calls on {n} processes: ok\n"),
                "{b} -n {n}"
            );
            for l in lines {
                assert!(
                    r.stderr.contains(l),
                    "{b} -n {n}: no `{l}` in:\n{}",
                    r.stderr
                );
            }
        }
    }
}

/// A container's mappings in the memory of the allocator the program set
/// (`tests/c/laik_alloc_memory.c`, a counting allocator): after each switch the mapping lies
/// in a block the allocator handed out and holds the values written before, the blocks of the
/// previous partitioning went back through its free, and `laik_free` returns the rest; on 1
/// and 3 processes on tcp, shm and hybrid.
#[test]
fn laik_mappings_come_from_the_programs_allocator() {
    let test = "laik_mappings_come_from_the_programs_allocator";
    let Some(p) = Prog::build(test, "laik_alloc_memory") else {
        return;
    };
    for b in BACKENDS {
        for n in [1, 3] {
            p.expect_stdout(
                b,
                n,
                &[],
                &format!("allocator memory on {n} processes: ok\n"),
            );
        }
    }
}
