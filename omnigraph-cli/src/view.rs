//! The `--json` view of engine types that are also storage formats. The commit object is
//! stored (`docs/format.md`); the CLI's output has its own shape, pinned by the JSON
//! shape golden (`tests/golden/json_shapes.txt`), so neither changes the other silently.

use omnigraph_publish::{BranchInfo, ForkPoint, GraphCommit, TableKind, TablePin};
use serde::Serialize;

/// A commit as the CLI prints it.
#[derive(Serialize)]
pub(crate) struct CommitView<'a> {
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
pub(crate) struct BranchView<'a> {
    name: &'a str,
    head_seq: u64,
    head_commit_id: &'a str,
    head_created_at: i64,
    fork: Option<ForkView<'a>>,
    created_at: i64,
    created_at_text: String,
}

impl<'a> BranchView<'a> {
    pub(crate) fn of(branch: &'a BranchInfo) -> BranchView<'a> {
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
    pub(crate) fn of(commit: &'a GraphCommit) -> CommitView<'a> {
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
pub(crate) fn rfc3339_micros(micros: i64) -> String {
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
