//! The `--json` view of engine types that are also storage formats. The commit object is
//! stored (`docs/format.md`); the CLI's output has its own shape, pinned by the JSON
//! shape golden (`tests/golden/json_shapes.txt`), so neither changes the other silently.

use omnigraph_publish::{GraphCommit, TableKind, TablePin};
use serde::Serialize;

/// A commit as the CLI prints it.
#[derive(Serialize)]
pub(crate) struct CommitView<'a> {
    seq: u64,
    commit_id: &'a str,
    parent_commit_id: Option<&'a str>,
    branch: &'a str,
    created_at: i64,
    actor: &'a str,
    operation: OperationView<'a>,
    schema: &'a str,
    pins: Vec<PinView<'a>>,
}

#[derive(Serialize)]
struct OperationView<'a> {
    kind: &'a str,
    summary: &'a str,
}

#[derive(Serialize)]
struct PinView<'a> {
    table_id: &'a str,
    type_name: &'a str,
    kind: &'static str,
    path: &'a str,
    version: u64,
    row_count: u64,
}

impl<'a> CommitView<'a> {
    pub(crate) fn of(commit: &'a GraphCommit) -> CommitView<'a> {
        CommitView {
            seq: commit.seq,
            commit_id: &commit.commit_id,
            parent_commit_id: commit.parent_commit_id.as_deref(),
            branch: &commit.branch,
            created_at: commit.created_at,
            actor: &commit.actor,
            operation: OperationView {
                kind: &commit.operation.kind,
                summary: &commit.operation.summary,
            },
            schema: &commit.schema,
            pins: commit.pins.iter().map(PinView::of).collect(),
        }
    }
}

impl<'a> PinView<'a> {
    fn of(pin: &'a TablePin) -> PinView<'a> {
        PinView {
            table_id: &pin.table_id,
            type_name: &pin.type_name,
            kind: match pin.kind {
                TableKind::Node => "node",
                TableKind::Edge => "edge",
            },
            path: &pin.path,
            version: pin.version,
            row_count: pin.row_count,
        }
    }
}
