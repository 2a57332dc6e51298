//! Where the graph's own objects live under the root (DESIGN §3). Every path is built
//! here from validated parts: no type or table name ever becomes part of a path.

use omnigraph_core::{InputLocation, OmniError, Result};

/// The format object: written once, put-if-absent.
pub const FORMAT: &str = "_graph/FORMAT";
/// The largest branch name, in bytes.
pub const MAX_BRANCH_LEN: usize = 64;
/// The largest commit object a reader accepts, in bytes. A commit holds one pin per
/// type, so even [`omnigraph_core::schema::MAX_TYPES`] pins stay far below it.
pub const MAX_COMMIT_BYTES: usize = 4 << 20;
/// The branch every graph starts with.
pub const MAIN_BRANCH: &str = "main";

/// The content-addressed schema document.
pub fn schema_path(hash: &str) -> String {
    format!("_graph/schemas/{hash}.json")
}

/// The folder of a branch's commits.
pub fn commits_dir(branch: &str) -> String {
    format!("_graph/branches/{branch}/commits")
}

/// The immutable commit `seq` of `branch`. Zero-padded so a LIST sorts by seq.
pub fn commit_path(branch: &str, seq: u64) -> String {
    format!("_graph/branches/{branch}/commits/{seq:020}.json")
}

/// The seq a commit path names, if it is one.
pub fn seq_of_commit_path(path: &str) -> Option<u64> {
    let name = path.rsplit('/').next()?;
    let digits = name.strip_suffix(".json")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The best-effort copy of the newest commit of `branch`.
pub fn head_path(branch: &str) -> String {
    format!("_graph/branches/{branch}/HEAD")
}

/// The folder of a table incarnation.
pub fn table_path(table_id: &str) -> String {
    format!("tables/{table_id}")
}

/// Checks a branch name: ASCII letters, digits, `-` and `_`, at most
/// [`MAX_BRANCH_LEN`] bytes.
pub fn check_branch(branch: &str) -> Result<()> {
    let valid = !branch.is_empty()
        && branch.len() <= MAX_BRANCH_LEN
        && branch
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if valid {
        Ok(())
    } else {
        Err(OmniError::bad_input(
            InputLocation::in_source("branch").field(branch),
            format!(
                "branch name {branch:?} must be 1 to {MAX_BRANCH_LEN} ASCII letters, digits, '-' or '_'"
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
        assert_eq!(seq_of_commit_path(&commit_path("main", 12345)), Some(12345));
        assert_eq!(
            seq_of_commit_path("_graph/branches/main/commits/7.json"),
            None
        );
        assert_eq!(seq_of_commit_path("_graph/branches/main/HEAD"), None);
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
