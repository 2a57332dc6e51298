//! Cleanup as a tracing collector (`docs/format.md` §8): storage stops growing without bound.
//!
//! **Mark** reads every branch's log from the oldest commit its head says is retained to
//! the head, decides which commits the [`CleanupPolicy`] retains, lists each table's
//! folder and marks every file the manifests of their pins reference (with the table's
//! linear manifests and manifests younger than the grace period, which hold all staging
//! that can still publish). **Record**: before anything is deleted, a commit on each
//! branch records the grace period and the oldest retained commit
//! ([`omnigraph_publish::retention`]), so readers of reclaimed commits get a typed
//! error, and it fences writers: one that publishes after it checked its staging against
//! it. **Sweep** deletes what is unmarked and older than the grace period, once the
//! heads, read again, hold still; a head that moved is traced again.
//!
//! Deletes run [`DELETES_IN_FLIGHT_MAX`] at a time, manifests before the files they
//! reference. One table's failure is an error row; the others go on. A cancel stops
//! before the next deletion; deletions in progress finish.

mod commits;
mod sweep;
mod trace;

pub use commits::LogCleanup;

pub(crate) use sweep::list_table;
pub(crate) use trace::{Trace as Traced, heads};

/// Traces every commit from the oldest each head records retained to the head, all of
/// them retained (for the read-only repair report).
pub(crate) async fn trace_every_readable_commit(
    root: &Arc<StorageRoot>,
    heads: &BTreeMap<String, omnigraph_publish::GraphCommit>,
) -> Result<Traced> {
    trace::trace_readable(root, heads, seams::now_micros()).await
}

use crate::budget::REQUEST_FAN_OUT;
use crate::lane::{CancelToken, cancelled};
use crate::limits::{DELETES_IN_FLIGHT_MAX, RETRACE_MAX, TABLES_MAX};
use crate::progress::{self, MaintenanceProgress, ProgressItems, ProgressSink, ProgressStage};
use futures::StreamExt;
use omnigraph_core::storage::StorageRoot;
use omnigraph_core::{ErrorKind, Evidence, InputLocation, OmniError, Result, adapter, seams};
use omnigraph_publish::branches::branch_names;
use omnigraph_publish::limits::GRACE_MIN;
use omnigraph_publish::retention::{self, GRACE_DEFAULT, micros_of};
use omnigraph_publish::{Change, CommitOperation, Publication, layout};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use sweep::{TableObject, TablePlan};

/// Which commits stay readable. At least one part is required; a commit either part
/// retains is retained. Each branch's head, and every commit younger than the grace
/// period, is always retained.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// The newest N commits of each branch.
    pub keep_commits: Option<u64>,
    /// Commits younger than this.
    pub older_than: Option<Duration>,
}

impl CleanupPolicy {
    /// Keep the newest `n` commits of each branch (`n` ≥ 1).
    pub fn keep_commits(n: u64) -> Result<CleanupPolicy> {
        CleanupPolicy::default().and_keep_commits(n)
    }

    /// Keep the commits younger than `age`.
    pub fn older_than(age: Duration) -> CleanupPolicy {
        CleanupPolicy {
            older_than: Some(age),
            ..CleanupPolicy::default()
        }
    }

    /// This policy, also keeping the newest `n` commits.
    pub fn and_keep_commits(mut self, n: u64) -> Result<CleanupPolicy> {
        if n == 0 {
            return Err(OmniError::bad_input(
                InputLocation::in_source("cleanup policy").field("keep"),
                "keep must be at least 1: each branch head is always kept",
            ));
        }
        self.keep_commits = Some(n);
        Ok(self)
    }

    fn check(&self) -> Result<()> {
        if self.keep_commits.is_none() && self.older_than.is_none() {
            return Err(OmniError::bad_input(
                InputLocation::in_source("cleanup policy"),
                "give keep_commits(N), older_than(duration) or both",
            ));
        }
        Ok(())
    }
}

/// A cleanup run's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CleanupOptions {
    /// What stays readable.
    pub policy: CleanupPolicy,
    /// Commits and files younger than this are kept. A longer grace period a branch
    /// head records (an earlier run's) is used instead, unless `lower_grace`.
    pub grace: Duration,
    /// Record `grace` even when it is shorter than the recorded one, and plan with it:
    /// only while no cleanup with a longer grace period runs on the root.
    pub lower_grace: bool,
}

/// A cleanup as an operator asks for it (the CLI's flags, the server's body): checked
/// into [`CleanupOptions`] by [`CleanupSettings::options`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanupSettings {
    /// Keep the newest N commits of each branch readable.
    pub keep: Option<u64>,
    /// Keep commits younger than this readable.
    pub older_than: Option<Duration>,
    /// Keep every commit and file younger than this (the default when `None`).
    pub grace: Option<Duration>,
    /// Record `grace` even when a branch head records a longer one.
    pub lower_grace: bool,
}

impl CleanupSettings {
    /// The options these settings ask for; a policy or grace out of bounds is refused.
    pub fn options(&self) -> Result<CleanupOptions> {
        let mut policy = CleanupPolicy::default();
        if let Some(keep) = self.keep {
            policy = policy.and_keep_commits(keep)?;
        }
        policy.older_than = self.older_than;
        let mut options = CleanupOptions::new(policy);
        if let Some(grace) = self.grace {
            options = options.with_grace(grace)?;
        }
        if self.lower_grace {
            options = options.lowering_grace();
        }
        Ok(options)
    }
}

impl CleanupOptions {
    /// `policy` with the default grace period (24 hours).
    pub fn new(policy: CleanupPolicy) -> CleanupOptions {
        CleanupOptions {
            policy,
            grace: GRACE_DEFAULT,
            lower_grace: false,
        }
    }

    /// The same, recording its grace period even when a branch head records a longer
    /// one (see [`CleanupOptions::lower_grace`]).
    pub fn lowering_grace(mut self) -> CleanupOptions {
        self.lower_grace = true;
        self
    }

    /// The same with another grace period; one below [`GRACE_MIN`] is refused.
    pub fn with_grace(mut self, grace: Duration) -> Result<CleanupOptions> {
        if grace < GRACE_MIN {
            return Err(OmniError::bad_input(
                InputLocation::in_source("cleanup options").field("grace"),
                format!(
                    "the grace period is {} s; the floor is {} s",
                    grace.as_secs(),
                    GRACE_MIN.as_secs()
                ),
            ));
        }
        self.grace = grace;
        Ok(self)
    }
}

/// A table's failure in a run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CleanupTableError {
    /// The error's stable code.
    pub code: String,
    /// The error's process exit code.
    pub exit_code: i32,
    /// The message.
    pub message: String,
}

/// What a run did (or, previewed, would do) to one table.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TableCleanup {
    /// The table id.
    pub table_id: String,
    /// The type a retained commit pins it for; `None` when no retained commit pins it.
    pub type_name: Option<String>,
    /// Unretained manifests removed (published versions and dead staging).
    pub manifests_removed: u64,
    /// Other files removed (data, deletion, index and transaction files).
    pub files_removed: u64,
    /// Bytes removed, manifests included.
    pub bytes_removed: u64,
    /// Dead staging among the manifests removed.
    pub unpublished_manifests: u64,
    /// Bytes of dead staging: its manifests and the files only they referenced.
    pub unpublished_bytes: u64,
    /// Versions on the table's linear lineage above its creation (see repair).
    pub foreign_versions: u64,
    /// Why the table was not swept completely.
    pub error: Option<CleanupTableError>,
}

/// Sums over every table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CleanupTotals {
    /// Manifests removed.
    pub manifests_removed: u64,
    /// Files removed.
    pub files_removed: u64,
    /// Bytes removed.
    pub bytes_removed: u64,
    /// Dead staging manifests removed.
    pub unpublished_manifests: u64,
    /// Dead staging bytes removed.
    pub unpublished_bytes: u64,
    /// Tables with an error row.
    pub tables_failed: u64,
    /// Commit objects removed below the branches' floors.
    pub commits_removed: u64,
    /// Branches whose log row holds an error.
    pub logs_failed: u64,
}

/// What a cleanup run did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CleanupReport {
    /// Whether it deleted (`false`: a preview of what it would delete).
    pub deleted: bool,
    /// The grace period, in seconds.
    pub grace_secs: u64,
    /// Per branch, the oldest commit that stays readable.
    pub oldest_retained: BTreeMap<String, u64>,
    /// The retention records the run published, one commit per branch whose record
    /// changed (`retention:<branch>`); a preview publishes none.
    pub recorded: Vec<String>,
    /// One row per table folder, by table id.
    pub tables: Vec<TableCleanup>,
    /// One row per branch whose log the run reclaimed commits of (`docs/format.md`
    /// §8.4); a preview reclaims none.
    pub logs: Vec<LogCleanup>,
    /// Sums over the tables and logs.
    pub totals: CleanupTotals,
    /// How long the run took, in milliseconds.
    pub elapsed_ms: u64,
    /// What the run left behind: `partly_published` with its records once it
    /// published one, else `unpublished` once anything was deleted.
    pub evidence: Evidence,
}

impl CleanupReport {
    /// The row of a table.
    pub fn table(&self, table_id: &str) -> Option<&TableCleanup> {
        self.tables.iter().find(|table| table.table_id == table_id)
    }

    /// The process exit status: 0 unless a table or a log failed, then that failure's.
    pub fn exit_code(&self) -> i32 {
        self.tables
            .iter()
            .filter_map(|table| table.error.as_ref())
            .chain(self.logs.iter().filter_map(|log| log.error.as_ref()))
            .map(|error| error.exit_code)
            .find(|code| *code != omnigraph_core::EXIT_SUCCESS)
            .unwrap_or(omnigraph_core::EXIT_SUCCESS)
    }
}

/// Previews a run: what it would delete, with nothing recorded or deleted.
pub(crate) async fn preview(
    root: &Arc<StorageRoot>,
    options: &CleanupOptions,
    token: &CancelToken,
    progress: Option<&ProgressSink>,
) -> Result<CleanupReport> {
    let started = Instant::now();
    let mut logs = trace_logs(root, options, token).await?;
    let mut rows = plan_until(root, &logs, token, progress).await?;
    retrace(root, &mut logs, &mut rows, token, Grace::Own).await?;
    Ok(Planned::of(&logs, rows).preview_report(started, Vec::new()))
}

/// [`plan`], dropped where it stands on a cancel (it only lists and reads), which ends
/// the run before any effect.
async fn plan_until(
    root: &Arc<StorageRoot>,
    logs: &Logs,
    token: &CancelToken,
    progress: Option<&ProgressSink>,
) -> Result<Vec<(TableCleanup, TablePlan)>> {
    tokio::select! {
        rows = plan(root, logs, progress) => rows,
        () = token.cancelled() => Err(cancelled(Evidence::BeforeEffect)),
    }
}

/// Runs cleanup: plans, publishes its record, plans again what moved, then deletes.
pub(crate) async fn run(
    root: &Arc<StorageRoot>,
    options: &CleanupOptions,
    actor: &str,
    token: &CancelToken,
    progress: Option<&ProgressSink>,
) -> Result<CleanupReport> {
    let started = Instant::now();
    let mut logs = trace_logs(root, options, token).await?;
    let mut rows = plan_until(root, &logs, token, progress).await?;
    // The record is also the fence: a writer whose commit lands after it checked its
    // staging against it, and one whose commit landed before it is traced below. So
    // nothing the plan judged old can still be published once the record is in. A plan
    // that deletes nothing stays so when traced again (that only adds roots), so such
    // a run needs neither a fence nor the trace after it. Reclaiming commit objects is
    // deleting too (`commits::floors_move`).
    let deletes = rows.iter().any(|(row, plan)| {
        row.error.is_none() && !(plan.manifests.is_empty() && plan.files.is_empty())
    }) || commits::floors_move(root, &logs.heads, &logs.traced).await;
    let recorded = record(root, &mut logs, options, actor, deletes, token).await?;
    let after_record = |error: OmniError| after_recording(error, &recorded);
    if deletes {
        retrace(root, &mut logs, &mut rows, token, Grace::LargestRecorded)
            .await
            .map_err(after_record)?;
    }
    let mut planned = Planned::of(&logs, rows);
    let cutoff = logs.grace_cutoff();
    delete_planned(root, &mut planned, &logs.traced, cutoff, token, progress).await;
    // Then the commit objects below each branch's floor, after their history (and the
    // leftovers of a run that stopped between the two). Floors move only behind the
    // fence; leftovers below a recorded floor go in any run.
    if !token.is_cancelled() {
        planned.logs = match deletes {
            true => commits::reclaim(root, &logs.heads, &logs.traced, token).await,
            false => commits::delete_leftovers(root, &logs.heads, token).await,
        };
    }
    if token.is_cancelled() {
        // Older commits read as reclaimed once the record landed, whether or not their
        // files went yet. Without a record the run planned no deletion: nothing changed.
        return Err(after_record(cancelled(Evidence::BeforeEffect)));
    }
    Ok(planned.run_report(started, recorded))
}

/// The logs as traced, and what the run judges old.
struct Logs {
    branch_names: Vec<String>,
    heads: BTreeMap<String, omnigraph_publish::GraphCommit>,
    traced: trace::Trace,
    /// When the run began: taken before its record, so a writer's staging older than
    /// the cutoff began more than a grace period before any check against the record.
    began_micros: i64,
    /// The grace the plans use: the run's own, or a larger one a head records.
    grace: Duration,
}

impl Logs {
    /// Files and manifests written before this are old enough to go (when unmarked).
    fn grace_cutoff(&self) -> i64 {
        self.began_micros.saturating_sub(micros_of(self.grace))
    }
}

/// Reads every branch's head and log, and decides which commits the policy retains.
async fn trace_logs(
    root: &Arc<StorageRoot>,
    options: &CleanupOptions,
    token: &CancelToken,
) -> Result<Logs> {
    options.policy.check()?;
    let began_micros = seams::now_micros();
    let branch_names = branch_names(root).await?;
    let heads = heads(root, &branch_names).await?;
    // A longer grace period recorded by an earlier run stays in force: writers may be
    // checking their staging against it.
    let grace = match options.lower_grace {
        true => options.grace,
        false => options.grace.max(largest_recorded_grace(&heads)),
    };
    let traced = trace::trace(root, &heads, &options.policy, grace, began_micros).await?;
    if token.is_cancelled() {
        return Err(cancelled(Evidence::BeforeEffect));
    }
    Ok(Logs {
        branch_names,
        heads,
        traced,
        began_micros,
        grace,
    })
}

/// The longest grace period a live branch's head records (zero when none does): a
/// deleted branch's protects no writer, since none publishes there.
fn largest_recorded_grace(heads: &BTreeMap<String, omnigraph_publish::GraphCommit>) -> Duration {
    heads
        .values()
        .filter(|head| !head.deleted)
        .filter_map(|head| head.retention.map(|retention| retention.grace()))
        .max()
        .unwrap_or_default()
}

impl Logs {
    /// Takes a larger grace a head records after this run's own record (another run's
    /// raise): writers that follow it check their staging against it, so this run must
    /// not judge younger staging old. Before the record there is no need: a writer that
    /// checked against an earlier record either published before this run's record, and
    /// is traced, or lost `n+1` to it and checks again. Whether it changed.
    fn adopt_recorded_grace(&mut self) -> bool {
        let recorded = largest_recorded_grace(&self.heads);
        if recorded > self.grace {
            self.grace = recorded;
            return true;
        }
        false
    }
}

/// `error`, after the records `recorded` landed: with them as `PartlyPublished`
/// evidence (older commits read as reclaimed from then on), or as it is when none did.
fn after_recording(error: OmniError, recorded: &[String]) -> OmniError {
    if recorded.is_empty() {
        return error;
    }
    error.with_evidence(Evidence::PartlyPublished {
        published_units: recorded.to_vec(),
    })
}

/// Publishes, on each branch whose record changes (on every branch when the run will
/// delete: the record fences writers), a commit that pins what its head pins and
/// records the grace period and the oldest retained commit. Returns the units
/// published (`retention:<branch>`).
async fn record(
    root: &Arc<StorageRoot>,
    logs: &mut Logs,
    options: &CleanupOptions,
    actor: &str,
    fence: bool,
    token: &CancelToken,
) -> Result<Vec<String>> {
    let mut recorded = Vec::new();
    for (branch, head) in logs.heads.iter_mut() {
        if head.deleted {
            // Its last commit retains only itself and fences every writer already.
            continue;
        }
        // The cancel point before each publication.
        if token.is_cancelled() {
            return Err(after_recording(
                cancelled(Evidence::BeforeEffect),
                &recorded,
            ));
        }
        let oldest = logs.traced.oldest_retained[branch];
        let change = Change::Retention {
            record: retention::record(logs.grace, oldest),
            lowers_grace: options.lower_grace,
        };
        // What the commit would record, as the publisher derives it from the head's.
        let retention = change
            .retention_on(head)
            .expect("a change that records a retention carries one");
        if head.retention == Some(retention) && !fence {
            continue;
        }
        let publication = Publication::record(
            head.clone(),
            change,
            None,
            CommitOperation {
                kind: retention::RECORD_OPERATION.to_string(),
                summary: format!(
                    "retains commits from {}; grace {} s",
                    retention.oldest_retained,
                    retention.grace().as_secs()
                ),
            },
            actor,
        );
        let published = omnigraph_publish::publish(root, &publication).await;
        if let Err(error) = &published
            && error.kind() == ErrorKind::NotFound
            && life_ended(root, head).await?
        {
            // Deleted (and maybe created again) since the trace: its last commit
            // retains only itself, and a new life is traced as a new root.
            continue;
        }
        let landed = published.map_err(|error| after_recording(error, &recorded))?;
        // What the log now says (another run may have recorded a newer one), as the
        // report gives it. The retrace that follows reads from the traced head on, so
        // the commits others published before the record join the roots.
        if let Some(landed) = landed.retention {
            logs.traced
                .oldest_retained
                .insert(branch.clone(), landed.oldest_retained);
        }
        recorded.push(retention_unit(branch));
    }
    Ok(recorded)
}

/// Whether the life of `head`'s branch ended after `head`: the branch's newest commit
/// deleted it, or belongs to a life created since.
async fn life_ended(
    root: &Arc<StorageRoot>,
    head: &omnigraph_publish::GraphCommit,
) -> Result<bool> {
    let newest = omnigraph_publish::CommitLog::new(root.clone(), &head.branch)?
        .newest()
        .await?;
    Ok(newest.is_none_or(|newest| !newest.continues_life_of(head)))
}

/// The unit name of a branch's retention record in evidence and reports.
pub fn retention_unit(branch: &str) -> String {
    format!("retention:{branch}")
}

/// Every table's plan, traced on heads that did not move while planning.
struct Planned {
    oldest_retained: BTreeMap<String, u64>,
    tables: Vec<(TableCleanup, TablePlan)>,
    /// The grace period the plans used.
    grace: Duration,
    /// What the run did to each branch's log.
    logs: Vec<LogCleanup>,
}

impl Planned {
    fn of(logs: &Logs, tables: Vec<(TableCleanup, TablePlan)>) -> Planned {
        Planned {
            oldest_retained: logs.traced.oldest_retained.clone(),
            tables,
            grace: logs.grace,
            logs: Vec::new(),
        }
    }

    /// What a preview would remove: the plans' own figures.
    fn preview_report(mut self, started: Instant, recorded: Vec<String>) -> CleanupReport {
        for (row, plan) in &mut self.tables {
            row.manifests_removed = plan.manifests.len() as u64;
            row.files_removed = plan.files.len() as u64;
            row.bytes_removed = plan
                .manifests
                .iter()
                .chain(&plan.files)
                .map(|object| object.size)
                .sum();
        }
        self.report(started, recorded)
    }

    /// What a run removed: the rows counted each deletion that succeeded.
    fn run_report(self, started: Instant, recorded: Vec<String>) -> CleanupReport {
        let mut report = self.report(started, recorded);
        report.deleted = true;
        if !report.recorded.is_empty() {
            report.evidence = Evidence::PartlyPublished {
                published_units: report.recorded.clone(),
            };
        } else if report.totals.manifests_removed + report.totals.files_removed > 0 {
            report.evidence = Evidence::Unpublished;
        }
        report
    }

    /// The report of the plans as they stand; nothing deleted yet.
    fn report(self, started: Instant, recorded: Vec<String>) -> CleanupReport {
        let mut totals = CleanupTotals::default();
        let mut tables = Vec::with_capacity(self.tables.len());
        for (mut row, plan) in self.tables {
            row.unpublished_manifests = plan.unpublished_manifests;
            row.unpublished_bytes = plan.unpublished_bytes;
            row.foreign_versions = plan.foreign_versions;
            totals.manifests_removed += row.manifests_removed;
            totals.files_removed += row.files_removed;
            totals.bytes_removed += row.bytes_removed;
            totals.unpublished_manifests += row.unpublished_manifests;
            totals.unpublished_bytes += row.unpublished_bytes;
            totals.tables_failed += u64::from(row.error.is_some());
            tables.push(row);
        }
        for log in &self.logs {
            totals.commits_removed += log.commits_removed;
            totals.logs_failed += u64::from(log.error.is_some());
        }
        CleanupReport {
            deleted: false,
            grace_secs: self.grace.as_secs(),
            oldest_retained: self.oldest_retained,
            recorded,
            tables,
            logs: self.logs,
            totals,
            elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            evidence: Evidence::BeforeEffect,
        }
    }
}

/// Lists and plans every table on the logs as traced.
async fn plan(
    root: &Arc<StorageRoot>,
    logs: &Logs,
    progress: Option<&ProgressSink>,
) -> Result<Vec<(TableCleanup, TablePlan)>> {
    let table_ids = table_ids(root).await?;
    let grace_cutoff = logs.grace_cutoff();
    let planning = Tally::new(table_ids.len() as u64);
    planning.report(progress, ProgressStage::Planning);
    Ok(futures::stream::iter(table_ids)
        .map(|table_id| {
            let (traced, planning) = (&logs.traced, &planning);
            async move {
                let planned = plan_one(root, table_id, traced, grace_cutoff).await;
                planning.table_done(1);
                planning.report(progress, ProgressStage::Planning);
                planned
            }
        })
        .buffered(REQUEST_FAN_OUT)
        .collect()
        .await)
}

/// Which grace period a retrace plans with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grace {
    /// The run's own (before its record).
    Own,
    /// The largest a head records, if larger than the run's own (after its record).
    LargestRecorded,
}

/// Reads the heads again, before anything is deleted, until they hold still. The
/// commits they added join the roots, and a table one of them pins at a new version is
/// planned again (a writer may have re-committed staged files the listing never saw).
/// After the run's record, a larger grace recorded meanwhile (another cleanup's) is
/// adopted, and every table is planned again with it. Under a steady stream of writes
/// the heads may still move after the last read; those commits can only pin versions
/// staged after the run's record, whose manifests are younger than the grace period.
async fn retrace(
    root: &Arc<StorageRoot>,
    logs: &mut Logs,
    rows: &mut [(TableCleanup, TablePlan)],
    token: &CancelToken,
    grace: Grace,
) -> Result<()> {
    for _ in 0..RETRACE_MAX {
        if token.is_cancelled() {
            return Err(cancelled(Evidence::BeforeEffect));
        }
        // A branch created since the last read is a new root.
        logs.branch_names = branch_names(root).await?;
        let again = heads(root, &logs.branch_names).await?;
        let newly_pinned = trace::extend(root, &mut logs.traced, &again).await?;
        logs.heads = again;
        let larger_grace = grace == Grace::LargestRecorded && logs.adopt_recorded_grace();
        if newly_pinned.is_empty() && !larger_grace {
            break;
        }
        let grace_cutoff = logs.grace_cutoff();
        for (row, plan) in rows.iter_mut() {
            let moved = newly_pinned
                .iter()
                .any(|(table_id, _)| *table_id == row.table_id);
            if larger_grace || moved {
                (*row, *plan) =
                    plan_one(root, row.table_id.clone(), &logs.traced, grace_cutoff).await;
            }
        }
    }
    Ok(())
}

async fn plan_one(
    root: &StorageRoot,
    table_id: String,
    traced: &trace::Trace,
    grace_cutoff: i64,
) -> (TableCleanup, TablePlan) {
    let mut row = TableCleanup {
        table_id: table_id.clone(),
        type_name: traced
            .is_retained_table(&table_id)
            .then(|| traced.type_names.get(&table_id).cloned())
            .flatten(),
        ..TableCleanup::default()
    };
    let plan = match sweep::plan_table(root, &table_id, traced, grace_cutoff).await {
        Ok(plan) => plan,
        Err(error) => {
            row.error = Some(table_error(&error));
            TablePlan::default()
        }
    };
    (row, plan)
}

/// The table folders under `tables/`, checked: each becomes part of a path.
async fn table_ids(root: &StorageRoot) -> Result<Vec<String>> {
    let ids = root.list_folders("tables").await?;
    if ids.len() > TABLES_MAX {
        return Err(OmniError::corrupt(
            "tables",
            format!("{} table folders; the limit is {TABLES_MAX}", ids.len()),
        ));
    }
    for id in &ids {
        layout::check_table_id(id)
            .map_err(|message| OmniError::corrupt(format!("tables/{id}"), message))?;
    }
    assert!(ids.len() <= TABLES_MAX && ids.iter().all(|id| layout::check_table_id(id).is_ok()));
    Ok(ids)
}

fn table_error(error: &OmniError) -> CleanupTableError {
    CleanupTableError {
        code: error.code().code.to_string(),
        exit_code: error.code().exit_code,
        message: error.to_string(),
    }
}

/// Deletes every plan, manifests first, each object once [`sweep::assert_deletable`]
/// holds under the run's latest `trace` and `grace_cutoff`.
async fn delete_planned(
    root: &Arc<StorageRoot>,
    planned: &mut Planned,
    trace: &trace::Trace,
    grace_cutoff: i64,
    token: &CancelToken,
    progress: Option<&ProgressSink>,
) {
    let objects_of = |(row, plan): &(TableCleanup, TablePlan)| {
        if row.error.is_some() {
            0
        } else {
            (plan.manifests.len() + plan.files.len()) as u64
        }
    };
    let remaining: Vec<AtomicU64> = planned
        .tables
        .iter()
        .map(|table| AtomicU64::new(objects_of(table)))
        .collect();
    let with_work = remaining
        .iter()
        .filter(|left| left.load(Ordering::Relaxed) > 0)
        .count() as u64;
    let deleting = Tally::new(with_work);
    deleting.add_total(planned.tables.iter().map(objects_of).sum());
    deleting.report(progress, ProgressStage::Working);
    for manifests_first in [true, false] {
        let mut work: Vec<(usize, bool, TableObject)> = Vec::new();
        for (index, (row, plan)) in planned.tables.iter().enumerate() {
            if row.error.is_some() {
                continue;
            }
            let objects = if manifests_first {
                &plan.manifests
            } else {
                &plan.files
            };
            for object in objects {
                sweep::assert_deletable(trace, grace_cutoff, &row.table_id, object);
                work.push((index, manifests_first, object.clone()));
            }
        }
        let outcomes: Vec<(usize, bool, TableObject, Option<Result<()>>)> =
            futures::stream::iter(work)
                .map(|(index, is_manifest, object)| {
                    let table = layout::table_path(&planned.tables[index].0.table_id);
                    let (deleting, remaining) = (&deleting, &remaining);
                    async move {
                        // A cancel stops before the next deletion; one in progress
                        // finishes.
                        if token.is_cancelled() {
                            return (index, is_manifest, object, None);
                        }
                        let outcome =
                            adapter::delete_table_object(root, &table, &object.object).await;
                        deleting.item_done();
                        if remaining[index].fetch_sub(1, Ordering::Relaxed) == 1 {
                            deleting.table_done(1);
                        }
                        deleting.report(progress, ProgressStage::Working);
                        (index, is_manifest, object, Some(outcome))
                    }
                })
                .buffer_unordered(DELETES_IN_FLIGHT_MAX)
                .collect()
                .await;
        for (index, is_manifest, object, outcome) in outcomes {
            let row = &mut planned.tables[index].0;
            match outcome {
                Some(Ok(())) => {
                    if is_manifest {
                        row.manifests_removed += 1;
                    } else {
                        row.files_removed += 1;
                    }
                    row.bytes_removed += object.size;
                }
                // The first failure names the table's error.
                Some(Err(error)) if row.error.is_none() => {
                    row.error = Some(table_error(&error.with_evidence(Evidence::Unpublished)));
                }
                Some(Err(_)) | None => {}
            }
        }
    }
}

/// Counts for cleanup's progress reports, shared by its concurrent tasks.
struct Tally {
    tables_total: u64,
    tables_done: AtomicU64,
    total: AtomicU64,
    done: AtomicU64,
}

impl Tally {
    fn new(tables_total: u64) -> Tally {
        Tally {
            tables_total,
            tables_done: AtomicU64::new(0),
            total: AtomicU64::new(0),
            done: AtomicU64::new(0),
        }
    }

    fn add_total(&self, items: u64) {
        self.total.fetch_add(items, Ordering::Relaxed);
    }

    fn item_done(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    fn table_done(&self, tables: u64) {
        self.tables_done.fetch_add(tables, Ordering::Relaxed);
    }

    /// Planning counts tables; deleting counts objects.
    fn report(&self, sink: Option<&ProgressSink>, stage: ProgressStage) {
        let tables_done = self.tables_done.load(Ordering::Relaxed);
        let (done, total, items) = match stage {
            ProgressStage::Planning => (tables_done, self.tables_total, ProgressItems::Tables),
            ProgressStage::Working => (
                self.done.load(Ordering::Relaxed),
                self.total.load(Ordering::Relaxed),
                ProgressItems::Files,
            ),
        };
        progress::report(
            sink,
            MaintenanceProgress {
                operation: "cleanup",
                stage,
                tables_done,
                tables_total: self.tables_total,
                done,
                total,
                items,
            },
        );
    }
}
