//! The graphs a server serves: each opened once, with one warm handle per branch shared
//! by every request on it. A handle follows its branch's head (writers start from the
//! newest head they have seen and the publication's CAS catches a stale one), so other
//! servers and CLI processes may write the same root at the same time.

use crate::config::GraphSource;
use crate::limits::BRANCH_HANDLES_KEPT_MAX;
use omnigraph_core::Result;
use omnigraph_core::storage::{StorageOptions, StorageRoot};
use omnigraph_graph::Omnigraph;
use omnigraph_publish::MAIN_BRANCH;
use std::collections::HashMap;
use std::sync::Arc;

/// One served graph.
pub(crate) struct ServedGraph {
    root: Arc<StorageRoot>,
    main: Arc<Omnigraph>,
    /// Warm handles of the other branches, at most [`BRANCH_HANDLES_KEPT_MAX`].
    branches: tokio::sync::Mutex<HashMap<String, Arc<Omnigraph>>>,
}

impl ServedGraph {
    /// Opens the graph at `source`; fails when there is none.
    pub(crate) async fn open(
        source: &GraphSource,
        options: &StorageOptions,
    ) -> Result<ServedGraph> {
        let root = match source {
            GraphSource::Uri(uri) => StorageRoot::open_with(uri, options).await?,
            GraphSource::Root(root) => root.clone(),
        };
        let main = Omnigraph::open_root(root.clone()).await?;
        // A root without a graph fails here, not at the first request.
        main.head().await?;
        Ok(ServedGraph {
            root,
            main: Arc::new(main),
            branches: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    /// The handle on `main`.
    pub(crate) fn main(&self) -> Arc<Omnigraph> {
        self.main.clone()
    }

    /// The handle on `branch` (`main` when `None`); the branch name is checked, and a
    /// branch that does not exist is `NotFound`. Kept warm while there is room.
    pub(crate) async fn handle(&self, branch: Option<&str>) -> Result<Arc<Omnigraph>> {
        let branch = branch.unwrap_or(MAIN_BRANCH);
        if branch == MAIN_BRANCH {
            return Ok(self.main.clone());
        }
        omnigraph_publish::check_branch(branch)?;
        if let Some(handle) = self.branches.lock().await.get(branch) {
            return Ok(handle.clone());
        }
        let handle = Arc::new(
            Omnigraph::open_root(self.root.clone())
                .await?
                .with_branch(branch)?,
        );
        // Only a branch that exists takes a place among the warm handles.
        handle.head().await?;
        let mut branches = self.branches.lock().await;
        if branches.len() < BRANCH_HANDLES_KEPT_MAX {
            branches.insert(branch.to_owned(), handle.clone());
        }
        Ok(handle)
    }

    /// Forgets the warm handle of a deleted branch.
    pub(crate) async fn forget(&self, branch: &str) {
        self.branches.lock().await.remove(branch);
    }
}
