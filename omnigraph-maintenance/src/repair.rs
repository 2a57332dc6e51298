//! The repair report (`docs/format.md` §9, `docs/maintenance.md`): read-only, per table. It finds
//!
//! - `foreign_drift`: the table's own linear Lance lineage moved above its creation,
//!   because someone wrote it with plain Lance or pylance; their rows are invisible to
//!   the graph, and nothing here adopts them;
//! - `missing_pin`: a version a retained commit pins has lost its manifest or a file
//!   it references;
//! - unpublished staging: detached versions no commit read publishes, with their bytes.
//!
//! It does not take the maintenance lane and never writes.

use crate::budget::REQUEST_FAN_OUT;
use crate::cleanup::{heads, list_table};
use futures::{StreamExt, TryStreamExt};
use omnigraph_core::adapter::{self, ManifestName};
use omnigraph_core::storage::StorageRoot;
use omnigraph_core::{ErrorKind, OmniError, Result, StorageKind};
use omnigraph_publish::layout;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// The exit status of a report that found drift or missing pins.
pub(crate) const EXIT_DRIFT: i32 = 3;

/// What repair found in one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TableRepairStatus {
    /// The table is as the graph's commits say.
    NoDrift,
    /// Linear versions above the creation: foreign writes the graph does not see.
    ForeignDrift,
    /// A pinned version's manifest or files are gone.
    MissingPin,
    /// The table's folder is, or holds, a symbolic link (listed under `symlinks`):
    /// cleanup neither lists nor deletes through it, and nothing else was checked.
    Symlinked,
}

/// One table's report.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TableRepair {
    /// The table id.
    pub table_id: String,
    /// The type a retained commit pins it for, if any.
    pub type_name: Option<String>,
    /// The worst finding.
    pub status: TableRepairStatus,
    /// Linear versions above the creation.
    pub foreign_versions: u64,
    /// Pinned versions that cannot be read, with what is missing.
    pub missing: Vec<String>,
    /// Symbolic links at or under the table's folder, as root-relative paths.
    pub symlinks: Vec<String>,
    /// Detached versions no commit publishes (staging in flight, or dead).
    pub staging_versions: u64,
    /// Their bytes: manifests and the files only they reference.
    pub staging_bytes: u64,
    /// What an operator can do.
    pub advice: String,
}

/// The whole report.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RepairReport {
    /// One row per table folder, by table id.
    pub tables: Vec<TableRepair>,
}

impl RepairReport {
    /// The row of a table.
    pub fn table(&self, table_id: &str) -> Option<&TableRepair> {
        self.tables.iter().find(|table| table.table_id == table_id)
    }

    /// 0 when every table is clean, `EXIT_DRIFT` when any drifted or lost a pin.
    pub fn exit_code(&self) -> i32 {
        if self
            .tables
            .iter()
            .all(|table| table.status == TableRepairStatus::NoDrift)
        {
            omnigraph_core::EXIT_SUCCESS
        } else {
            EXIT_DRIFT
        }
    }
}

/// Builds the report.
pub(crate) async fn report(root: &Arc<StorageRoot>) -> Result<RepairReport> {
    let branch_names = omnigraph_publish::branches::branch_names(root).await?;
    let current = heads(root, &branch_names).await?;
    // Every commit from the oldest one cleanup retains to the head is readable.
    let traced = crate::cleanup::trace_every_readable_commit(root, &current).await?;
    let mut table_ids: Vec<String> = root.list_folders("tables").await?;
    table_ids.retain(|id| layout::check_table_id(id).is_ok());
    for pinned in traced.retained.keys() {
        if !table_ids.contains(pinned) {
            table_ids.push(pinned.clone());
        }
    }
    table_ids.sort();
    let drafts: Vec<Drafted> = futures::stream::iter(table_ids)
        .map(|table_id| {
            let traced = &traced;
            async move { table_report(root, &table_id, traced).await }
        })
        .buffered(REQUEST_FAN_OUT)
        .try_collect()
        .await?;
    if !drafts.iter().any(|draft| !draft.missing.is_empty()) {
        return Ok(RepairReport {
            tables: drafts
                .into_iter()
                .map(|draft| draft.finish(|_| true))
                .collect(),
        });
    }
    // A cleanup beside this report may have reclaimed those versions since it read the
    // heads: it records that in the log before it deletes anything. Versions the heads
    // read now no longer retain are not missing.
    let branch_names = omnigraph_publish::branches::branch_names(root).await?;
    let now = heads(root, &branch_names).await?;
    let moved = now.len() != current.len()
        || now.iter().any(|(branch, head)| {
            current
                .get(branch)
                .is_none_or(|before| before.commit_id != head.commit_id)
        });
    if !moved {
        return Ok(RepairReport {
            tables: drafts
                .into_iter()
                .map(|draft| draft.finish(|_| true))
                .collect(),
        });
    }
    let retraced = crate::cleanup::trace_every_readable_commit(root, &now).await?;
    Ok(RepairReport {
        tables: drafts
            .into_iter()
            .map(|draft| {
                let retained = retraced.retained.get(&draft.row.table_id);
                let retained = |version: u64| retained.is_some_and(|kept| kept.contains(&version));
                draft.finish(retained)
            })
            .collect(),
    })
}

/// One table's row before it is final: each missing entry with the version it names.
struct Drafted {
    row: TableRepair,
    missing: Vec<(u64, String)>,
}

impl Drafted {
    /// The row, with the missing entries of the versions `retained` keeps, and the
    /// status and advice they make.
    fn finish(mut self, retained: impl Fn(u64) -> bool) -> TableRepair {
        self.missing.retain(|(version, _)| retained(*version));
        if self.row.status != TableRepairStatus::Symlinked {
            self.row.status = drift_status(self.missing.len(), self.row.foreign_versions);
            self.row.advice = advice(self.row.status, self.row.staging_versions).to_string();
        }
        self.row.missing = self.missing.into_iter().map(|(_, entry)| entry).collect();
        self.row
    }
}

/// A table's status from its missing entries and foreign versions.
fn drift_status(missing: usize, foreign_versions: u64) -> TableRepairStatus {
    if missing > 0 {
        TableRepairStatus::MissingPin
    } else if foreign_versions > 0 {
        TableRepairStatus::ForeignDrift
    } else {
        TableRepairStatus::NoDrift
    }
}

/// One table's row, drafted.
async fn table_report(
    root: &StorageRoot,
    table_id: &str,
    traced: &crate::cleanup::Traced,
) -> Result<Drafted> {
    let folder = layout::table_path(table_id);
    let symlinks = root.symlinks_under(&folder).await?;
    if !symlinks.is_empty() {
        return Ok(Drafted {
            row: TableRepair {
                table_id: table_id.to_string(),
                type_name: traced.type_names.get(table_id).cloned(),
                status: TableRepairStatus::Symlinked,
                foreign_versions: 0,
                missing: Vec::new(),
                symlinks,
                staging_versions: 0,
                staging_bytes: 0,
                advice: advice(TableRepairStatus::Symlinked, 0).to_string(),
            },
            missing: Vec::new(),
        });
    }
    let listing = list_table(root, table_id).await?;
    let sizes = listing.sizes();
    let present: HashSet<&str> = sizes.keys().copied().collect();
    let index_present = |index_folder: &str| {
        let prefix = format!("{index_folder}/");
        present.iter().any(|object| object.starts_with(&prefix))
    };
    let empty = HashSet::new();
    let retained = traced.retained.get(table_id).unwrap_or(&empty);
    let published = traced.published.get(table_id).unwrap_or(&empty);
    let manifests: BTreeMap<u64, &str> = listing
        .manifests
        .iter()
        .map(|(name, object)| (name.version(), object.object.as_str()))
        .collect();

    let mut missing: Vec<(u64, String)> = Vec::new();
    let mut marked: HashSet<String> = HashSet::new();
    let mut versions: Vec<u64> = retained.iter().copied().collect();
    versions.sort_unstable();
    for version in versions {
        if !manifests.contains_key(&version) {
            missing.push((version, format!("version {version}: its manifest is gone")));
            continue;
        }
        let dataset = match adapter::open_table_at(root, &folder, version).await {
            Ok(dataset) => dataset,
            Err(error) if is_gone(&error) => {
                missing.push((version, format!("version {version}: {error}")));
                continue;
            }
            Err(error) => return Err(error),
        };
        let references = adapter::version_references(&dataset).await?;
        for file in references.files() {
            if !present.contains(file.as_str()) {
                missing.push((version, format!("version {version}: {file} is gone")));
            }
            marked.insert(file.clone());
        }
        for index_folder in &references.index_folders {
            if !index_present(index_folder) {
                missing.push((
                    version,
                    format!("version {version}: {index_folder}/ is gone"),
                ));
            }
        }
    }

    let (mut staging_versions, mut staging_bytes) = (0u64, 0u64);
    for (name, object) in &listing.manifests {
        let ManifestName::Detached(version) = name else {
            continue;
        };
        if published.contains(version) {
            continue;
        }
        staging_versions += 1;
        staging_bytes += object.size;
        if let Ok(dataset) = adapter::open_table_at(root, &folder, *version).await {
            let references = adapter::version_references(&dataset).await?;
            for file in references.files() {
                if !marked.contains(file) {
                    staging_bytes += sizes.get(file.as_str()).copied().unwrap_or(0);
                }
            }
        }
    }

    // Status, advice and entries come with `Drafted::finish`.
    let foreign_versions = listing.foreign_versions();
    let status = drift_status(missing.len(), foreign_versions);
    Ok(Drafted {
        row: TableRepair {
            table_id: table_id.to_string(),
            type_name: traced.type_names.get(table_id).cloned(),
            status,
            foreign_versions,
            missing: Vec::new(),
            symlinks: Vec::new(),
            staging_versions,
            staging_bytes,
            advice: advice(status, staging_versions).to_string(),
        },
        missing,
    })
}

/// What an operator can do about a table in `status`.
fn advice(status: TableRepairStatus, staging_versions: u64) -> &'static str {
    match status {
        TableRepairStatus::NoDrift if staging_versions > 0 => {
            "nothing to repair; `omnigraph cleanup` reclaims dead staging after the grace period"
        }
        TableRepairStatus::NoDrift => "nothing to do",
        TableRepairStatus::ForeignDrift => {
            "rows written with plain Lance are invisible to the graph and are never adopted: \
             reload them through omnigraph (`omnigraph load`) and stop writing the table directly"
        }
        TableRepairStatus::MissingPin => {
            "a pinned version lost files: restore them from a backup of the root, or read an \
             older commit (`--at`) whose pins are intact; never run Lance's own cleanup on a table"
        }
        TableRepairStatus::Symlinked => {
            "replace each symbolic link with the folder or file it names, inside the root; \
             cleanup skips the table (and exits non-zero) until then"
        }
    }
}

fn is_gone(error: &OmniError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Storage(StorageKind::NotFound | StorageKind::Permanent) | ErrorKind::Corrupt
    )
}
