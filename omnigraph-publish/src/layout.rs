//! Where the graph's own objects live under the root (`docs/format.md` §2). Every path is built
//! here from validated parts: no type or table name ever becomes part of a path.

use crate::limits::{BRANCH_LEN_MAX, TABLE_ID_LEN_MAX};
use omnigraph_core::{InputLocation, OmniError, Result};

/// The format object: written once, put-if-absent.
pub const FORMAT: &str = "_graph/FORMAT";
/// The branch every graph starts with.
pub const MAIN_BRANCH: &str = "main";

/// The content-addressed schema document.
pub fn schema_path(hash: &str) -> String {
    format!("_graph/schemas/{hash}.json")
}

/// The folder of every branch's log.
pub const BRANCHES_DIR: &str = "_graph/branches";

/// The folder of a branch's commits.
pub fn commits_dir(branch: &str) -> String {
    format!("_graph/branches/{branch}/commits")
}

/// The immutable commit `seq` of `branch`. Zero-padded so a LIST sorts by seq.
pub fn commit_path(branch: &str, seq: u64) -> String {
    format!("_graph/branches/{branch}/commits/{seq:020}.json")
}

/// The seq of the commit of `branch` at `path`, if the path is one: exactly
/// [`commit_path`] of that seq, so an object in a folder below the commits folder (a
/// tool's copy) is never taken for a commit, found as the head or deleted as one.
pub fn seq_of_commit_path(branch: &str, path: &str) -> Option<u64> {
    let name = path.strip_prefix(&commits_dir(branch))?.strip_prefix('/')?;
    let digits = name.strip_suffix(".json")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seq = digits.parse().ok()?;
    debug_assert_eq!(commit_path(branch, seq), path);
    Some(seq)
}

/// The folder of a branch's history of reclaimed commits.
pub fn history_dir(branch: &str) -> String {
    format!("_graph/branches/{branch}/history")
}

/// The history chunk of `branch` holding the reclaimed commits `from..to`.
pub fn history_chunk_path(branch: &str, from: u64, to: u64) -> String {
    assert!(from < to, "a history chunk holds a commit");
    format!("_graph/branches/{branch}/history/{from:020}-{to:020}.jsonl.gz")
}

/// The seqs `from..to` a history chunk's path names, if it is one.
pub fn history_chunk_range(path: &str) -> Option<(u64, u64)> {
    let name = path.rsplit('/').next()?;
    let (from, to) = name.strip_suffix(".jsonl.gz")?.split_once('-')?;
    let digits = |text: &str| text.len() == 20 && text.bytes().all(|b| b.is_ascii_digit());
    if !digits(from) || !digits(to) {
        return None;
    }
    let (from, to): (u64, u64) = (from.parse().ok()?, to.parse().ok()?);
    (from < to).then_some((from, to))
}

/// The best-effort copy of the newest commit of `branch`.
pub fn head_path(branch: &str) -> String {
    format!("_graph/branches/{branch}/HEAD")
}

/// The folder of a table incarnation.
pub fn table_path(table_id: &str) -> String {
    format!("tables/{table_id}")
}

/// The name of the adjacency artifact built from `version` of an edge table, relative to
/// the table's folder: `_adjacency/<version>.ogadj`.
pub fn adjacency_object(version: u64) -> String {
    format!(
        "{}/{version}{ADJACENCY_SUFFIX}",
        omnigraph_core::adapter::ADJACENCY_FOLDER
    )
}

/// The adjacency artifact built from `version` of the edge table `table_id`.
pub fn adjacency_path(table_id: &str, version: u64) -> String {
    format!("{}/{}", table_path(table_id), adjacency_object(version))
}

/// The table version an adjacency artifact's name (relative to its table's folder)
/// says it was built from; `None` for any other name.
pub fn adjacency_version(object: &str) -> Option<u64> {
    let name = object
        .strip_prefix(omnigraph_core::adapter::ADJACENCY_FOLDER)?
        .strip_prefix('/')?
        .strip_suffix(ADJACENCY_SUFFIX)?;
    // Digits only: `+1` or `01` would parse but never be written.
    let canonical = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_digit())
        && (name == "0" || !name.starts_with('0'));
    if canonical { name.parse().ok() } else { None }
}

const ADJACENCY_SUFFIX: &str = ".ogadj";

/// Whether `hash` is a schema hash: 64 lowercase hex digits (SHA-256).
pub(crate) fn is_schema_hash(hash: &str) -> bool {
    hash.len() == 64
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks a table id read back from storage: it becomes part of a path.
pub fn check_table_id(table_id: &str) -> std::result::Result<(), String> {
    let valid = !table_id.is_empty()
        && table_id.len() <= TABLE_ID_LEN_MAX
        && table_id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "table id {table_id:?} must be 1 to {TABLE_ID_LEN_MAX} lowercase ASCII letters, digits, '-' or '_'"
        ))
    }
}

/// Whether a commit may pin `version`: a table's creation (1) or a detached version.
/// Versions on the linear lineage above the creation are foreign writes, never pinned.
pub(crate) fn is_pinnable_version(version: u64) -> bool {
    version == 1 || omnigraph_core::adapter::is_detached(version)
}

/// Checks a branch name: ASCII letters, digits, `-` and `_`, at most
/// `BRANCH_LEN_MAX` bytes.
pub fn check_branch(branch: &str) -> Result<()> {
    let valid = !branch.is_empty()
        && branch.len() <= BRANCH_LEN_MAX
        && branch
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if valid {
        Ok(())
    } else {
        Err(OmniError::bad_input(
            InputLocation::in_source("branch").field(branch),
            format!(
                "branch name {branch:?} must be 1 to {BRANCH_LEN_MAX} ASCII letters, digits, '-' or '_'"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_paths_sort_by_seq_and_parse_back() {
        assert_eq!(
            commit_path("main", 7),
            "_graph/branches/main/commits/00000000000000000007.json"
        );
        assert!(commit_path("main", 10) > commit_path("main", 9));
        assert_eq!(
            seq_of_commit_path("main", &commit_path("main", 12345)),
            Some(12345)
        );
        for not_a_commit in [
            "_graph/branches/main/commits/7.json",
            "_graph/branches/main/HEAD",
            "_graph/branches/main/commits/copy/00000000000000000007.json",
            "_graph/branches/other/commits/00000000000000000007.json",
        ] {
            assert_eq!(
                seq_of_commit_path("main", not_a_commit),
                None,
                "{not_a_commit}"
            );
        }
    }

    #[test]
    fn ids_hashes_and_versions_read_from_storage_are_checked() {
        assert!(check_table_id("t01hxyz").is_ok());
        for bad in ["", "../x", "a/b", "T1", &"t".repeat(65), "t 1"] {
            assert!(check_table_id(bad).is_err(), "{bad:?}");
        }
        assert!(is_schema_hash(&"ab".repeat(32)));
        assert!(!is_schema_hash(&"AB".repeat(32)));
        assert!(!is_schema_hash("../../etc/passwd"));
        assert!(is_pinnable_version(1));
        assert!(is_pinnable_version(1 << 63));
        assert!(!is_pinnable_version(0));
        assert!(!is_pinnable_version(2));
    }

    #[test]
    fn adjacency_names_parse_back_and_nothing_else_does() {
        let version = (1u64 << 63) + 12;
        assert_eq!(
            adjacency_path("t01", version),
            format!("tables/t01/_adjacency/{version}.ogadj")
        );
        assert_eq!(adjacency_version(&adjacency_object(version)), Some(version));
        assert_eq!(adjacency_version(&adjacency_object(1)), Some(1));
        for other in [
            "_adjacency/.ogadj",
            "_adjacency/012.ogadj",
            "_adjacency/+12.ogadj",
            "_adjacency/12.ogadj.tmp",
            "_adjacency/x/12.ogadj",
            "_indices/12.ogadj",
            "_adjacency/99999999999999999999999.ogadj",
        ] {
            assert_eq!(adjacency_version(other), None, "{other}");
        }
    }

    #[test]
    fn branch_names_are_checked() {
        assert!(check_branch("main").is_ok());
        assert!(check_branch("feature-1_x").is_ok());
        for bad in ["", "a/b", "..", "a.b", &"x".repeat(65)] {
            assert!(check_branch(bad).is_err(), "{bad:?}");
        }
    }
}
