//! The graph commit (DESIGN §4): one immutable JSON object per publication. A snapshot
//! is one commit; reading it is one GET.

use omnigraph_core::{OmniError, Result};

/// Whether a pinned table holds a node type or an edge type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableKind {
    /// A node type's table.
    Node,
    /// An edge type's table.
    Edge,
}

/// The exact version of one table that a commit makes visible.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TablePin {
    /// The minted table id (never derived from the type name).
    pub table_id: String,
    /// The type the table holds.
    pub type_name: String,
    /// Node or edge.
    pub kind: TableKind,
    /// The table's folder under the root (`tables/<table_id>`).
    pub path: String,
    /// The Lance version readers open: 1 (the creation) or a detached version.
    pub version: u64,
    /// Rows visible at that version.
    pub row_count: u64,
}

/// What a commit did, for logs and humans.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommitOperation {
    /// The writer: `init`, `insert`, `load`, `update`, `delete`, `schema_apply`,
    /// `optimize`, `build_indexes`, ….
    pub kind: String,
    /// A short summary (`3 rows into Person`).
    pub summary: String,
}

/// One graph commit.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GraphCommit {
    /// Position in the branch's log: genesis is 0, each publication adds 1.
    pub seq: u64,
    /// A unique id (from the id seam).
    pub commit_id: String,
    /// The commit this one was published on; `None` for genesis.
    pub parent_commit_id: Option<String>,
    /// The branch.
    pub branch: String,
    /// Microseconds since the epoch (from the clock seam).
    pub created_at: i64,
    /// Who published it.
    pub actor: String,
    /// What it did.
    pub operation: CommitOperation,
    /// The hash of the schema document in force.
    pub schema: String,
    /// Every table's pin, in schema order.
    pub pins: Vec<TablePin>,
}

impl GraphCommit {
    /// The pin of a table by id.
    pub fn pin(&self, table_id: &str) -> Option<&TablePin> {
        self.pins.iter().find(|pin| pin.table_id == table_id)
    }

    /// The pin of the table holding `type_name`.
    pub fn pin_of_type(&self, type_name: &str) -> Option<&TablePin> {
        self.pins.iter().find(|pin| pin.type_name == type_name)
    }

    /// The pin of a table by id, or a typed `NotFound` naming this commit.
    pub fn require_pin(&self, table_id: &str) -> Result<&TablePin> {
        self.pin(table_id)
            .ok_or_else(|| OmniError::not_found(format!("table {table_id} in commit {}", self.seq)))
    }

    /// The pin of the table holding `type_name`, or a typed `NotFound`.
    pub fn require_pin_of_type(&self, type_name: &str) -> Result<&TablePin> {
        self.pin_of_type(type_name)
            .ok_or_else(|| OmniError::not_found(format!("type {type_name} in commit {}", self.seq)))
    }

    /// The stored bytes.
    pub fn to_bytes(&self) -> Result<bytes::Bytes> {
        serde_json::to_vec(self)
            .map(bytes::Bytes::from)
            .map_err(|error| OmniError::internal(format!("encode commit {}: {error}", self.seq)))
    }

    /// Parses a stored commit, checking that it is the object its path says it is.
    pub fn parse(object: &str, bytes: &[u8], branch: &str, seq: u64) -> Result<GraphCommit> {
        let commit: GraphCommit = serde_json::from_slice(bytes).map_err(|error| {
            OmniError::corrupt(
                object,
                format!("not a graph commit ({} bytes): {error}", bytes.len()),
            )
        })?;
        if commit.seq != seq || commit.branch != branch {
            return Err(OmniError::corrupt(
                object,
                format!(
                    "holds commit seq {} of branch {:?}, not seq {seq} of {branch:?}",
                    commit.seq, commit.branch
                ),
            ));
        }
        if seq == 0 && commit.parent_commit_id.is_some()
            || seq > 0 && commit.parent_commit_id.is_none()
        {
            return Err(OmniError::corrupt(
                object,
                "only genesis (seq 0) has no parent",
            ));
        }
        Ok(commit)
    }
}
