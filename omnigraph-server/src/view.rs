//! The JSON views of engine types, one shape for the CLI's `--json` and the server's
//! responses. The commit object is stored (`docs/format.md`); the views have their own
//! shape, pinned by the JSON shape golden (`tests/golden/json_shapes.txt`), so neither
//! changes the other silently.

use omnigraph_core::Result;
use omnigraph_core::schema::Catalog;
use omnigraph_graph::Omnigraph;
use omnigraph_publish::log::LogEntry;
use omnigraph_publish::{BranchInfo, CommitRef, ForkPoint, GraphCommit, TableKind, TablePin};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// A commit as JSON, through its view type: the stored commit is a storage format, and
/// a change to it never silently changes this output.
pub fn commit_json(commit: &GraphCommit) -> Value {
    serde_json::to_value(CommitView::of(commit)).unwrap_or(Value::Null)
}

/// A merge's report as JSON, through the commit's view type.
pub fn merge_json(report: &omnigraph_graph::MergeReport, dry_run: bool) -> Value {
    json!({
        "from": report.from_branch,
        "into": report.into_branch,
        "base": {"branch": report.base_branch, "seq": report.base_seq},
        "from_seq": report.from_seq,
        "into_seq": report.into_seq,
        "tables": report.tables,
        "conflicts": report.conflicts,
        "commit": report.commit.as_ref().map(commit_json),
        "dry_run": dry_run,
    })
}

/// The catalog as a JSON document.
pub fn catalog_json(catalog: &Catalog) -> Value {
    let types: Vec<Value> = catalog
        .types()
        .iter()
        .map(|type_def| {
            json!({
                "name": type_def.name(),
                "kind": if type_def.is_node() { "node" } else { "edge" },
                "key": type_def.key_column(),
                "columns": type_def.columns().iter().map(|column| json!({
                    "name": column.name,
                    "type": column.data_type.to_pg(),
                    "nullable": column.nullable,
                })).collect::<Vec<_>>(),
                "indexes": type_def.declared_indexes().iter().map(|index| json!({
                    "name": index.name,
                    "column": index.column,
                    "kind": index.kind.suffix(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "hash": catalog.hash(), "types": types })
}

/// One page of a branch's log, newest first: the commits, then what cleanup kept of
/// the commits it reclaimed below the floor.
#[derive(Debug)]
pub struct LogPage {
    /// The live commits.
    pub commits: Vec<GraphCommit>,
    /// The reclaimed commits' entries, after the live ones.
    pub reclaimed: Vec<LogEntry>,
    /// The most commits the page holds (the limit asked for, within one page).
    pub applied: usize,
}

impl LogPage {
    /// The newest `limit` commits of the handle's branch, within one page of the log.
    pub async fn read(graph: &Omnigraph, limit: usize) -> Result<LogPage> {
        let log = graph.graph().log(graph.branch())?;
        let applied = limit.min(omnigraph_publish::limits::LOG_PAGE_MAX);
        let (commits, reclaimed) = log.page(applied, None).await?;
        Ok(LogPage {
            commits,
            reclaimed,
            applied,
        })
    }

    /// Every entry, live and reclaimed, newest first.
    pub fn entries(&self) -> impl Iterator<Item = LogEntry> + '_ {
        self.commits
            .iter()
            .map(LogEntry::of_commit)
            .chain(self.reclaimed.iter().cloned())
    }

    /// How many older commits the page left out (the oldest shown seq, when the page
    /// is full).
    pub fn left_out(&self) -> u64 {
        let shown = self.commits.len() + self.reclaimed.len();
        let oldest_shown = self
            .reclaimed
            .last()
            .map(|entry| entry.seq)
            .or(self.commits.last().map(|commit| commit.seq));
        match oldest_shown {
            Some(oldest) if shown == self.applied => oldest,
            _ => 0,
        }
    }

    /// The page as JSON: the commits, the limit applied, and whether older ones were
    /// left out.
    pub fn json(&self) -> Value {
        let mut documents: Vec<Value> = self
            .commits
            .iter()
            .map(|commit| {
                let mut document = commit_json(commit);
                document["reclaimed"] = json!(false);
                document
            })
            .collect();
        documents.extend(self.reclaimed.iter().map(|entry| {
            json!({
                "seq": entry.seq,
                "commit_id": entry.commit_id,
                "parent_commit_id": entry.parent_commit_id,
                "created_at": entry.created_at,
                "created_at_text": rfc3339_micros(entry.created_at),
                "actor": entry.actor,
                "operation": entry.operation,
                "reclaimed": true,
            })
        }));
        json!({
            "commits": documents,
            "limit": self.applied,
            "truncated": self.left_out() > 0,
        })
    }
}

/// Each table a commit pins, with its Lance URI for any Lance reader.
pub fn tables_json(graph: &Omnigraph, commit: &GraphCommit) -> Value {
    let rows: Vec<Map<String, Value>> = table_rows(graph, commit);
    json!({"seq": commit.seq, "commit_id": commit.commit_id, "tables": rows})
}

/// The rows of [`tables_json`], one per table.
pub fn table_rows(graph: &Omnigraph, commit: &GraphCommit) -> Vec<Map<String, Value>> {
    commit
        .pins
        .iter()
        .map(|pin| {
            let mut row = Map::new();
            row.insert("type".into(), json!(pin.type_name));
            row.insert("kind".into(), json!(pin.kind));
            row.insert("rows".into(), json!(pin.row_count));
            row.insert("version".into(), json!(pin.version));
            row.insert(
                "uri".into(),
                json!(graph.graph().root().reader_uri(&pin.path)),
            );
            row
        })
        .collect()
}

/// The head of a handle's branch, with its index coverage and adjacency artifacts.
#[derive(Debug)]
pub struct Status {
    /// The head.
    pub head: GraphCommit,
    /// Each declared index's coverage at the head.
    pub coverage: Vec<omnigraph_graph::IndexCoverage>,
    /// Each edge type's adjacency artifact at the head.
    pub adjacency: Vec<omnigraph_graph::AdjacencyStatus>,
}

impl Status {
    /// The status of the handle's branch at its head.
    pub async fn read(graph: &Omnigraph) -> Result<Status> {
        let head = graph.head().await?;
        let at = CommitRef::Id(head.commit_id.clone());
        let coverage = graph.index_coverage(&at).await?;
        let adjacency = graph.adjacency_status(&at).await?;
        Ok(Status {
            head,
            coverage,
            adjacency,
        })
    }

    /// The status as JSON, with the root it was read from.
    pub fn json(&self, graph: &Omnigraph) -> Value {
        let tables: Vec<Value> = self
            .head
            .pins
            .iter()
            .map(
                |pin| json!({"type": pin.type_name, "rows": pin.row_count, "version": pin.version}),
            )
            .collect();
        json!({
            "root": graph.graph().root().canonical(),
            "branch": self.head.branch,
            "head": commit_json(&self.head),
            "tables": tables,
            "indexes": self.coverage,
            "adjacency": self.adjacency,
        })
    }
}

/// A commit as the CLI prints it.
#[derive(Serialize)]
pub struct CommitView<'a> {
    seq: u64,
    commit_id: &'a str,
    parent_commit_id: Option<&'a str>,
    branch: &'a str,
    created_at: i64,
    /// `created_at` in RFC 3339 (UTC), for people and for tools that want text.
    created_at_text: String,
    actor: &'a str,
    operation: OperationView<'a>,
    schema: &'a str,
    pins: Vec<PinView<'a>>,
    /// Where the branch's life began, when it was created from another branch.
    fork: Option<ForkView<'a>>,
    /// Whether this commit deleted its branch.
    deleted: bool,
    /// The keys of the requests it answers, when served writes gave them.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    idempotency_keys: &'a [String],
}

#[derive(Serialize)]
struct ForkView<'a> {
    branch: &'a str,
    seq: u64,
    commit_id: &'a str,
    created_at: i64,
}

impl<'a> ForkView<'a> {
    fn of(fork: &'a ForkPoint) -> ForkView<'a> {
        ForkView {
            branch: &fork.branch,
            seq: fork.seq,
            commit_id: &fork.commit_id,
            created_at: fork.created_at,
        }
    }
}

/// A live branch as `branch list` prints it.
#[derive(Serialize)]
pub struct BranchView<'a> {
    name: &'a str,
    head_seq: u64,
    head_commit_id: &'a str,
    head_created_at: i64,
    fork: Option<ForkView<'a>>,
    created_at: i64,
    created_at_text: String,
}

impl<'a> BranchView<'a> {
    pub fn of(branch: &'a BranchInfo) -> BranchView<'a> {
        BranchView {
            name: &branch.name,
            head_seq: branch.head_seq,
            head_commit_id: &branch.head_commit_id,
            head_created_at: branch.head_created_at,
            fork: branch.fork.as_ref().map(ForkView::of),
            created_at: branch.created_at,
            created_at_text: rfc3339_micros(branch.created_at),
        }
    }
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
    pub fn of(commit: &'a GraphCommit) -> CommitView<'a> {
        CommitView {
            seq: commit.seq,
            commit_id: &commit.commit_id,
            parent_commit_id: commit.parent_commit_id.as_deref(),
            branch: &commit.branch,
            created_at: commit.created_at,
            created_at_text: rfc3339_micros(commit.created_at),
            actor: &commit.actor,
            operation: OperationView {
                kind: &commit.operation.kind,
                summary: &commit.operation.summary,
            },
            schema: &commit.schema,
            pins: commit.pins.iter().map(PinView::of).collect(),
            fork: commit.fork.as_ref().map(ForkView::of),
            deleted: commit.deleted,
            idempotency_keys: &commit.idempotency_keys,
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

/// Microseconds since the Unix epoch as RFC 3339 in UTC, to the microsecond
/// (`2026-11-30T21:05:07.003211Z`).
pub fn rfc3339_micros(micros: i64) -> String {
    let seconds = micros.div_euclid(1_000_000);
    let fraction = micros.rem_euclid(1_000_000);
    let days = seconds.div_euclid(86_400);
    let in_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{fraction:06}Z",
        in_day / 3_600,
        in_day % 3_600 / 60,
        in_day % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::rfc3339_micros;

    #[test]
    fn times_print_in_rfc3339() {
        assert_eq!(rfc3339_micros(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            rfc3339_micros(951_782_400_000_001),
            "2000-02-29T00:00:00.000001Z"
        );
        assert_eq!(
            rfc3339_micros(1_796_069_907_003_211),
            "2026-11-30T20:18:27.003211Z"
        );
        assert_eq!(rfc3339_micros(-1), "1969-12-31T23:59:59.999999Z");
    }
}
