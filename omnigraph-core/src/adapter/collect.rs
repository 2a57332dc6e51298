//! What a table version references, and deleting a table's objects by listing: the
//! collector's only ways into a table's files. Lance's own version cleanup is never
//! called (it sees only linear manifests and would delete detached versions' files).

use super::read_error;
use crate::error::{OmniError, Result};
use crate::storage::StorageRoot;
use lance::Dataset;
use lance_table::io::deletion::relative_deletion_file_path;
use lance_table::io::manifest::read_manifest_indexes;

/// The folder of an edge table that holds its adjacency artifacts, one immutable
/// object per table version they were built from (`docs/format.md` §6.4). Not Lance's:
/// Lance never lists it.
pub const ADJACENCY_FOLDER: &str = "_adjacency";

/// The folders of a table the collector sweeps. Anything else in a table's folder is
/// never deleted by listing.
pub const SWEPT_FOLDERS: [&str; 6] = [
    "data",
    "_versions",
    "_deletions",
    "_indices",
    "_transactions",
    ADJACENCY_FOLDER,
];

/// A manifest object's version, from its name under `_versions/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ManifestName {
    /// A version on the table's linear lineage.
    Linear(u64),
    /// A detached version (≥ 2^63).
    Detached(u64),
}

impl ManifestName {
    /// The version the manifest holds.
    pub fn version(&self) -> u64 {
        match self {
            ManifestName::Linear(version) | ManifestName::Detached(version) => *version,
        }
    }
}

/// The manifest a table-relative object path names, if it is one: `_versions/d<v>.manifest`
/// (detached), `_versions/<20 digits>.manifest` (linear, V2 naming: `u64::MAX - v`) or
/// `_versions/<v>.manifest` (linear, V1 naming).
pub fn manifest_name(object: &str) -> Option<ManifestName> {
    let name = object
        .strip_prefix("_versions/")?
        .strip_suffix(".manifest")?;
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if let Some(detached) = name.strip_prefix('d') {
        let version: u64 = detached.parse().ok().filter(|_| digits(detached))?;
        return super::is_detached(version).then_some(ManifestName::Detached(version));
    }
    if !digits(name) {
        return None;
    }
    let number: u64 = name.parse().ok()?;
    let version = if name.len() == 20 {
        u64::MAX - number
    } else {
        number
    };
    (!super::is_detached(version)).then_some(ManifestName::Linear(version))
}

/// The table-relative object of a detached version's manifest.
pub fn detached_manifest_object(version: u64) -> String {
    assert!(
        super::is_detached(version),
        "version {version} is not detached"
    );
    format!("_versions/d{version}.manifest")
}

/// The objects one table version references, as table-relative paths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionReferences {
    /// Data files under `data/`.
    pub data_files: Vec<String>,
    /// Deletion files under `_deletions/`.
    pub deletion_files: Vec<String>,
    /// Index folders under `_indices/` (every object below one is referenced).
    pub index_folders: Vec<String>,
    /// The transaction file under `_transactions/`.
    pub transaction_file: Option<String>,
}

impl VersionReferences {
    /// Every referenced file (data, deletion and transaction files); index folders are
    /// apart, since every object below one is referenced.
    pub fn files(&self) -> impl Iterator<Item = &String> + '_ {
        self.data_files
            .iter()
            .chain(&self.deletion_files)
            .chain(&self.transaction_file)
    }
}

/// What `dataset`'s manifest references (its fragments' data and deletion files, its
/// indexes and its transaction). Files of another base path are not under the table's
/// folder, so they are not listed.
pub async fn version_references(dataset: &Dataset) -> Result<VersionReferences> {
    let manifest = dataset.manifest();
    let mut references = VersionReferences::default();
    for fragment in manifest.fragments.iter() {
        for file in fragment.referenced_lance_files() {
            if file.base_id.is_none() {
                references.data_files.push(format!("data/{}", file.path));
            }
        }
        if let Some(deletion) = &fragment.deletion_file
            && deletion.base_id.is_none()
        {
            references
                .deletion_files
                .push(relative_deletion_file_path(fragment.id, deletion));
        }
    }
    // The manifest's own index section, as Lance's cleanup reads it: `load_indices`
    // hides indexes a fragment-reuse index supersedes, and their files are still
    // referenced.
    let store = dataset
        .object_store(None)
        .await
        .map_err(|error| read_error("the store of a version", error))?;
    let indexes = read_manifest_indexes(&store, dataset.manifest_location(), manifest)
        .await
        .map_err(|error| read_error("read the index section of a version", error))?;
    references.index_folders = indexes
        .iter()
        .map(|index| format!("_indices/{}", index.uuid))
        .collect();
    references.transaction_file = manifest
        .transaction_file
        .as_ref()
        .map(|file| format!("_transactions/{file}"));
    Ok(references)
}

/// Deletes one object of the table at `table` (e.g. `tables/<id>`). The object must be
/// a plain path inside one of the [`SWEPT_FOLDERS`]; deleting a missing object is not
/// an error (a concurrent collector may have removed it).
pub async fn delete_table_object(root: &StorageRoot, table: &str, object: &str) -> Result<()> {
    let inside_swept = SWEPT_FOLDERS
        .iter()
        .any(|folder| object.starts_with(&format!("{folder}/")));
    let plain = object
        .split('/')
        .all(|part| !part.is_empty() && part != "." && part != "..");
    if !inside_swept || !plain {
        return Err(OmniError::internal(format!(
            "refusing to delete {object:?} of {table}: not a plain path in a swept folder"
        )));
    }
    root.delete(&format!("{}/{object}", table.trim_end_matches('/')))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_names_parse_back_to_their_versions() {
        let detached = (1u64 << 63) | 12345;
        assert_eq!(
            manifest_name(&detached_manifest_object(detached)),
            Some(ManifestName::Detached(detached))
        );
        let v2 = format!("_versions/{:020}.manifest", u64::MAX - 1);
        assert_eq!(manifest_name(&v2), Some(ManifestName::Linear(1)));
        assert_eq!(
            manifest_name("_versions/7.manifest"),
            Some(ManifestName::Linear(7))
        );
        for other in [
            "_versions/latest_version_hint.json",
            "_versions/d12.manifest",
            "_versions/dx.manifest",
            "data/d1.manifest",
            "_versions/.manifest",
        ] {
            assert_eq!(manifest_name(other), None, "{other}");
        }
    }
}
