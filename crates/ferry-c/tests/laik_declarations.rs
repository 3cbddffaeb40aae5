//! Every function LAIK's current public headers declare is declared by ferry's `laik.h` (or
//! `laik-internal.h`), so a LAIK program calling it builds. The names below are those of
//! LAIK's `core.h`, `space.h`, `program.h`, `profiling.h`, `action.h` and `debug.h` as LAIK's
//! repository has them; a name ferry leaves out on purpose must be listed in `UNDECLARED` and
//! named in docs/C-API.md with the reason.

use std::path::Path;

/// Function names of LAIK's current public headers, by header.
const LAIK_NAMES: &[(&str, &[&str])] = &[
    (
        "core.h",
        &[
            "laik_init",
            "laik_finalize",
            "laik_mylocationid",
            "laik_mylocation",
            "laik_create_group",
            "laik_world",
            "laik_release_group",
            "laik_group_parent",
            "laik_set_world",
            "laik_inst",
            "laik_size",
            "laik_myid",
            "laik_phase",
            "laik_epoch",
            "laik_clone_group",
            "laik_new_union_group",
            "laik_new_shrinked_group",
            "laik_allow_world_resize",
            "laik_finish_world_resize",
            "laik_group_locationid",
            "laik_group_location",
            "laik_set_master",
            "laik_get_master",
            "laik_is_master",
            "laik_is_managed",
            "laik_get_guid",
            "laik_enable_profiling",
            "laik_reset_profiling",
            "laik_enable_profiling_file",
            "laik_close_profiling_file",
            "laik_get_total_time",
            "laik_get_backend_time",
            "laik_writeout_profile",
            "laik_profile_printf",
            "laik_profile_user_start",
            "laik_profile_user_stop",
            "laik_log_init",
            "laik_log_init_loc",
            "laik_log_cleanup",
            "laik_log_set_time",
            "laik_log_inc",
            "laik_log",
            "laik_panic",
            "laik_log_shown",
            "laik_set_loglevel",
            "laik_log_begin",
            "laik_log_append",
            "laik_log_flush",
            "laik_kvs_new",
            "laik_kvs_free",
            "laik_kvs_set",
            "laik_kvs_sets",
            "laik_kvs_clean",
            "laik_kvs_remove",
            "laik_kvs_sync",
            "laik_kvs_get",
            "laik_kvs_entry",
            "laik_kvs_count",
            "laik_kvs_getn",
            "laik_kvs_key",
            "laik_kvs_size",
            "laik_kvs_data",
            "laik_kvs_copy",
            "laik_kvs_sort",
            "laik_kvs_reg_callbacks",
        ],
    ),
    (
        "space.h",
        &[
            "laik_is_reduction",
            "laik_index_init",
            "laik_index_isEqual",
            "laik_range_init",
            "laik_range_init_copy",
            "laik_range_init_1d",
            "laik_range_init_2d",
            "laik_range_init_3d",
            "laik_range_isEmpty",
            "laik_range_intersect",
            "laik_range_expand",
            "laik_range_within_range",
            "laik_range_within_space",
            "laik_range_isEqual",
            "laik_range_size",
            "laik_new_space",
            "laik_new_space_1d",
            "laik_new_space_2d",
            "laik_new_space_3d",
            "laik_change_space_1d",
            "laik_change_space_2d",
            "laik_change_space_3d",
            "laik_free_space",
            "laik_set_space_name",
            "laik_space_asrange",
            "laik_space_size",
            "laik_space_getdimensions",
            "laik_rangelist_new",
            "laik_rangelist_free",
            "laik_rangelist_append",
            "laik_rangelist_append_single1d",
            "laik_rangelist_freeze",
            "laik_rangelist_migrate",
            "laik_rangelist_isAll",
            "laik_rangelist_isSingle",
            "laik_rangelist_isEqual",
            "laik_rangelist_coversSpace",
            "laik_rangelist_rangecount",
            "laik_rangelist_tidrangecount",
            "laik_rangelist_tidmapcount",
            "laik_rangelist_tidmaprangecount",
            "laik_rangelist_taskrange",
            "laik_rangelist_tidrange",
            "laik_rangelist_tidmaprange",
            "laik_rangefilter_new",
            "laik_rangefilter_free",
            "laik_rangefilter_set_myfilter",
            "laik_rangefilter_add_idxfilter",
            "laik_new_partitioner",
            "laik_run_partitioner",
            "laik_append_range",
            "laik_append_index_1d",
            "laik_new_empty_partitioning",
            "laik_clone_empty_partitioning",
            "laik_partitioning_allranges",
            "laik_partitioning_myranges",
            "laik_partitioning_interranges",
            "laik_partitioning_store_allranges",
            "laik_partitioning_store_myranges",
            "laik_partitioning_store_intersectranges",
            "laik_new_partitioning",
            "laik_new_migrated_partitioning",
            "laik_free_partitioning",
            "laik_partitioning_set_name",
            "laik_partitioning_migrate",
            "laik_my_rangecount",
            "laik_my_mapcount",
            "laik_my_maprangecount",
            "laik_my_range",
            "laik_my_maprange",
            "laik_my_range_1d",
            "laik_my_range_2d",
            "laik_my_range_3d",
            "laik_partitioning_get_space",
            "laik_partitioning_get_group",
            "laik_partitioning_rangecount",
            "laik_partitioning_get_taskrange",
            "laik_taskrange_get_range",
            "laik_taskrange_get_task",
            "laik_taskrange_get_data",
            "laik_taskrange_set_data",
            "laik_taskrange_get_mapNo",
            "laik_taskrange_get_tag",
            "laik_partitioner_data",
            "laik_partitioning_isAll",
            "laik_partitioning_isSingle",
            "laik_partitioning_coversSpace",
            "laik_partitioning_isEqual",
            "laik_new_all_partitioner",
            "laik_new_master_partitioner",
            "laik_new_copy_partitioner",
            "laik_new_cornerhalo_partitioner",
            "laik_new_halo_partitioner",
            "laik_new_bisection_partitioner",
            "laik_new_grid_partitioner",
            "laik_new_block_partitioner",
            "laik_new_block_partitioner1",
            "laik_new_block_partitioner_iw1",
            "laik_new_block_partitioner_tw1",
            "laik_set_index_weight",
            "laik_set_task_weight",
            "laik_set_cycle_count",
            "laik_new_reassign_partitioner",
            "laik_index_global2local",
            "laik_calc_transition",
            "laik_free_transition",
        ],
    ),
    (
        "program.h",
        &[
            "laik_program_control_init",
            "laik_set_iteration",
            "laik_get_iteration",
            "laik_set_phase",
            "laik_get_phase",
            "laik_set_args",
            "laik_iter_reset",
        ],
    ),
    (
        "profiling.h",
        &["laik_wtime", "laik_init_profiling", "laik_free_profiling"],
    ),
    ("action.h", &["laik_aseq_new", "laik_aseq_free"]),
    (
        "debug.h",
        &[
            "laik_log_IntList",
            "laik_log_PrettyInt",
            "laik_log_Space",
            "laik_log_Index",
            "laik_log_Range",
            "laik_log_Reduction",
            "laik_log_DataFlow",
            "laik_log_Transition",
            "laik_log_Partitioning",
            "laik_log_SwitchStat",
            "laik_log_Action",
            "laik_log_ActionSeq",
            "laik_log_Checksum",
        ],
    ),
];

/// Names left undeclared on purpose (each must be named in docs/C-API.md).
const UNDECLARED: &[&str] = &[];

fn declares(headers: &str, name: &str) -> bool {
    headers.match_indices(name).any(|(at, _)| {
        let before = headers[..at].chars().next_back();
        let after = headers[at + name.len()..].trim_start();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && after.starts_with('(')
    })
}

#[test]
fn every_function_of_laiks_public_headers_is_declared_or_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
    let headers = read(&root.join("include/laik.h")) + &read(&root.join("include/laik-internal.h"));
    let docs = read(&root.join("../../docs/C-API.md"));
    let mut missing = Vec::new();
    for (header, names) in LAIK_NAMES {
        for name in *names {
            if UNDECLARED.contains(name) {
                assert!(
                    docs.contains(&format!("`{name}`")),
                    "{name} ({header}) is left undeclared but docs/C-API.md does not say why"
                );
            } else if !declares(&headers, name) {
                missing.push(format!("{name} ({header})"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "declared by LAIK, not by laik.h: {missing:?}"
    );
}
