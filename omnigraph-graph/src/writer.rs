//! The handle as a [`BranchWriter`]: maintenance publishes through it, so a run warms
//! the handle that asked for it (its head, the tables it staged, and the artifacts it
//! wrote) as the handle's own writes do.

use crate::commit::{CommitOperation, GraphCommit};
use crate::graph::Graph;
use crate::omnigraph::Omnigraph;
use crate::publication::ReadSet;
use crate::staging::Staging;
use omnigraph_core::Result;
use omnigraph_core::lance::Dataset;
use omnigraph_core::schema::Catalog;
use omnigraph_publish::{BranchWriter, CommitAttempts};
use std::sync::Arc;

#[async_trait::async_trait]
impl BranchWriter for Omnigraph {
    fn graph(&self) -> &Graph {
        Omnigraph::graph(self)
    }

    fn branch(&self) -> &str {
        Omnigraph::branch(self)
    }

    fn actor(&self) -> &str {
        Omnigraph::actor(self)
    }

    async fn head(&self) -> Result<GraphCommit> {
        Omnigraph::head(self).await
    }

    async fn newest_known_head(&self) -> Result<GraphCommit> {
        self.base().await
    }

    async fn catalog_at(&self, commit: &GraphCommit) -> Result<Arc<Catalog>> {
        Omnigraph::catalog_at(self, commit).await
    }

    async fn table_at(&self, commit: &GraphCommit, table_id: &str) -> Result<Arc<Dataset>> {
        Omnigraph::table_at(self, commit, table_id).await
    }

    async fn publish_staged_within(
        &self,
        staging: &Staging,
        read_set: ReadSet,
        operation: CommitOperation,
        attempts: &CommitAttempts,
    ) -> Result<GraphCommit> {
        self.publish_staged_holding(staging, read_set, operation, None, attempts)
            .await
    }

    fn artifact_written(&self, table_id: &str, version: u64) {
        self.adjacency_cache()
            .state
            .lock()
            .forget(table_id, version);
    }
}
