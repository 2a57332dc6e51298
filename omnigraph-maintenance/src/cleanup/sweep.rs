//! One table's sweep plan: list its folder, decide which manifests are roots, mark
//! what the roots reference, and plan to delete the rest that is old enough.
//!
//! Roots of a table: its linear manifests (its creation, and foreign versions that
//! repair reports and nothing adopts), the versions retained commits pin, and manifests
//! younger than the grace period, which hold every staging that can still publish. A
//! detached version older than the grace period that no commit pinned is dead staging,
//! whatever its base: its writer, whose staging began before it, can no longer publish
//! it (writers never publish staging older than half the grace period recorded at the
//! head they follow, and this run's record precedes its listing). A table no retained
//! commit pins has no roots but its young manifests. An edge table's adjacency
//! artifacts are kept while a retained commit pins the version each was built from.

use super::trace::Trace;
use omnigraph_core::adapter::{self, ManifestName, SWEPT_FOLDERS, VersionReferences};
use omnigraph_core::storage::{ObjectInfo, StorageRoot};
use omnigraph_core::{ErrorKind, OmniError, Result, StorageKind};
use omnigraph_publish::layout;
use std::collections::{HashMap, HashSet};

/// One object of a table, relative to the table's folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableObject {
    pub(crate) object: String,
    pub(crate) size: u64,
    pub(crate) modified_micros: i64,
}

/// A table's folder, as listed.
#[derive(Clone, Debug, Default)]
pub(crate) struct TableListing {
    pub(crate) objects: Vec<TableObject>,
    pub(crate) manifests: Vec<(ManifestName, TableObject)>,
}

impl TableListing {
    /// Linear versions above the creation: commits someone made with plain Lance.
    pub(crate) fn foreign_versions(&self) -> u64 {
        self.manifests
            .iter()
            .filter(|(name, _)| matches!(name, ManifestName::Linear(version) if *version > 1))
            .count() as u64
    }

    /// Whether an object exists.
    pub(crate) fn sizes(&self) -> HashMap<&str, u64> {
        self.objects
            .iter()
            .map(|object| (object.object.as_str(), object.size))
            .collect()
    }
}

/// Lists a table's folder (one recursive LIST).
pub(crate) async fn list_table(root: &StorageRoot, table_id: &str) -> Result<TableListing> {
    let folder = layout::table_path(table_id);
    let prefix = format!("{folder}/");
    let listed: Vec<ObjectInfo> = root.list_with_meta(&folder).await?;
    let mut listing = TableListing::default();
    for info in listed {
        let Some(object) = info.path.strip_prefix(&prefix) else {
            continue;
        };
        let object = TableObject {
            object: object.to_string(),
            size: info.size,
            modified_micros: info.modified_micros,
        };
        if let Some(name) = adapter::manifest_name(&object.object) {
            listing.manifests.push((name, object.clone()));
        }
        listing.objects.push(object);
    }
    // Table-relative objects only, as listed under the table's folder: a sweep joins
    // them to it and deletes them.
    assert!(
        listing
            .objects
            .iter()
            .all(|object| !object.object.is_empty()
                && !object.object.starts_with('/')
                && !object.object.split('/').any(|segment| segment == ".."))
    );
    Ok(listing)
}

/// What a manifest is to the collector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Kept, and everything it references is kept.
    Root,
    /// A version only unretained commits published: removed.
    Unretained,
    /// Staging that can no longer publish: removed.
    DeadStaging,
}

/// A table's planned deletions.
#[derive(Clone, Debug, Default)]
pub(crate) struct TablePlan {
    /// Manifests to remove, first (a manifest never outlives the files it references).
    pub(crate) manifests: Vec<TableObject>,
    /// Other objects to remove.
    pub(crate) files: Vec<TableObject>,
    /// Dead staging: manifests, and the bytes only they referenced (with their own).
    pub(crate) unpublished_manifests: u64,
    pub(crate) unpublished_bytes: u64,
    /// Linear versions above the creation.
    pub(crate) foreign_versions: u64,
}

/// Asserts, just before `object` of `table_id` is deleted, what makes that safe under
/// the run's latest trace (`trace`, every root the run knows, after its record and its
/// last read of the heads) and grace cutoff: the object is older than the grace period
/// (no staging that can still publish is), and in a table a retained commit pins it is
/// neither a linear manifest, nor the manifest of a version a retained commit pins, nor
/// the adjacency artifact built from one. The path itself is checked where it is
/// deleted (`adapter::delete_table_object`: a plain path in a swept folder).
pub(crate) fn assert_deletable(
    trace: &Trace,
    grace_cutoff_micros: i64,
    table_id: &str,
    object: &TableObject,
) {
    assert!(
        object.modified_micros < grace_cutoff_micros,
        "cleanup would delete {table_id}/{}, younger than the grace period",
        object.object
    );
    if !trace.is_retained_table(table_id) {
        return;
    }
    let version = match adapter::manifest_name(&object.object) {
        Some(ManifestName::Detached(version)) => Some(version),
        Some(ManifestName::Linear(version)) => {
            panic!("cleanup would delete linear manifest {version} of {table_id}, a pinned table")
        }
        None => layout::adjacency_version(&object.object),
    };
    if let Some(version) = version {
        let retained = trace
            .retained
            .get(table_id)
            .is_some_and(|versions| versions.contains(&version));
        assert!(
            !retained,
            "cleanup would delete {table_id}/{}, of version {version}, which a retained commit pins",
            object.object
        );
    }
}

/// Plans the sweep of one table.
pub(crate) async fn plan_table(
    root: &StorageRoot,
    table_id: &str,
    trace: &Trace,
    grace_cutoff_micros: i64,
) -> Result<TablePlan> {
    let listing = list_table(root, table_id).await?;
    let folder = layout::table_path(table_id);
    let pinned = trace.is_retained_table(table_id);
    let empty = HashSet::new();
    let retained = trace.retained.get(table_id).unwrap_or(&empty);
    let published = trace.published.get(table_id).unwrap_or(&empty);

    let mut marked = Marks::default();
    let mut removed: Vec<(Role, TableObject, Option<VersionReferences>)> = Vec::new();
    for (name, object) in &listing.manifests {
        let young = object.modified_micros >= grace_cutoff_micros;
        let role = match name {
            _ if young => Role::Root,
            _ if !pinned => Role::Unretained,
            ManifestName::Linear(_) => Role::Root,
            ManifestName::Detached(version) if retained.contains(version) => Role::Root,
            ManifestName::Detached(version) if published.contains(version) => Role::Unretained,
            ManifestName::Detached(version) => {
                match open(root, &folder, *version).await? {
                    // Gone since the listing (a concurrent collector): nothing to keep.
                    None => continue,
                    Some(dataset) => {
                        // Read only to count the bytes only dead staging held.
                        let references = adapter::version_references(&dataset).await?;
                        removed.push((Role::DeadStaging, object.clone(), Some(references)));
                        continue;
                    }
                }
            }
        };
        match role {
            Role::Root => {
                // A root that vanished since the listing leaves its files unmarked:
                // the table is not swept this run.
                let dataset = open(root, &folder, name.version()).await?.ok_or_else(|| {
                    OmniError::storage(
                        StorageKind::NotFound,
                        format!("open {folder} at version {}", name.version()),
                        "a root manifest disappeared while cleanup planned".into(),
                    )
                })?;
                marked.add(&adapter::version_references(&dataset).await?);
            }
            Role::Unretained | Role::DeadStaging => removed.push((role, object.clone(), None)),
        }
    }

    let mut plan = TablePlan {
        foreign_versions: listing.foreign_versions(),
        ..TablePlan::default()
    };
    let removed_manifests: HashSet<&str> = removed
        .iter()
        .map(|(_, object, _)| object.object.as_str())
        .collect();
    for object in &listing.objects {
        let swept = SWEPT_FOLDERS
            .iter()
            .any(|folder| object.object.starts_with(&format!("{folder}/")));
        if !swept || removed_manifests.contains(object.object.as_str()) {
            continue;
        }
        let old = object.modified_micros < grace_cutoff_micros;
        if let Some(version) = layout::adjacency_version(&object.object) {
            // An adjacency artifact lives while a retained commit pins the version it
            // was built from; nothing references it.
            if old && !(pinned && retained.contains(&version)) {
                plan.files.push(object.clone());
            }
            continue;
        }
        let manifest = adapter::manifest_name(&object.object).is_some();
        // A pinned table's `_versions/` holds its manifests and Lance's version hint:
        // only manifests are removed there, and only as planned above. A table no
        // retained commit pins loses everything old.
        let kept_hint = pinned && object.object.starts_with("_versions/");
        if old && !manifest && !kept_hint && !marked.holds(&object.object) {
            plan.files.push(object.clone());
        }
    }
    let sizes = listing.sizes();
    let planned_files: HashSet<&str> = plan.files.iter().map(|o| o.object.as_str()).collect();
    // Each file only dead staging referenced counts once, however many links did.
    let mut staging_files: HashSet<&str> = HashSet::new();
    for (role, object, references) in &removed {
        if *role == Role::DeadStaging {
            plan.unpublished_manifests += 1;
            plan.unpublished_bytes += object.size;
            for file in references.iter().flat_map(VersionReferences::files) {
                if planned_files.contains(file.as_str()) && staging_files.insert(file.as_str()) {
                    plan.unpublished_bytes += sizes.get(file.as_str()).copied().unwrap_or(0);
                }
            }
        }
    }
    plan.manifests
        .extend(removed.into_iter().map(|(_, object, _)| object));
    Ok(plan)
}

/// Opens a version; `None` when its manifest is gone.
async fn open(
    root: &StorageRoot,
    folder: &str,
    version: u64,
) -> Result<Option<std::sync::Arc<omnigraph_core::lance::Dataset>>> {
    match adapter::open_table_at(root, folder, version).await {
        Ok(dataset) => Ok(Some(dataset)),
        Err(error) if error.kind() == ErrorKind::Storage(StorageKind::NotFound) => Ok(None),
        Err(error) => Err(error),
    }
}

/// The objects root manifests reference.
#[derive(Debug, Default)]
struct Marks {
    files: HashSet<String>,
    index_folders: HashSet<String>,
}

impl Marks {
    fn add(&mut self, references: &VersionReferences) {
        self.files.extend(references.files().cloned());
        self.index_folders
            .extend(references.index_folders.iter().cloned());
    }

    fn holds(&self, object: &str) -> bool {
        if self.files.contains(object) {
            return true;
        }
        let mut parts = object.splitn(3, '/');
        match (parts.next(), parts.next(), parts.next()) {
            // `_indices/<uuid>/<file>`: kept when its index folder is.
            (Some("_indices"), Some(uuid), _) => {
                self.index_folders.contains(&format!("_indices/{uuid}"))
            }
            // `data/<stem>/<file>` (a data file's sidecars, such as Lance's blob
            // files): kept when the data file `data/<stem>.lance` is.
            (Some("data"), Some(stem), Some(_)) => {
                self.files.contains(&format!("data/{stem}.lance"))
            }
            _ => false,
        }
    }
}
