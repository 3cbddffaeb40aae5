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
//!   global index.
//!
//! Needs `cc` and the launcher of this profile (`cargo build --release --workspace`); the
//! library is (re)built by the test itself. Without them the tests fail under `CI=true` and say
//! why they skip otherwise.

#[path = "../../ferry/tests/support/mod.rs"]
mod support;

mod c_support;

use c_support::{compile, launch, tools, BACKENDS};

/// The group fields and location exchange of `laik-internal.h` that LAIK's `locationtest`
/// uses (`world->myid`, `world->size`, `laik_sync_location`, `laik_group_location` of other
/// members): `tests/c/laik_locations.c` checks them on every process (exit 1 on a mismatch)
/// on 2 and 4 processes on tcp, shm and hybrid.
#[test]
fn laik_group_fields_and_locations_of_the_internal_header() {
    let Some((ferry, libdir)) = tools("laik_group_fields_and_locations_of_the_internal_header")
    else {
        return;
    };
    let prog = compile("laik_locations", &libdir);
    for b in BACKENDS {
        for n in [2, 4] {
            let r = launch(&ferry, &libdir, b, n, &[], &prog, &[]);
            assert_eq!(
                r.status,
                Some(0),
                "{b}, {n} processes: stdout:\n{}stderr:\n{}",
                r.stdout,
                r.stderr
            );
            assert_eq!(
                r.stdout,
                format!("group fields and {n} locations: ok\n"),
                "{b}"
            );
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
    let Some((ferry, libdir)) = tools("laik_any_and_single_reductions_copy_one_of_equal_copies")
    else {
        return;
    };
    let prog = compile("laik_any_copy", &libdir);
    for b in BACKENDS {
        for n in [1, 3, 4] {
            let r = launch(&ferry, &libdir, b, n, &[], &prog, &[]);
            assert_eq!(
                r.status,
                Some(0),
                "{b}, {n} processes: stdout:\n{}stderr:\n{}",
                r.stdout,
                r.stderr
            );
            assert_eq!(
                r.stdout,
                format!("Any and Single on {n} processes: ok\n"),
                "{b}"
            );
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
    let Some((ferry, libdir)) = tools("laik_values_held_by_some_processes_sum_at_the_master")
    else {
        return;
    };
    let prog = compile("laik_subset_sum", &libdir);
    for b in BACKENDS {
        for (n, spread, holders) in [(2, false, 1), (5, false, 2), (4, true, 2), (5, true, 2)] {
            let args: Vec<String> = if spread { vec!["-s".into()] } else { vec![] };
            let r = launch(&ferry, &libdir, b, n, &[], &prog, &args);
            let what = if spread { "spread" } else { "close" };
            assert_eq!(
                r.status,
                Some(0),
                "{b}, {n} processes, {what}: stdout:\n{}stderr:\n{}",
                r.stdout,
                r.stderr
            );
            assert_eq!(
                r.stdout,
                format!(
                    "{what} pairs of {n} processes: {holders} holders summed at the master \
                     and back: ok\n"
                ),
                "{b}"
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
    let Some((ferry, libdir)) = tools("laik_compact_mappings_index_like_plain_ones_across_ranks")
    else {
        return;
    };
    let prog = compile("laik_pull", &libdir);
    let args = |extra: &[&str]| -> Vec<String> {
        extra
            .iter()
            .chain(["-f", "60", "4", "5"].iter())
            .map(|s| s.to_string())
            .collect()
    };
    let results = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.contains("result probs"))
            .map(str::to_string)
            .collect()
    };
    for b in BACKENDS {
        let plain = launch(&ferry, &libdir, b, 4, &[], &prog, &args(&[]));
        let compact = launch(&ferry, &libdir, b, 4, &[], &prog, &args(&["-c"]));
        for (what, r) in [("plain", &plain), ("-c", &compact)] {
            assert_eq!(r.status, Some(0), "{b}: {what} run; stderr:\n{}", r.stderr);
        }
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
    let Some((ferry, libdir)) = tools("laik_programs_run_with_more_ranks_than_states") else {
        return;
    };
    let runs = [
        ("laik_pull", vec!["5", "2"]),
        ("laik_pull", vec!["-i", "5", "2"]),
        ("laik_chain", vec!["5", "2"]),
    ];
    for (name, args) in runs {
        let prog = compile(name, &libdir);
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let one = launch(&ferry, &libdir, "tcp", 1, &[], &prog, &args);
        assert_eq!(
            one.status,
            Some(0),
            "{name} {args:?} on 1 rank; stderr:\n{}",
            one.stderr
        );
        for b in BACKENDS {
            let r = launch(&ferry, &libdir, b, 8, &[], &prog, &args);
            assert_eq!(
                r.status,
                Some(0),
                "{name} {args:?} on 8 ranks, {b}; stderr:\n{}",
                r.stderr
            );
            assert_eq!(
                r.stdout, one.stdout,
                "{name} {args:?} on 8 ranks, {b}: output differs from 1 rank"
            );
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
    let Some((ferry, libdir)) =
        tools("laik_index_translation_without_elements_names_the_call_and_rank")
    else {
        return;
    };
    let prog = compile("laik_no_local", &libdir);
    for b in BACKENDS {
        let r = launch(&ferry, &libdir, b, 4, &[], &prog, &[]);
        assert_eq!(r.status, Some(1), "{b}: stderr:\n{}", r.stderr);
        // The first process to fail ends the job, so the other one may not get to report.
        let tail = ": laik_local2global_1d: laik_local2global_1d: invalid argument: no mapping \
                    0 on this process (it holds no element)";
        let reports: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| l.contains("laik_local2global_1d"))
            .collect();
        assert!(!reports.is_empty(), "{b}: no report in:\n{}", r.stderr);
        for l in reports {
            assert!(
                [0, 2]
                    .iter()
                    .any(|rank| l == format!("LAIK error: rank {rank}{tail}")),
                "{b}: `{l}`"
            );
        }
    }
}
