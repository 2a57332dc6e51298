//! Symbolic links under a local root. object_store's local store follows them: a LIST
//! walks into a linked folder and a DELETE through one removes the file it names,
//! wherever that is. A graph unpacked from an archive, or crafted, may hold such links,
//! and cleanup must never list or delete outside its root. So nothing under a local root
//! is followed out of it: the root refuses to list or delete through a link, and repair
//! reports each link it finds.
//!
//! The checks read the folder without following links (`symlink_metadata`, and a
//! directory entry's own type). A link made between the check and the request is not
//! seen; closing that window would need the store to open each path component itself.

use crate::limits::{LINKS_REPORTED_MAX, WALK_FOLDERS_MAX};
use std::path::{Path, PathBuf};

/// The symbolic links among the components of `relative` under `root` (the root itself
/// is the operator's choice and may be a link), as root-relative paths: the first one
/// found, since nothing past it is under the root.
pub(crate) fn links_on_the_way(root: &Path, relative: &str) -> std::io::Result<Vec<String>> {
    let mut path = root.to_path_buf();
    let mut walked = Vec::new();
    for part in relative.split('/').filter(|part| !part.is_empty()) {
        path.push(part);
        walked.push(part);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => return Ok(vec![walked.join("/")]),
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(error),
        }
    }
    Ok(Vec::new())
}

/// The symbolic links on the way to `relative` under `root` and anywhere below it, as
/// root-relative paths (at most [`LINKS_REPORTED_MAX`]). Never enters a link; a tree of
/// more than [`WALK_FOLDERS_MAX`] folders is an error, as its links are not known.
pub(crate) fn links_at_or_under(root: &Path, relative: &str) -> std::io::Result<Vec<String>> {
    links_within(root, relative, WALK_FOLDERS_MAX)
}

fn links_within(root: &Path, relative: &str, folders_max: usize) -> std::io::Result<Vec<String>> {
    let on_the_way = links_on_the_way(root, relative)?;
    if !on_the_way.is_empty() {
        return Ok(on_the_way);
    }
    let relative = relative.trim_matches('/');
    let mut links = Vec::new();
    let mut folders: Vec<(PathBuf, String)> = vec![(root.join(relative), relative.to_string())];
    let mut read = 0usize;
    while let Some((folder, name)) = folders.pop() {
        if links.len() >= LINKS_REPORTED_MAX {
            break;
        }
        if read >= folders_max {
            return Err(std::io::Error::other(format!(
                "{relative} holds more than {folders_max} folders: not walked to its end, \
                 so whether it holds a symbolic link is not known"
            )));
        }
        read += 1;
        let entries = match std::fs::read_dir(&folder) {
            Ok(entries) => entries,
            // A plain file, or gone since: nothing under it.
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                continue;
            }
            Err(error) => return Err(error),
        };
        for entry in entries {
            let entry = entry?;
            // The entry's own type: a link is never followed.
            let kind = entry.file_type()?;
            let child = join(&name, &entry.file_name().to_string_lossy());
            if kind.is_symlink() {
                links.push(child);
            } else if kind.is_dir() {
                folders.push((entry.path(), child));
            }
        }
    }
    links.sort();
    links.truncate(LINKS_REPORTED_MAX);
    Ok(links)
}

fn join(folder: &str, name: &str) -> String {
    if folder.is_empty() {
        name.to_string()
    } else {
        format!("{folder}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_found_on_the_way_and_below_and_never_entered() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(outside.path().join("deep")).unwrap();
        std::fs::write(outside.path().join("deep/file"), b"x").unwrap();
        std::fs::create_dir_all(root.path().join("tables/a/data")).unwrap();
        std::fs::write(root.path().join("tables/a/data/f.lance"), b"x").unwrap();
        assert!(links_at_or_under(root.path(), "tables").unwrap().is_empty());
        std::os::unix::fs::symlink(outside.path(), root.path().join("tables/b")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("tables/a/data/l")).unwrap();
        assert_eq!(
            links_at_or_under(root.path(), "tables").unwrap(),
            ["tables/a/data/l", "tables/b"]
        );
        assert_eq!(
            links_on_the_way(root.path(), "tables/b/deep/file").unwrap(),
            ["tables/b"]
        );
        assert!(
            links_on_the_way(root.path(), "tables/a/data/f.lance")
                .unwrap()
                .is_empty()
        );
        assert!(
            links_on_the_way(root.path(), "tables/none/x")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_tree_past_the_folder_bound_is_refused_not_passed() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("tables/a/data")).unwrap();
        std::fs::create_dir_all(root.path().join("tables/b/data")).unwrap();
        // tables, tables/a, tables/a/data, tables/b, tables/b/data: five folders.
        assert!(links_within(root.path(), "tables", 5).unwrap().is_empty());
        let error = links_within(root.path(), "tables", 4).unwrap_err();
        assert!(error.to_string().contains("more than 4 folders"), "{error}");
    }
}
