//! The adjacency artifacts a handle reads: a traversal step uses one only when it was
//! built from the very version the commit it reads pins, and otherwise reads the edge
//! table, with the same result (`omnigraph_publish::adjacency` has the format;
//! `omnigraph_maintenance` builds it). A handle holds the artifacts it read, and
//! remembers for a while the versions it found none usable for.

use crate::commit::{GraphCommit, TableKind};
use crate::graph::CommitRef;
use crate::layout;
use crate::limits::{ADJACENCY_CACHED_BYTES_MAX, ADJACENCY_CACHED_MAX, ADJACENCY_MISSES_MAX};
use crate::omnigraph::Omnigraph;
use omnigraph_core::Result;
use omnigraph_publish::adjacency::Adjacency;
use omnigraph_publish::limits::ADJACENCY_BYTES_MAX;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a handle trusts that a version has no usable artifact (none, or one that
/// failed its checks) before it looks again: an optimize may build or replace it.
pub(crate) const ADJACENCY_MISS_RECHECK: Duration = Duration::from_secs(5);

/// An edge type's artifacts, as `status` reports them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AdjacencyStatus {
    /// The edge type.
    pub edge_type: String,
    /// Its table.
    pub table_id: String,
    /// The version the commit pins.
    pub version: u64,
    /// Whether an artifact built from that version exists: traversals at the commit
    /// use it. Writes to the edge type since the last optimize make it stale.
    pub current: bool,
    /// Artifacts in the table's folder (older ones wait for cleanup).
    pub artifacts: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// The artifacts a handle holds, and the versions it found none usable for (and why).
/// Loads are one at a time, so two traversals never read one artifact twice.
#[derive(Debug, Default)]
pub(crate) struct AdjacencyCache {
    pub(crate) state: parking_lot::Mutex<CacheState>,
    loading: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
pub(crate) struct CacheState {
    /// Newest use last.
    held: Vec<Arc<Adjacency>>,
    missed: Vec<Missed>,
}

#[derive(Debug)]
struct Missed {
    table_id: String,
    version: u64,
    at: Instant,
    why: String,
}

impl CacheState {
    /// The held artifact of `(table_id, version)`, or why there is none to use when the
    /// handle looked lately.
    fn find(
        &mut self,
        table_id: &str,
        version: u64,
    ) -> Option<std::result::Result<Arc<Adjacency>, String>> {
        if let Some(index) = self
            .held
            .iter()
            .position(|held| held.table_id() == table_id && held.version() == version)
        {
            let held = self.held.remove(index);
            self.held.push(held.clone());
            return Some(Ok(held));
        }
        self.missed
            .retain(|missed| missed.at.elapsed() < ADJACENCY_MISS_RECHECK);
        self.missed
            .iter()
            .find(|missed| missed.table_id == table_id && missed.version == version)
            .map(|missed| Err(missed.why.clone()))
    }

    fn hold(&mut self, adjacency: Arc<Adjacency>) {
        self.held
            .retain(|held| held.table_id() != adjacency.table_id());
        self.held.push(adjacency);
        while self.held.len() > ADJACENCY_CACHED_MAX
            || self
                .held
                .iter()
                .map(|held| held.memory_bytes())
                .sum::<u64>()
                > ADJACENCY_CACHED_BYTES_MAX
        {
            self.held.remove(0);
        }
    }

    fn miss(&mut self, table_id: &str, version: u64, why: String) {
        if self.missed.len() >= ADJACENCY_MISSES_MAX {
            self.missed.remove(0);
        }
        self.missed.push(Missed {
            table_id: table_id.to_string(),
            version,
            at: Instant::now(),
            why,
        });
    }

    pub(crate) fn forget(&mut self, table_id: &str, version: u64) {
        self.missed
            .retain(|missed| missed.table_id != table_id || missed.version != version);
    }
}

impl Omnigraph {
    /// Each edge type's artifacts at `at`: whether the version it pins has one (one
    /// LIST per edge type).
    pub async fn adjacency_status(&self, at: &CommitRef) -> Result<Vec<AdjacencyStatus>> {
        let commit = self.graph().commit(self.branch(), at).await?;
        let mut status = Vec::new();
        for pin in commit.pins.iter().filter(|pin| pin.kind == TableKind::Edge) {
            // The table id is checked when a commit is read; its stored path is not used.
            let folder = format!(
                "{}/{}",
                layout::table_path(&pin.table_id),
                omnigraph_core::adapter::ADJACENCY_FOLDER
            );
            let listed = self.graph().root().list_with_meta(&folder).await?;
            let current_path = layout::adjacency_path(&pin.table_id, pin.version);
            status.push(AdjacencyStatus {
                edge_type: pin.type_name.clone(),
                table_id: pin.table_id.clone(),
                version: pin.version,
                current: listed.iter().any(|object| object.path == current_path),
                artifacts: listed.len(),
                bytes: listed.iter().map(|object| object.size).sum(),
            });
        }
        Ok(status)
    }

    /// The artifact a read at `commit` may use for `edge_type`, or why it reads the edge
    /// table instead: adjacency reads are off on this handle, or there is no current
    /// artifact. Outside the supported API (it hands out the artifact): the query
    /// crate expands its hops through it.
    #[cfg(feature = "internal-api")]
    pub async fn pinned_adjacency(
        &self,
        commit: &GraphCommit,
        edge_type: &str,
    ) -> std::result::Result<Arc<Adjacency>, String> {
        if !self.reads_adjacency() {
            return Err("adjacency reads are off on this handle".into());
        }
        self.adjacency_at(commit, edge_type).await
    }

    /// The artifact of `edge_type` built from the version `commit` pins, or why there
    /// is none to use: none was built, or the one found failed its checks (it is then
    /// passed by, never trusted).
    pub(crate) async fn adjacency_at(
        &self,
        commit: &GraphCommit,
        edge_type: &str,
    ) -> std::result::Result<Arc<Adjacency>, String> {
        let pin = commit
            .require_pin_of_type(edge_type)
            .map_err(|error| error.to_string())?;
        let (table_id, version) = (pin.table_id.as_str(), pin.version);
        let cache = self.adjacency_cache();
        if let Some(found) = cache.state.lock().find(table_id, version) {
            return found;
        }
        let _loading = cache.loading.lock().await;
        // Another traversal may have loaded it while this one waited.
        if let Some(found) = cache.state.lock().find(table_id, version) {
            return found;
        }
        let path = layout::adjacency_path(table_id, version);
        let read = self
            .graph()
            .root()
            .get_capped(&path, ADJACENCY_BYTES_MAX as usize)
            .await;
        let loaded = match read {
            Ok(Some(bytes)) => Adjacency::decode(&bytes, pin)
                .map(Arc::new)
                .map_err(|why| format!("{path}: {why}")),
            Ok(None) => Err(format!("no artifact of version {version}")),
            Err(error) => Err(format!("{path}: {error}")),
        };
        let mut state = cache.state.lock();
        match &loaded {
            Ok(adjacency) => state.hold(adjacency.clone()),
            Err(why) => state.miss(table_id, version, why.clone()),
        }
        loaded
    }
}
