//! The registered list of the adapter's public entry points. `cargo xtask guards` checks
//! that every public function in the adapter is listed here and every listed name
//! exists, so a new way into Lance's write path is always a reviewed change.

/// Every public function of the adapter.
pub const ENTRY_POINTS: &[&str] = &[
    "create_table",
    "open_table_at",
    "read_link_origin",
    "version_references",
    "delete_table_object",
    "manifest_name",
    "detached_manifest_object",
    "stage_append",
    "recommit_append",
    "recommit_on_newer_base",
    "fragments_changed_by",
    "stage_delete",
    "stage_merge_insert",
    "stage_update",
    "stage_compaction",
    "compaction_options",
    "base_drift",
    "restage_compaction",
    "recommit_index_build",
    "full_text_params",
    "stage_index",
    "stage_index_within",
    "stage_add_null_columns",
    "stage_drop_columns",
    "stage_drop_index",
    "stage_set_nullability",
    "version_of",
    "is_detached",
    "baseline_create",
    "baseline_append",
    "baseline_index",
    "baseline_compact_and_optimize_indices",
];
