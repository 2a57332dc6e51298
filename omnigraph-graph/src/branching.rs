//! Branches on the handle: create one from this handle's branch, delete one, list
//! them (the protocol is [`crate::branches`]).

use crate::branches::{self, BranchInfo};
use crate::commit::GraphCommit;
use crate::graph::CommitRef;
use crate::omnigraph::Omnigraph;
use omnigraph_core::Result;

impl Omnigraph {
    /// Creates branch `name` from the commit `at` names on this handle's branch (its
    /// head, a seq or a commit id). No table data is copied: the new branch's first
    /// commit pins what that commit pins. `BranchExists` when `name` is live.
    pub async fn create_branch(&self, name: &str, at: &CommitRef) -> Result<GraphCommit> {
        branches::create_branch(self.graph(), name, self.branch(), at, self.actor()).await
    }

    /// Deletes branch `name` (never `main`). Writers on it fail with `NotFound` from
    /// then on, and cleanup reclaims the files only it kept.
    pub async fn delete_branch(&self, name: &str) -> Result<GraphCommit> {
        branches::delete_branch(self.graph(), name, self.actor()).await
    }

    /// The live branches, by name: each one's head, fork point and age.
    pub async fn list_branches(&self) -> Result<Vec<BranchInfo>> {
        branches::list_branches(self.graph()).await
    }
}
