//! The one error type of the engine, the evidence every error carries, and the table that
//! maps each error to a stable code, a CLI exit code and an HTTP status.
//!
//! Evidence answers the caller's first question after a failure: did anything durable
//! happen? It is set where the error is raised, by the layer that knows what it wrote, and
//! can only be raised later (`with_evidence`) by a layer that knows more (a publisher that
//! has already staged files turns a `BeforeEffect` storage failure into `Unpublished`).

use crate::limits::MERGE_CONFLICTS_SHOWN_MAX;
use std::fmt;

/// What a failed call left behind in durable storage.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Evidence {
    /// Nothing durable was written. Retry freely.
    BeforeEffect,
    /// Durable but unreachable staging exists; cleanup reclaims it. Retry; nothing to undo.
    Unpublished,
    /// The outcome of a publication is unknown after read-back. Read the head first.
    InDoubt,
    /// A multi-unit run published some units (listed by name). Rerun; it re-plans.
    PartlyPublished {
        /// The units (tables) whose publication landed before the failure.
        published_units: Vec<String>,
    },
}

impl Evidence {
    /// The stable snake_case name of this evidence.
    pub fn code(&self) -> &'static str {
        match self {
            Evidence::BeforeEffect => "before_effect",
            Evidence::Unpublished => "unpublished",
            Evidence::InDoubt => "in_doubt",
            Evidence::PartlyPublished { .. } => "partly_published",
        }
    }
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Evidence::PartlyPublished { published_units } => {
                write!(f, "partly_published [{}]", published_units.join(", "))
            }
            other => f.write_str(other.code()),
        }
    }
}

/// How a storage failure should be treated, classified from the error's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageKind {
    /// A passing fault (timeout, reset connection, throttling): retry later.
    Transient,
    /// The store is set up wrongly (credentials, unknown option, bad path form).
    Configuration,
    /// An object that should exist does not.
    NotFound,
    /// A conditional request failed (the object exists already, or changed).
    Precondition,
    /// The request cannot succeed as made (unsupported operation, corrupt data).
    Permanent,
    /// Nothing in the error's type says which.
    Unknown,
}

impl StorageKind {
    /// Every storage kind, in table order.
    pub const ALL: [StorageKind; 6] = [
        StorageKind::Transient,
        StorageKind::Configuration,
        StorageKind::NotFound,
        StorageKind::Precondition,
        StorageKind::Permanent,
        StorageKind::Unknown,
    ];
}

/// Where in the caller's input a bad value was found. Every part is optional; the
/// parts that are known are named in the message.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InputLocation {
    /// The file or argument the input came from (`schema.pg`, `--json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// One-based line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// One-based column.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u64>,
    /// Zero-based row within a batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub row: Option<u64>,
    /// The type the value was meant for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub type_name: Option<String>,
    /// The property or field the value was meant for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl InputLocation {
    /// A location in a named source.
    pub fn in_source(source: impl Into<String>) -> Self {
        InputLocation {
            source: Some(source.into()),
            ..Default::default()
        }
    }

    /// This location at a line and column.
    pub fn at(mut self, line: u64, column: u64) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }

    /// This location at a row of a batch.
    pub fn row(mut self, row: u64) -> Self {
        self.row = Some(row);
        self
    }

    /// This location naming a type.
    pub fn type_name(mut self, type_name: impl Into<String>) -> Self {
        self.type_name = Some(type_name.into());
        self
    }

    /// This location naming a field.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
}

/// ` (at <location>)`, or nothing.
fn located(location: Option<&InputLocation>) -> String {
    location.map_or_else(String::new, |location| format!(" (at {location})"))
}

impl fmt::Display for InputLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(source) = &self.source {
            parts.push(source.clone());
        }
        match (self.line, self.column) {
            (Some(line), Some(column)) => parts.push(format!("line {line}, column {column}")),
            (Some(line), None) => parts.push(format!("line {line}")),
            _ => {}
        }
        if let Some(row) = self.row {
            parts.push(format!("row {row}"));
        }
        if let Some(type_name) = &self.type_name {
            parts.push(format!("type {type_name}"));
        }
        if let Some(field) = &self.field {
            parts.push(format!("field {field}"));
        }
        if parts.is_empty() {
            f.write_str("input")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// One member of a writer's read set: something it read that must not have changed
/// when it publishes. The stable string form (`graph_head:<branch>`, `schema:<branch>`,
/// `pin:<table>`, `read_pin:<table>`) is what errors and JSON show.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReadSetMember {
    /// The whole branch head: the strict writers (merge, schema apply).
    GraphHead {
        /// The branch.
        branch: String,
    },
    /// The schema in force on the branch.
    Schema {
        /// The branch.
        branch: String,
    },
    /// The pin of a table the writer staged on.
    Pin {
        /// The table id.
        table_id: String,
    },
    /// The pin of a table the writer only read to validate its write: the node table
    /// behind an edge-endpoint check, or the table behind a key check.
    ReadPin {
        /// The table id.
        table_id: String,
    },
}

impl ReadSetMember {
    /// Whether a conflict on this member can be re-checked on the new head (a table
    /// moved), as opposed to the whole head or the schema moving.
    pub fn is_table(&self) -> bool {
        matches!(
            self,
            ReadSetMember::Pin { .. } | ReadSetMember::ReadPin { .. }
        )
    }
}

impl fmt::Display for ReadSetMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadSetMember::GraphHead { branch } => write!(f, "graph_head:{branch}"),
            ReadSetMember::Schema { branch } => write!(f, "schema:{branch}"),
            ReadSetMember::Pin { table_id } => write!(f, "pin:{table_id}"),
            ReadSetMember::ReadPin { table_id } => write!(f, "read_pin:{table_id}"),
        }
    }
}

impl serde::Serialize for ReadSetMember {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The source of a storage failure, kept for its message and chain.
pub type BoxedSource = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a merge cannot take a key (or a type) from both sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeConflictKind {
    /// Added or changed on both sides since the merge base, to different values.
    ChangedOnBoth,
    /// Deleted on one side and added or changed on the other.
    DeletedAndChanged,
    /// An edge the merge would keep names a node the merge would remove.
    DanglingEdge,
    /// The schema changed since the merge base on one side while the other side
    /// wrote, or on both sides differently; `key` is empty.
    Schema,
}

/// One conflict of a merge.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MergeConflict {
    /// The type holding the key.
    pub type_name: String,
    /// The key (an edge's id), rendered as JSON.
    pub key: String,
    /// Why it conflicts.
    pub kind: MergeConflictKind,
}

fn merge_conflicts_shown(conflicts: &[MergeConflict]) -> String {
    let mut shown: Vec<String> = Vec::new();
    let mut per_type: std::collections::BTreeMap<&str, usize> = Default::default();
    for conflict in conflicts {
        let count = per_type.entry(conflict.type_name.as_str()).or_default();
        *count += 1;
        if *count <= MERGE_CONFLICTS_SHOWN_MAX {
            shown.push(format!(
                "{} {} ({:?})",
                conflict.type_name, conflict.key, conflict.kind
            ));
        }
    }
    let more = conflicts.len() - shown.len();
    let tail = if more > 0 {
        format!("; and {more} more (--json lists them all)")
    } else {
        String::new()
    };
    format!("{}{tail}", shown.join(", "))
}

/// Every error the engine returns. Each variant carries its [`Evidence`].
#[derive(Debug, thiserror::Error)]
pub enum OmniError {
    /// The caller's input is malformed or does not fit the schema's shape.
    #[error("bad input at {location}: {message}")]
    BadInput {
        /// Where the bad value is (boxed: it is the largest part of any error).
        location: Box<InputLocation>,
        /// What is wrong with it.
        message: String,
        /// What the failed call left behind.
        evidence: Evidence,
    },
    /// A query the engine refuses before it reads anything: its syntax, a name the
    /// schema does not have, a clause it does not run.
    #[error("bad query at line {line}, column {column} ({refusal}): {message}")]
    BadQuery {
        /// What kind of refusal it is.
        refusal: QueryRefusal,
        /// One-based line of the query text.
        line: u64,
        /// One-based column (in characters) of the query text.
        column: u64,
        /// What is wrong, naming the clause, label, property or function.
        message: String,
        /// What the failed call left behind: always [`Evidence::BeforeEffect`].
        evidence: Evidence,
    },
    /// A query that was accepted and began to run, and stopped: over its memory budget,
    /// or a value it could not compute (an integer divided by zero).
    #[error("query failed ({reason}): {message}")]
    QueryFailed {
        /// Why it stopped.
        reason: QueryFailure,
        /// What stopped it, naming the budget or the operation.
        message: String,
        /// What the failed call left behind: always [`Evidence::BeforeEffect`] (queries
        /// only read).
        evidence: Evidence,
    },
    /// A named thing (root, type, key, commit, index) does not exist.
    #[error("not found: {what}")]
    NotFound {
        /// What was looked for, e.g. `type Person` or `commit 42`.
        what: String,
        /// What the failed call left behind.
        evidence: Evidence,
    },
    /// Data or a schema change breaks a rule of the schema.
    #[error("schema violation in {type_name}: {message}")]
    SchemaViolation {
        /// The type whose rule was broken.
        type_name: String,
        /// What rule was broken.
        message: String,
        /// What the failed call left behind.
        evidence: Evidence,
    },
    /// A key that must be unique already exists.
    #[error("key conflict in {type_name}: key {key} already exists{}", located(.location.as_deref()))]
    KeyConflict {
        /// The type holding the key.
        type_name: String,
        /// The conflicting key, rendered.
        key: String,
        /// The input row that gave the key, when the call read it from input.
        location: Option<Box<InputLocation>>,
        /// What the failed call left behind.
        evidence: Evidence,
    },
    /// Something the writer read before staging changed before it could publish.
    #[error("read set changed: {member} was {expected} and is now {actual}")]
    ReadSetChanged {
        /// What changed.
        member: ReadSetMember,
        /// The value the writer read.
        expected: String,
        /// The value found at publication.
        actual: String,
        /// What the failed call left behind.
        evidence: Evidence,
    },
    /// A publication's commit could not be read back after a transport error.
    #[error("publication of commit {commit_id} is in doubt: read the head before retrying")]
    PublishInDoubt {
        /// The id of the commit whose publication is unknown.
        commit_id: String,
        /// Always [`Evidence::InDoubt`].
        evidence: Evidence,
    },
    /// A retrying writer lost the race to publish too many times.
    #[error("contention: gave up after {attempts} publication attempts")]
    ContentionExhausted {
        /// How many commit PUTs the write made (at most `COMMIT_PUTS_MAX` of
        /// `omnigraph_publish`).
        attempts: u32,
        /// What the failed call left behind.
        evidence: Evidence,
    },
    /// A maintenance run was cancelled before it finished.
    #[error("maintenance cancelled")]
    MaintenanceCancelled {
        /// What the failed call left behind.
        evidence: Evidence,
    },
    /// A commit the caller named was reclaimed by cleanup: it is still listed in the
    /// log, but its table versions are gone.
    #[error(
        "commit {seq} of branch {branch} was reclaimed by cleanup; the oldest readable commit is {oldest_retained}"
    )]
    CommitReclaimed {
        /// The branch.
        branch: String,
        /// The commit asked for.
        seq: u64,
        /// The oldest commit cleanup retained on the branch.
        oldest_retained: u64,
        /// What the failed call left behind.
        evidence: Evidence,
    },
    /// A writer's staging grew older than half the cleanup grace period before it could
    /// publish; cleanup may reclaim its files, so it is never published.
    #[error(
        "staging is {age_secs} s old; the limit is {limit_secs} s (half the cleanup grace period): retry"
    )]
    StagingExpired {
        /// How old the staging is, in seconds.
        age_secs: u64,
        /// The limit, in seconds.
        limit_secs: u64,
        /// [`Evidence::Unpublished`] when the writer staged files; a merge that staged
        /// nothing (its pins taken as they are) leaves nothing.
        evidence: Evidence,
    },
    /// A graph already exists at the root.
    #[error("a graph already exists at {root}")]
    AlreadyInitialized {
        /// The root that already holds a graph.
        root: String,
        /// What the failed call left behind.
        evidence: Evidence,
    },
    /// A branch of that name exists already.
    #[error("branch {branch} exists already")]
    BranchExists {
        /// The branch.
        branch: String,
        /// What the failed call left behind.
        evidence: Evidence,
    },
    /// A merge found keys both sides changed; nothing was published.
    #[error(
        "merging {from_branch} into {into_branch}: {} conflicts: {}",
        conflicts.len(),
        merge_conflicts_shown(conflicts)
    )]
    MergeConflict {
        /// The branch merged from.
        from_branch: String,
        /// The branch merged into.
        into_branch: String,
        /// Every conflict, by type and key.
        conflicts: Vec<MergeConflict>,
        /// What the failed call left behind.
        evidence: Evidence,
    },
    /// A stored object is malformed, truncated, of an unknown format, or out of sequence.
    #[error("corrupt state in {object}: {message}")]
    Corrupt {
        /// The object (path) that is wrong.
        object: String,
        /// What is wrong with it.
        message: String,
        /// What the failed call left behind.
        evidence: Evidence,
    },
    /// The object store or Lance failed.
    #[error("storage failure ({kind:?}) during {operation}: {source}")]
    Storage {
        /// The classified kind.
        kind: StorageKind,
        /// What the engine was doing (`put _graph/FORMAT`, `open table t1`).
        operation: String,
        /// The underlying error.
        #[source]
        source: BoxedSource,
        /// What the failed call left behind.
        evidence: Evidence,
    },
    /// A broken invariant of the engine itself.
    #[error("internal error: {message}")]
    Internal {
        /// What invariant broke.
        message: String,
        /// What the failed call left behind.
        evidence: Evidence,
    },
}

/// The result type of the engine.
pub type Result<T, E = OmniError> = std::result::Result<T, E>;

/// Why a running query stopped ([`OmniError::QueryFailed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QueryFailure {
    /// It needed more memory than its budget allows (and could not spill).
    OverBudget,
    /// A value it could not compute: an integer divided by zero, a cast that fails.
    Evaluation,
}

impl QueryFailure {
    /// The stable name, as `--json` gives it.
    pub fn name(&self) -> &'static str {
        match self {
            QueryFailure::OverBudget => "over_budget",
            QueryFailure::Evaluation => "evaluation",
        }
    }
}

impl std::fmt::Display for QueryFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a query is refused ([`OmniError::BadQuery`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QueryRefusal {
    /// The text is not a query of the language.
    Syntax,
    /// A label that is no node type of the schema.
    UnknownLabel,
    /// A relationship type that is no edge type of the schema, or one whose
    /// endpoints do not fit the pattern.
    UnknownRelationshipType,
    /// A property the label or type does not have.
    UnknownProperty,
    /// A variable that no earlier clause binds.
    UnknownVariable,
    /// A value of the wrong type for its property or operator.
    WrongType,
    /// A variable-length pattern without an upper bound, or past the engine's.
    UnboundedLength,
    /// A clause that writes (`CREATE`, `MERGE`, `SET`, `DELETE`, ...): queries read.
    WritingClause,
    /// A clause, function or form of the language the engine does not run.
    Unsupported,
}

impl QueryRefusal {
    /// Every refusal, in the order `docs/query.md` lists them.
    pub const ALL: [QueryRefusal; 9] = [
        QueryRefusal::Syntax,
        QueryRefusal::UnknownLabel,
        QueryRefusal::UnknownRelationshipType,
        QueryRefusal::UnknownProperty,
        QueryRefusal::UnknownVariable,
        QueryRefusal::WrongType,
        QueryRefusal::UnboundedLength,
        QueryRefusal::WritingClause,
        QueryRefusal::Unsupported,
    ];

    /// The stable name of the refusal, as `--json` and the docs give it.
    pub fn name(&self) -> &'static str {
        match self {
            QueryRefusal::Syntax => "syntax",
            QueryRefusal::UnknownLabel => "unknown_label",
            QueryRefusal::UnknownRelationshipType => "unknown_relationship_type",
            QueryRefusal::UnknownProperty => "unknown_property",
            QueryRefusal::UnknownVariable => "unknown_variable",
            QueryRefusal::WrongType => "wrong_type",
            QueryRefusal::UnboundedLength => "unbounded_length",
            QueryRefusal::WritingClause => "writing_clause",
            QueryRefusal::Unsupported => "unsupported",
        }
    }
}

impl fmt::Display for QueryRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The kind of an [`OmniError`], with storage failures split by [`StorageKind`]: the key
/// of the `ERROR_TABLE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// [`OmniError::BadInput`].
    BadInput,
    /// [`OmniError::BadQuery`].
    BadQuery,
    /// [`OmniError::QueryFailed`].
    QueryFailed,
    /// [`OmniError::NotFound`].
    NotFound,
    /// [`OmniError::SchemaViolation`].
    SchemaViolation,
    /// [`OmniError::KeyConflict`].
    KeyConflict,
    /// [`OmniError::ReadSetChanged`].
    ReadSetChanged,
    /// [`OmniError::PublishInDoubt`].
    PublishInDoubt,
    /// [`OmniError::ContentionExhausted`].
    ContentionExhausted,
    /// [`OmniError::MaintenanceCancelled`].
    MaintenanceCancelled,
    /// [`OmniError::CommitReclaimed`].
    CommitReclaimed,
    /// [`OmniError::StagingExpired`].
    StagingExpired,
    /// [`OmniError::AlreadyInitialized`].
    AlreadyInitialized,
    /// [`OmniError::BranchExists`].
    BranchExists,
    /// [`OmniError::MergeConflict`].
    MergeConflict,
    /// [`OmniError::Corrupt`].
    Corrupt,
    /// [`OmniError::Storage`] of the given kind.
    Storage(StorageKind),
    /// [`OmniError::Internal`].
    Internal,
}

/// The stable identity of an error kind for callers outside Rust.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorCode {
    /// Stable snake_case code, printed by the CLI and served by hosts.
    pub code: &'static str,
    /// The `omnigraph` process exit code.
    pub exit_code: i32,
    /// The HTTP status for hosts that serve the engine.
    pub http_status: u16,
}

/// CLI exit code: success.
pub const EXIT_SUCCESS: i32 = 0;
/// CLI exit code: a failure with no more specific code.
pub const EXIT_FAILURE: i32 = 1;
/// CLI exit code: usage error or bad input.
pub const EXIT_USAGE: i32 = 2;
/// CLI exit code: a conflict or a failed precondition.
pub const EXIT_CONFLICT: i32 = 4;
/// CLI exit code: temporary failure, retry later (sysexits `EX_TEMPFAIL`).
pub const EXIT_TEMPORARY: i32 = 75;

const fn code(code: &'static str, exit_code: i32, http_status: u16) -> ErrorCode {
    ErrorCode {
        code,
        exit_code,
        http_status,
    }
}

/// The one table from error kind to code, exit code and HTTP status.
///
/// `PublishInDoubt` is deliberately not "temporary": a blind retry of an insert whose
/// first publication landed would insert twice, so the caller must read the head first.
pub(crate) const ERROR_TABLE: &[(ErrorKind, ErrorCode)] = &[
    (ErrorKind::BadInput, code("bad_input", EXIT_USAGE, 400)),
    (ErrorKind::BadQuery, code("bad_query", EXIT_USAGE, 400)),
    (
        ErrorKind::QueryFailed,
        code("query_failed", EXIT_FAILURE, 422),
    ),
    (ErrorKind::NotFound, code("not_found", EXIT_FAILURE, 404)),
    (
        ErrorKind::SchemaViolation,
        code("schema_violation", EXIT_USAGE, 422),
    ),
    (
        ErrorKind::KeyConflict,
        code("key_conflict", EXIT_CONFLICT, 409),
    ),
    (
        ErrorKind::ReadSetChanged,
        code("read_set_changed", EXIT_CONFLICT, 409),
    ),
    (
        ErrorKind::PublishInDoubt,
        code("publish_in_doubt", EXIT_FAILURE, 500),
    ),
    (
        ErrorKind::ContentionExhausted,
        code("contention_exhausted", EXIT_TEMPORARY, 503),
    ),
    (
        ErrorKind::MaintenanceCancelled,
        code("maintenance_cancelled", EXIT_TEMPORARY, 503),
    ),
    (
        ErrorKind::CommitReclaimed,
        code("commit_reclaimed", EXIT_FAILURE, 410),
    ),
    (
        ErrorKind::StagingExpired,
        code("staging_expired", EXIT_TEMPORARY, 503),
    ),
    (
        ErrorKind::AlreadyInitialized,
        code("already_initialized", EXIT_CONFLICT, 409),
    ),
    (
        ErrorKind::BranchExists,
        code("branch_exists", EXIT_CONFLICT, 409),
    ),
    (
        ErrorKind::MergeConflict,
        code("merge_conflict", EXIT_CONFLICT, 409),
    ),
    (ErrorKind::Corrupt, code("corrupt_state", EXIT_FAILURE, 500)),
    (
        ErrorKind::Storage(StorageKind::Transient),
        code("storage_transient", EXIT_TEMPORARY, 503),
    ),
    (
        ErrorKind::Storage(StorageKind::Configuration),
        code("storage_configuration", EXIT_FAILURE, 500),
    ),
    (
        ErrorKind::Storage(StorageKind::NotFound),
        code("storage_not_found", EXIT_FAILURE, 500),
    ),
    (
        ErrorKind::Storage(StorageKind::Precondition),
        code("storage_precondition", EXIT_CONFLICT, 412),
    ),
    (
        ErrorKind::Storage(StorageKind::Permanent),
        code("storage_permanent", EXIT_FAILURE, 500),
    ),
    (
        ErrorKind::Storage(StorageKind::Unknown),
        code("storage_unknown", EXIT_FAILURE, 500),
    ),
    (ErrorKind::Internal, code("internal", EXIT_FAILURE, 500)),
];

impl ErrorKind {
    /// What the error means and what to do, as `docs/errors.md` says it (generated
    /// from here; a test keeps the two the same).
    pub fn meaning(&self) -> &'static str {
        match self {
            ErrorKind::BadInput => {
                "malformed input; names the source, line, column, row, type and field it knows"
            }
            ErrorKind::BadQuery => {
                "a query refused before it reads anything; names the line, column and what it refuses (see `docs/query.md`)"
            }
            ErrorKind::QueryFailed => {
                "a query that ran and stopped: over its memory budget (`over_budget`: narrow it, or give it a larger budget) or a value it could not compute (`evaluation`); nothing changed"
            }
            ErrorKind::NotFound => "a root, type, key, commit or index that does not exist",
            ErrorKind::SchemaViolation => {
                "a change or value that breaks a rule of the schema (data-losing schema changes without `--force`)"
            }
            ErrorKind::KeyConflict => "a key that exists already",
            ErrorKind::ReadSetChanged => {
                "something the writer read changed before it published (its member says what; see below); retry"
            }
            ErrorKind::PublishInDoubt => {
                "the commit's outcome is unknown: read the head before retrying"
            }
            ErrorKind::ContentionExhausted => "too many lost races; retry later",
            ErrorKind::MaintenanceCancelled => "a maintenance run was cancelled",
            ErrorKind::CommitReclaimed => {
                "the commit is still in the log, but cleanup reclaimed its table versions; read a newer commit"
            }
            ErrorKind::StagingExpired => {
                "the write staged (or a merge read its source) longer than half the cleanup grace period ago, so it was not published; retry"
            }
            ErrorKind::AlreadyInitialized => "the root holds a graph already",
            ErrorKind::BranchExists => "a branch of that name exists already; delete it first",
            ErrorKind::MergeConflict => {
                "a merge found keys changed on both branches, an edge it would leave without an endpoint, or schema changes it cannot combine (listed by type, key and kind, all of them in `--json`); nothing published: reconcile on one branch and merge again"
            }
            ErrorKind::Corrupt => {
                "a stored object is malformed, truncated, of an unknown format or out of sequence; names it"
            }
            ErrorKind::Storage(StorageKind::Transient) => "a passing storage fault; retry later",
            ErrorKind::Storage(StorageKind::Configuration) => {
                "credentials, options or paths are wrong"
            }
            ErrorKind::Storage(StorageKind::NotFound) => "an object that should exist does not",
            ErrorKind::Storage(StorageKind::Precondition) => "a conditional request failed",
            ErrorKind::Storage(StorageKind::Permanent) => "the request cannot succeed as made",
            ErrorKind::Storage(StorageKind::Unknown) => "a storage failure of unknown kind",
            ErrorKind::Internal => "a broken engine invariant",
        }
    }
}

impl Evidence {
    /// What this evidence means and what to do, as `docs/errors.md` says it.
    pub fn guidance(&self) -> (&'static str, &'static str) {
        match self {
            Evidence::BeforeEffect => ("nothing durable was written", "retry freely"),
            Evidence::Unpublished => (
                "files were staged but nothing was published; cleanup reclaims them",
                "retry; nothing to undo",
            ),
            Evidence::InDoubt => (
                "the publication's outcome is unknown",
                "read the head before retrying",
            ),
            Evidence::PartlyPublished { .. } => (
                "a multi-unit run published some units (listed)",
                "rerun; it re-plans",
            ),
        }
    }
}

impl ReadSetMember {
    /// Which writers hold this member, what moved when it conflicts, and what happens,
    /// as `docs/errors.md` says it.
    pub fn guidance(&self) -> (&'static str, &'static str, &'static str) {
        match self {
            ReadSetMember::GraphHead { .. } => (
                "merge, schema apply (the strict writers)",
                "a commit that changed a table or the schema was published on the branch since the writer read its head",
                "the write plans again on the new head, up to 8 times (`REPLANS_MAX`) and within the write's 64 commit PUTs (`COMMIT_PUTS_MAX`; then `contention_exhausted`, whose `attempts` counts the PUTs), and from its third lost attempt reserves every table of the branch (`docs/format.md` §7.7); a commit that changed nothing the writer read (cleanup's record, a reservation) is followed instead",
            ),
            ReadSetMember::Schema { .. } => (
                "insert, load, update, delete, index builds, optimize, schema apply",
                "another writer applied a schema",
                "an insert or load on a warm handle that checked its rows on the handle's last head runs once more, on the branch head, by itself; update and delete plan again on the new head; a schema apply stops (planning again would undo the other schema: read it with `schema show`, then apply yours again), unless the schema in force is the one it applies; otherwise nothing published (optimize reports the unit `pin_moved`), and a rerun on the same handle checks against the new schema",
            ),
            ReadSetMember::Pin { .. } => (
                "insert, load, update, delete, index builds, optimize",
                "a table the writer staged on moved (for update and delete: a table it read, a delete's incident edge tables included)",
                "insert and load re-check their keys and endpoints on the new head and re-commit their staged files; update and delete plan again on the new head (at most `REPLANS_MAX` = 8 plans and, over everything a write does, `COMMIT_PUTS_MAX` = 64 commit PUTs, then `contention_exhausted`); a write whose tables moved under it again first reserves them for a short lease, so other writers of those tables wait for it (`docs/format.md` §7.7); optimize stages its unit again on the new pin (up to 12 times, then `pin_moved`); a prepared update or delete, a load merge too large to keep in memory and index builds report it and publish nothing",
            ),
            ReadSetMember::ReadPin { .. } => (
                "insert, load of edges",
                "a node table the writer read to check edge endpoints moved",
                "the endpoints are checked again on the new head: an edge whose endpoint was deleted meanwhile is refused as `bad_input`, never published dangling",
            ),
        }
    }
}

/// Every evidence, in the order the docs list them. The match makes a new variant fail
/// to compile until it is listed.
fn every_evidence() -> [Evidence; 4] {
    let listed = [
        Evidence::BeforeEffect,
        Evidence::Unpublished,
        Evidence::InDoubt,
        Evidence::PartlyPublished {
            published_units: Vec::new(),
        },
    ];
    for evidence in &listed {
        match evidence {
            Evidence::BeforeEffect
            | Evidence::Unpublished
            | Evidence::InDoubt
            | Evidence::PartlyPublished { .. } => {}
        }
    }
    listed
}

/// Every read-set member, with placeholders for its branch or table.
fn every_read_set_member() -> [ReadSetMember; 4] {
    let branch = || "<branch>".to_string();
    let table_id = || "<table>".to_string();
    let listed = [
        ReadSetMember::GraphHead { branch: branch() },
        ReadSetMember::Schema { branch: branch() },
        ReadSetMember::Pin {
            table_id: table_id(),
        },
        ReadSetMember::ReadPin {
            table_id: table_id(),
        },
    ];
    for member in &listed {
        match member {
            ReadSetMember::GraphHead { .. }
            | ReadSetMember::Schema { .. }
            | ReadSetMember::Pin { .. }
            | ReadSetMember::ReadPin { .. } => {}
        }
    }
    listed
}

/// The tables of `docs/errors.md` generated from the code: (marker name, Markdown).
pub fn generated_doc_tables() -> Vec<(&'static str, String)> {
    let mut evidence = String::from("| evidence | meaning | what to do |\n|---|---|---|\n");
    for each in every_evidence() {
        let (meaning, what_to_do) = each.guidance();
        evidence.push_str(&format!(
            "| `{}` | {meaning} | {what_to_do} |\n",
            each.code()
        ));
    }
    let mut members =
        String::from("| member | writers | what moved | what happens |\n|---|---|---|---|\n");
    for member in every_read_set_member() {
        let (writers, moved, happens) = member.guidance();
        members.push_str(&format!(
            "| `{member}` | {writers} | {moved} | {happens} |\n"
        ));
    }
    vec![
        ("ERROR_TABLE", error_table_markdown()),
        ("Evidence", evidence),
        ("ReadSetMember", members),
    ]
}

/// The error table of `docs/errors.md`, rendered from `ERROR_TABLE`.
pub fn error_table_markdown() -> String {
    let mut out = String::from("| code | exit | HTTP | meaning |\n|---|---|---|---|\n");
    for (kind, row) in ERROR_TABLE {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            row.code,
            row.exit_code,
            row.http_status,
            kind.meaning()
        ));
    }
    out
}

/// The table row for a kind.
pub(crate) fn error_code(kind: ErrorKind) -> ErrorCode {
    ERROR_TABLE
        .iter()
        .find(|(row_kind, _)| *row_kind == kind)
        .map(|(_, row_code)| *row_code)
        // Every kind has a row; the table test enumerates them.
        .unwrap_or(code("internal", EXIT_FAILURE, 500))
}

impl OmniError {
    /// This error's kind, the key of the `ERROR_TABLE`.
    pub fn kind(&self) -> ErrorKind {
        match self {
            OmniError::BadInput { .. } => ErrorKind::BadInput,
            OmniError::BadQuery { .. } => ErrorKind::BadQuery,
            OmniError::QueryFailed { .. } => ErrorKind::QueryFailed,
            OmniError::NotFound { .. } => ErrorKind::NotFound,
            OmniError::SchemaViolation { .. } => ErrorKind::SchemaViolation,
            OmniError::KeyConflict { .. } => ErrorKind::KeyConflict,
            OmniError::ReadSetChanged { .. } => ErrorKind::ReadSetChanged,
            OmniError::PublishInDoubt { .. } => ErrorKind::PublishInDoubt,
            OmniError::ContentionExhausted { .. } => ErrorKind::ContentionExhausted,
            OmniError::MaintenanceCancelled { .. } => ErrorKind::MaintenanceCancelled,
            OmniError::CommitReclaimed { .. } => ErrorKind::CommitReclaimed,
            OmniError::StagingExpired { .. } => ErrorKind::StagingExpired,
            OmniError::AlreadyInitialized { .. } => ErrorKind::AlreadyInitialized,
            OmniError::BranchExists { .. } => ErrorKind::BranchExists,
            OmniError::MergeConflict { .. } => ErrorKind::MergeConflict,
            OmniError::Corrupt { .. } => ErrorKind::Corrupt,
            OmniError::Storage { kind, .. } => ErrorKind::Storage(*kind),
            OmniError::Internal { .. } => ErrorKind::Internal,
        }
    }

    /// The stable code, exit code and HTTP status of this error.
    pub fn code(&self) -> ErrorCode {
        error_code(self.kind())
    }

    /// What this error says was left behind.
    pub fn evidence(&self) -> &Evidence {
        match self {
            OmniError::BadInput { evidence, .. }
            | OmniError::BadQuery { evidence, .. }
            | OmniError::QueryFailed { evidence, .. }
            | OmniError::NotFound { evidence, .. }
            | OmniError::SchemaViolation { evidence, .. }
            | OmniError::KeyConflict { evidence, .. }
            | OmniError::ReadSetChanged { evidence, .. }
            | OmniError::PublishInDoubt { evidence, .. }
            | OmniError::ContentionExhausted { evidence, .. }
            | OmniError::MaintenanceCancelled { evidence, .. }
            | OmniError::CommitReclaimed { evidence, .. }
            | OmniError::StagingExpired { evidence, .. }
            | OmniError::AlreadyInitialized { evidence, .. }
            | OmniError::BranchExists { evidence, .. }
            | OmniError::MergeConflict { evidence, .. }
            | OmniError::Corrupt { evidence, .. }
            | OmniError::Storage { evidence, .. }
            | OmniError::Internal { evidence, .. } => evidence,
        }
    }

    fn evidence_mut(&mut self) -> &mut Evidence {
        match self {
            OmniError::BadInput { evidence, .. }
            | OmniError::BadQuery { evidence, .. }
            | OmniError::QueryFailed { evidence, .. }
            | OmniError::NotFound { evidence, .. }
            | OmniError::SchemaViolation { evidence, .. }
            | OmniError::KeyConflict { evidence, .. }
            | OmniError::ReadSetChanged { evidence, .. }
            | OmniError::PublishInDoubt { evidence, .. }
            | OmniError::ContentionExhausted { evidence, .. }
            | OmniError::MaintenanceCancelled { evidence, .. }
            | OmniError::CommitReclaimed { evidence, .. }
            | OmniError::StagingExpired { evidence, .. }
            | OmniError::AlreadyInitialized { evidence, .. }
            | OmniError::BranchExists { evidence, .. }
            | OmniError::MergeConflict { evidence, .. }
            | OmniError::Corrupt { evidence, .. }
            | OmniError::Storage { evidence, .. }
            | OmniError::Internal { evidence, .. } => evidence,
        }
    }

    /// Raise the evidence to at least `at_least`: a layer that has staged files knows
    /// that a failure below it is no longer `BeforeEffect`. Evidence never goes down, and
    /// `InDoubt` and `PartlyPublished` are never replaced by weaker claims.
    pub fn with_evidence(mut self, at_least: Evidence) -> Self {
        let current = self.evidence_mut();
        if evidence_rank(&at_least) > evidence_rank(current) {
            *current = at_least;
        }
        self
    }

    /// Bad input at a location.
    pub fn bad_input(location: InputLocation, message: impl Into<String>) -> Self {
        OmniError::BadInput {
            location: Box::new(location),
            message: message.into(),
            evidence: Evidence::BeforeEffect,
        }
    }

    /// A refused query at a line and column, before any effect.
    pub fn bad_query(
        refusal: QueryRefusal,
        line: u64,
        column: u64,
        message: impl Into<String>,
    ) -> Self {
        OmniError::BadQuery {
            refusal,
            line,
            column,
            message: message.into(),
            evidence: Evidence::BeforeEffect,
        }
    }

    /// A query that stopped while it ran, before any effect (queries only read).
    pub fn query_failed(reason: QueryFailure, message: impl Into<String>) -> Self {
        OmniError::QueryFailed {
            reason,
            message: message.into(),
            evidence: Evidence::BeforeEffect,
        }
    }

    /// A missing thing, before any effect.
    pub fn not_found(what: impl Into<String>) -> Self {
        OmniError::NotFound {
            what: what.into(),
            evidence: Evidence::BeforeEffect,
        }
    }

    /// A corrupt or unreadable stored object, before any effect.
    pub fn corrupt(object: impl Into<String>, message: impl Into<String>) -> Self {
        OmniError::Corrupt {
            object: object.into(),
            message: message.into(),
            evidence: Evidence::BeforeEffect,
        }
    }

    /// A broken engine invariant, before any effect.
    pub fn internal(message: impl Into<String>) -> Self {
        OmniError::Internal {
            message: message.into(),
            evidence: Evidence::BeforeEffect,
        }
    }

    /// A storage failure of an explicit kind, before any effect.
    pub fn storage(kind: StorageKind, operation: impl Into<String>, source: BoxedSource) -> Self {
        OmniError::Storage {
            kind,
            operation: operation.into(),
            source,
            evidence: Evidence::BeforeEffect,
        }
    }

    /// A failure from `object_store`, classified by its variant.
    pub(crate) fn from_object_store(
        operation: impl Into<String>,
        error: object_store::Error,
    ) -> Self {
        let kind = crate::classify::object_store_kind(&error);
        OmniError::storage(kind, operation, Box::new(error))
    }

    /// A failure of a local file's I/O (an export's output, say), classified by its
    /// kind.
    pub fn from_io(operation: impl Into<String>, error: std::io::Error) -> Self {
        let kind = crate::classify::io_kind(&error);
        OmniError::storage(kind, operation, Box::new(error))
    }

    /// A failure from Lance, classified by its variant and the type of its source.
    pub fn from_lance(operation: impl Into<String>, error: lance::Error) -> Self {
        let kind = crate::classify::lance_kind(&error);
        OmniError::storage(kind, operation, Box::new(error))
    }
}

fn evidence_rank(evidence: &Evidence) -> u8 {
    match evidence {
        Evidence::BeforeEffect => 0,
        Evidence::Unpublished => 1,
        Evidence::PartlyPublished { .. } => 2,
        Evidence::InDoubt => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn every_kind() -> Vec<ErrorKind> {
        let mut kinds = vec![
            ErrorKind::BadInput,
            ErrorKind::BadQuery,
            ErrorKind::QueryFailed,
            ErrorKind::NotFound,
            ErrorKind::SchemaViolation,
            ErrorKind::KeyConflict,
            ErrorKind::ReadSetChanged,
            ErrorKind::PublishInDoubt,
            ErrorKind::ContentionExhausted,
            ErrorKind::MaintenanceCancelled,
            ErrorKind::CommitReclaimed,
            ErrorKind::StagingExpired,
            ErrorKind::AlreadyInitialized,
            ErrorKind::BranchExists,
            ErrorKind::MergeConflict,
            ErrorKind::Corrupt,
            ErrorKind::Internal,
        ];
        kinds.extend(
            StorageKind::ALL
                .iter()
                .map(|kind| ErrorKind::Storage(*kind)),
        );
        kinds
    }

    #[test]
    fn every_kind_has_exactly_one_row_and_codes_are_unique_snake_case() {
        let kinds = every_kind();
        assert_eq!(ERROR_TABLE.len(), kinds.len());
        for kind in &kinds {
            let rows = ERROR_TABLE.iter().filter(|(k, _)| k == kind).count();
            assert_eq!(rows, 1, "{kind:?} must have exactly one row");
        }
        let mut seen = HashSet::new();
        for (kind, row) in ERROR_TABLE {
            assert!(seen.insert(row.code), "duplicate code {}", row.code);
            assert!(
                row.code
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{kind:?}: code {} is not snake_case",
                row.code
            );
            assert!(
                [EXIT_FAILURE, EXIT_USAGE, EXIT_CONFLICT, EXIT_TEMPORARY].contains(&row.exit_code),
                "{kind:?}: exit code {} is not one of the documented ones",
                row.exit_code
            );
            assert!((400..600).contains(&row.http_status));
        }
    }

    /// `docs/errors.md` holds each table rendered from the code between two markers.
    /// `OMNIGRAPH_BLESS=1` rewrites them.
    #[test]
    fn the_tables_in_the_error_docs_are_generated_from_the_code() {
        // Cargo sets CARGO_MANIFEST_DIR when it runs the test: this checkout's docs, not
        // those of the checkout a shared build cache compiled the test in.
        let crate_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
        let path = std::path::Path::new(&crate_dir).join("../docs/errors.md");
        let path = path.as_path();
        let mut text = std::fs::read_to_string(path).unwrap();
        let bless = std::env::var("OMNIGRAPH_BLESS").as_deref() == Ok("1")
            && std::env::var_os("CI").is_none();
        for (name, generated) in generated_doc_tables() {
            let begin = format!("<!-- generated from {name}: begin -->\n");
            let end_marker = format!("<!-- generated from {name}: end -->");
            let start = text
                .find(&begin)
                .unwrap_or_else(|| panic!("docs/errors.md has no {begin:?}"))
                + begin.len();
            let end = text
                .find(&end_marker)
                .unwrap_or_else(|| panic!("docs/errors.md has no {end_marker:?}"));
            if bless {
                text = format!("{}{generated}{}", &text[..start], &text[end..]);
            } else {
                assert_eq!(
                    &text[start..end],
                    generated,
                    "docs/errors.md: the {name} table is stale; regenerate it with OMNIGRAPH_BLESS=1"
                );
            }
        }
        if bless {
            std::fs::write(path, text).unwrap();
        }
    }

    #[test]
    fn table_values_that_callers_rely_on() {
        let cancelled = OmniError::MaintenanceCancelled {
            evidence: Evidence::Unpublished,
        };
        assert_eq!(
            cancelled.code(),
            ErrorCode {
                code: "maintenance_cancelled",
                exit_code: 75,
                http_status: 503
            }
        );
        let conflict = OmniError::ReadSetChanged {
            member: ReadSetMember::GraphHead {
                branch: "main".into(),
            },
            expected: "3".into(),
            actual: "4".into(),
            evidence: Evidence::Unpublished,
        };
        assert_eq!(conflict.code().http_status, 409);
        assert_eq!(conflict.code().exit_code, 4);
        let bad = OmniError::bad_input(InputLocation::in_source("x.jsonl").at(3, 1), "bad");
        assert_eq!((bad.code().exit_code, bad.code().http_status), (2, 400));
        let transient = OmniError::storage(StorageKind::Transient, "get", "x".into());
        assert_eq!(
            (transient.code().exit_code, transient.code().http_status),
            (75, 503)
        );
        let exists = OmniError::AlreadyInitialized {
            root: "r".into(),
            evidence: Evidence::BeforeEffect,
        };
        assert_eq!(exists.code().exit_code, 4);
    }

    #[test]
    fn evidence_only_rises() {
        let error = OmniError::internal("x").with_evidence(Evidence::Unpublished);
        assert_eq!(error.evidence(), &Evidence::Unpublished);
        let error = error.with_evidence(Evidence::BeforeEffect);
        assert_eq!(error.evidence(), &Evidence::Unpublished);
        let error = error.with_evidence(Evidence::InDoubt);
        assert_eq!(error.evidence(), &Evidence::InDoubt);
        let error = error.with_evidence(Evidence::PartlyPublished {
            published_units: vec!["t1".into()],
        });
        assert_eq!(error.evidence(), &Evidence::InDoubt);
    }

    #[test]
    fn messages_name_what_and_where() {
        let location = InputLocation::in_source("people.jsonl")
            .at(7, 12)
            .type_name("Person")
            .field("age");
        let error = OmniError::bad_input(location, "expected Int32, found \"x\"");
        assert_eq!(
            error.to_string(),
            "bad input at people.jsonl, line 7, column 12, type Person, field age: expected Int32, found \"x\""
        );
        let evidence = Evidence::PartlyPublished {
            published_units: vec!["t1".into(), "t2".into()],
        };
        assert_eq!(evidence.to_string(), "partly_published [t1, t2]");
        let json = serde_json::to_value(&evidence).unwrap();
        assert_eq!(json["kind"], "partly_published");
        assert_eq!(json["published_units"][1], "t2");
        let members = [
            (
                ReadSetMember::GraphHead {
                    branch: "main".into(),
                },
                "graph_head:main",
            ),
            (
                ReadSetMember::Schema {
                    branch: "main".into(),
                },
                "schema:main",
            ),
            (
                ReadSetMember::Pin {
                    table_id: "t1".into(),
                },
                "pin:t1",
            ),
            (
                ReadSetMember::ReadPin {
                    table_id: "t2".into(),
                },
                "read_pin:t2",
            ),
        ];
        for (member, text) in members {
            assert_eq!(member.to_string(), text);
            assert_eq!(serde_json::to_value(&member).unwrap(), text);
        }
    }
}
