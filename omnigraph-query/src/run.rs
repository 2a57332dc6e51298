//! Running a query: the commit it reads, its tables opened at the versions that commit
//! pins, its parameters typed from JSON, planned in the process's one DataFusion
//! session and run in a task with a memory pool of the query's budget. Rows stream as
//! Arrow record batches.

use crate::check::{Mode, check};
use crate::exec::expand::ExpandExec;
use crate::exec::parameter_scan::{Bound, ParameterScanExec, Unbound};
use crate::limits::{EXPAND_LOOKUP_KEYS_MAX, QUERY_MEMORY_BYTES_DEFAULT, QUERY_PARAMETERS_MAX};
use crate::plan::{Adjacencies, Binding, Tables, compile, walked_edge_types};
use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::{SessionState, SessionStateBuilder, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::extract_leaf_expressions::{
    ExtractLeafExpressions, PushDownLeafProjections,
};
use datafusion::optimizer::simplify_expressions::SimplifyExpressions;
use datafusion::optimizer::{Optimizer, OptimizerRule};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::display::DisplayableExecutionPlan;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, displayable, execute_stream};
use datafusion::prelude::SessionConfig;
use futures::stream::{BoxStream, StreamExt};
use omnigraph_core::storage::StorageRoot;
use omnigraph_core::{InputLocation, OmniError, QueryFailure, Result, StorageKind};
use omnigraph_graph::Omnigraph;
use omnigraph_publish::{CommitRef, GraphCommit};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How to run a query: the commit it reads, its parameters, its memory budget.
#[derive(Clone, Debug)]
pub struct QueryOptions {
    at: CommitRef,
    parameters: BTreeMap<String, Value>,
    memory_bytes: usize,
}

impl Default for QueryOptions {
    fn default() -> Self {
        QueryOptions {
            at: CommitRef::Head,
            parameters: BTreeMap::new(),
            memory_bytes: QUERY_MEMORY_BYTES_DEFAULT,
        }
    }
}

impl QueryOptions {
    /// At the branch head, without parameters, with the default memory budget.
    pub fn new() -> QueryOptions {
        QueryOptions::default()
    }

    /// Reads the commit `at` of the handle's branch instead of its head.
    pub fn at(mut self, at: CommitRef) -> QueryOptions {
        self.at = at;
        self
    }

    /// Gives `$name` the value `value` (a JSON null, boolean, number, string or list of
    /// them).
    pub fn parameter(mut self, name: impl Into<String>, value: Value) -> QueryOptions {
        self.parameters.insert(name.into(), value);
        self
    }

    /// The most memory the query's operators may hold at once; past it a sort or an
    /// aggregate spills to disk, and a join fails with
    /// [`OmniError::QueryFailed`] (`over_budget`).
    pub fn memory_bytes(mut self, bytes: usize) -> QueryOptions {
        self.memory_bytes = bytes;
        self
    }
}

/// A running query: its columns, the commit it reads, and its rows as a stream.
pub struct QueryRows {
    mode: Mode,
    schema: SchemaRef,
    seq: u64,
    commit_id: String,
    planning: Duration,
    plan_reused: bool,
    physical_plan_reused: bool,
    key_scan_reused: bool,
    key_row_taken: bool,
    stream: BoxStream<'static, Result<RecordBatch>>,
}

impl std::fmt::Debug for QueryRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryRows")
            .field("schema", &self.schema)
            .field("seq", &self.seq)
            .field("commit_id", &self.commit_id)
            .finish_non_exhaustive()
    }
}

impl QueryRows {
    /// Whether the rows are the query's (`Mode::Run`) or its plan (`EXPLAIN`,
    /// `PROFILE`: one `plan` column).
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The columns of every batch.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The seq of the commit the query reads.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The id of the commit the query reads.
    pub fn commit_id(&self) -> &str {
        &self.commit_id
    }

    /// How long checking and planning took (before the first row was read).
    pub fn planning(&self) -> Duration {
        self.planning
    }

    /// Whether the query ran a plan prepared by an earlier run of the same text, at the
    /// same commit, with parameters of the same types (checked, compiled and optimized
    /// once; its parameters bound to this run's values).
    pub fn plan_reused(&self) -> bool {
        self.plan_reused
    }

    /// Whether the run reused the physical plan too, made once for every value of its
    /// parameters: its scan's filters planned by Lance with this run's values, and
    /// nothing else planned again. A plan that scans one node table with a parameter in
    /// the scan's filters, under operators that keep no state between runs (no join,
    /// aggregate or sort), run as rows (not `EXPLAIN` or `PROFILE`); `docs/query.md`.
    pub fn physical_plan_reused(&self) -> bool {
        self.physical_plan_reused
    }

    /// Whether the run's scan, a key's equality that Lance answers from the key's index
    /// (`id = $id`), was Lance's plan of an earlier run with this run's value put in:
    /// its scan not planned by Lance again either. Only a run that reused the physical
    /// plan can; `docs/query.md`.
    pub fn key_scan_reused(&self) -> bool {
        self.key_scan_reused
    }

    /// Whether the run's scan, a node key's equality to a value (`id = $id`), read the
    /// key's row from the place the handle's key cache holds for it, with Lance's take
    /// of that one row, and neither the key's index nor Lance's filtered read. Only a
    /// run that reused the physical plan can, on a handle whose key cache is at the
    /// table's version; `docs/query.md`.
    pub fn key_row_taken(&self) -> bool {
        self.key_row_taken
    }

    /// The next batch of rows, or `None` at the end.
    pub async fn next(&mut self) -> Option<Result<RecordBatch>> {
        self.stream.next().await
    }

    /// Every remaining batch.
    pub async fn collect(mut self) -> Result<Vec<RecordBatch>> {
        let mut batches = Vec::new();
        while let Some(batch) = self.next().await {
            batches.push(batch?);
        }
        Ok(batches)
    }
}

/// Runs `text` on `graph`'s branch at the commit `options` names. A query refused by
/// the checker is [`OmniError::BadQuery`]; `EXPLAIN` returns the plan (one `plan`
/// column), `PROFILE` runs the query and returns the plan with rows and time per
/// operator.
pub async fn query(graph: &Omnigraph, text: &str, options: &QueryOptions) -> Result<QueryRows> {
    let started = Instant::now();
    let commit = match &options.at {
        // Through the handle, which probes from the head it knows.
        CommitRef::Head => graph.head().await?,
        at => graph.graph().commit(graph.branch(), at).await?,
    };
    let parameters = match parameters(&options.parameters) {
        Ok(parameters) => parameters,
        Err(error) => {
            // A query the checker refuses says so first, as it did before its
            // parameters were read.
            check(&*graph.catalog_at(&commit).await?, text)?;
            return Err(error);
        }
    };
    let budget = options.memory_bytes;
    let session = session();
    let key = PlanKey::of(graph, &commit, text, &parameters);
    // A plan DataFusion cannot plan once its placeholders are bound (a value it cannot
    // take: a cast that fails once folded) is planned with the values, as it would be
    // without reuse: the query's errors are its own.
    let with_values = || async {
        let prepared = prepare(graph, &commit, text, &parameters, false, budget).await?;
        let physical = physical_plan(&prepared, &parameters, budget).await?;
        Ok::<_, OmniError>((Arc::new(prepared), physical))
    };
    let mut physical_reused = false;
    let mut key_scan_reused = false;
    let mut key_row_taken = false;
    let (prepared, reused, physical) = match key.as_ref().and_then(plans::get) {
        Some(prepared) => {
            refuse_unread(&parameters, &prepared.reads)?;
            let shared = match prepared.mode {
                Mode::Run => bound_shared_plan(&prepared, &parameters, graph, &commit).await,
                // Their text shows the plan made for the values, and a profile's
                // operators count its run alone.
                Mode::Explain | Mode::Profile => None,
            };
            if let Some(Bound {
                plan,
                key_reused,
                key_taken,
            }) = shared
            {
                physical_reused = true;
                key_scan_reused = key_reused;
                key_row_taken = key_taken;
                (prepared, true, plan)
            } else {
                match physical_plan(&prepared, &parameters, budget).await {
                    Ok(physical) => (prepared, true, physical),
                    Err(_) => {
                        let (prepared, physical) = with_values().await?;
                        (prepared, false, physical)
                    }
                }
            }
        }
        None => {
            let prepared =
                prepare(graph, &commit, text, &parameters, key.is_some(), budget).await?;
            let (prepared, physical) = match physical_plan(&prepared, &parameters, budget).await {
                Ok(physical) => (Arc::new(prepared), physical),
                Err(_) if prepared.placeholders => with_values().await?,
                Err(error) => return Err(error),
            };
            if let Some(key) = key
                && prepared.reusable
            {
                plans::insert(key, prepared.clone());
            }
            (prepared, false, physical)
        }
    };
    let runtime = RuntimeEnvBuilder::from_runtime_env(session.runtime_env())
        .with_memory_pool(Arc::new(FairSpillPool::new(budget)))
        .build_arc()
        .map_err(|error| running(error, budget))?;
    let task = Arc::new(task_context(session, runtime));
    let (seq, commit_id) = (commit.seq, commit.commit_id.clone());
    match prepared.mode {
        Mode::Run => {
            let schema = physical.schema();
            let stream = execute_stream(physical, task).map_err(|error| running(error, budget))?;
            let stream = stream
                .map(move |batch| batch.map_err(|error| running(error, budget)))
                .boxed();
            Ok(QueryRows {
                mode: Mode::Run,
                schema,
                seq,
                commit_id,
                planning: started.elapsed(),
                plan_reused: reused,
                physical_plan_reused: physical_reused,
                key_scan_reused,
                key_row_taken,
                stream,
            })
        }
        Mode::Explain => {
            let plan = explain(&prepared.hops, physical.as_ref(), false);
            Ok(plan_rows(
                Mode::Explain,
                plan,
                seq,
                commit_id,
                started.elapsed(),
                reused,
            ))
        }
        Mode::Profile => {
            let planning = started.elapsed();
            // Counted as they stream, never held: a profile's memory is the query's.
            let mut stream =
                execute_stream(physical.clone(), task).map_err(|error| running(error, budget))?;
            let mut rows = 0usize;
            while let Some(batch) = stream.next().await {
                rows += batch.map_err(|error| running(error, budget))?.num_rows();
            }
            let mut plan = explain(&prepared.hops, physical.as_ref(), true);
            plan.push_str(&format!("rows: {rows}\n"));
            Ok(plan_rows(
                Mode::Profile,
                plan,
                seq,
                commit_id,
                planning,
                reused,
            ))
        }
    }
}

/// The task a query runs in: the session's options, and the runtime with the query's
/// memory pool. It carries no function registry: every function of a physical plan was
/// resolved when it was planned, and nothing that runs looks one up by name, while
/// copying the session's few hundred entries per query (as `TaskContext::from` does)
/// cost a served read a tenth of its CPU (`docs/performance.md`). A DataFusion or Lance
/// upgrade, or plans read back from bytes, would need this checked again.
fn task_context(session: &SessionState, runtime: Arc<RuntimeEnv>) -> TaskContext {
    TaskContext::new(
        None,
        session.session_id().to_string(),
        session.config().clone(),
        HashMap::new(),
        HashMap::new(),
        HashMap::new(),
        HashMap::new(),
        runtime,
    )
}

/// The session every query is planned in, built once: building one registers a few
/// hundred functions and rules, a fixed cost a point read would otherwise pay each time.
/// Nothing a query plans is registered in it (its tables are in the plan), and its
/// start time is the build's: no function of the language reads the clock.
fn session() -> &'static SessionState {
    static SESSION: OnceLock<SessionState> = OnceLock::new();
    SESSION.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut config = SessionConfig::new().with_target_partitions(threads);
        // A hop that joins an edge table hands the join's keys to the table's scan,
        // which looks them up in the end's index when they are few
        // (exec/joined_scan.rs).
        let optimizer = &mut config.options_mut().optimizer;
        optimizer.enable_join_dynamic_filter_pushdown = true;
        optimizer.hash_join_inlist_pushdown_max_distinct_values = EXPAND_LOOKUP_KEYS_MAX;
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .with_query_planner(Arc::new(crate::exec::Operators))
            .build();
        // DataFusion 54's pass that pushes a struct's field access (`n.id` of a node
        // returned whole) towards the scans, through a join, builds a projection
        // naming one scan column twice, which fails the query
        // (`retrieval::a_call_on_a_type_returns_its_node_whole_...`). Its gain is
        // column pruning inside struct columns, which node tables do not have.
        let leaf_passes = [
            ExtractLeafExpressions::new().name().to_string(),
            PushDownLeafProjections::new().name().to_string(),
        ];
        let rules: Vec<_> = state
            .optimizers()
            .iter()
            .filter(|rule| !leaf_passes.iter().any(|pass| pass == rule.name()))
            .cloned()
            .collect();
        // Both passes were there to remove (a DataFusion that renamed one would keep it).
        assert_eq!(
            state.optimizers().len() - rules.len(),
            leaf_passes.len(),
            "DataFusion's leaf-projection passes are in its default rules"
        );
        let mut state = SessionStateBuilder::new_from_existing(state)
            .with_optimizer_rules(rules)
            .build();
        // Without it the planner gives functions default options, not the session's.
        state.mark_start_execution();
        state
    })
}

/// The session a shared physical plan is made in: the query session with one target
/// partition. A plan that can be shared is a chain of cheap operators above one scan,
/// which Lance plans in one partition (reading its fragments in parallel inside it):
/// spreading the chain over the cores would only add a repartition's tasks and
/// channels to every run, most of them a key's single row.
fn chain_session() -> &'static SessionState {
    static SESSION: OnceLock<SessionState> = OnceLock::new();
    SESSION.get_or_init(|| {
        let query = session();
        let config = query.config().clone().with_target_partitions(1);
        SessionStateBuilder::new_from_existing(query.clone())
            .with_config(config)
            .build()
    })
}

/// The plan as text: how each hop is expanded, then DataFusion's physical plan (with
/// each operator's rows and time when `metrics`).
fn explain(hops: &[String], physical: &dyn ExecutionPlan, metrics: bool) -> String {
    let mut text = String::new();
    for hop in hops {
        text.push_str(&format!("hop {hop}\n"));
    }
    let shown = if metrics {
        DisplayableExecutionPlan::with_metrics(physical)
            .indent(false)
            .to_string()
    } else {
        displayable(physical).indent(false).to_string()
    };
    text.push_str(&shown);
    text
}

fn plan_rows(
    mode: Mode,
    plan: String,
    seq: u64,
    commit_id: String,
    planning: Duration,
    plan_reused: bool,
) -> QueryRows {
    let schema = Arc::new(Schema::new(vec![Field::new("plan", DataType::Utf8, false)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(StringArray::from(vec![plan]))],
    )
    .expect("one string column");
    QueryRows {
        mode,
        schema,
        seq,
        commit_id,
        planning,
        plan_reused,
        physical_plan_reused: false,
        key_scan_reused: false,
        key_row_taken: false,
        stream: futures::stream::iter([Ok(batch)]).boxed(),
    }
}

/// The parameters as typed values.
fn parameters(given: &BTreeMap<String, Value>) -> Result<BTreeMap<String, ScalarValue>> {
    if given.len() > QUERY_PARAMETERS_MAX {
        return Err(OmniError::bad_input(
            InputLocation::in_source("parameters"),
            format!(
                "{} parameters; the limit is {QUERY_PARAMETERS_MAX}",
                given.len()
            ),
        ));
    }
    let mut typed = BTreeMap::new();
    for (name, value) in given {
        let scalar = scalar(value).map_err(|message| {
            OmniError::bad_input(
                InputLocation::in_source("parameters").field(name.clone()),
                message,
            )
        })?;
        typed.insert(name.clone(), scalar);
    }
    Ok(typed)
}

/// A query checked, compiled and optimized at one commit: what every run of its text
/// with parameters of the same types shares.
struct Prepared {
    mode: Mode,
    /// The optimized logical plan.
    plan: LogicalPlan,
    /// Whether the plan holds placeholders for the parameters' values.
    placeholders: bool,
    /// Whether another run may use it: no parameter's value shaped it.
    reusable: bool,
    hops: Vec<String>,
    /// The parameters the query reads.
    reads: BTreeSet<String>,
    /// The physical plan every run shares, made at the first reuse: `None` when the
    /// plan cannot be shared (`shared_plan`).
    shared: OnceLock<Option<Shared>>,
    /// Set when Lance planned a bound scan in another shape than the shared plan's
    /// leaf: no run tries the shared plan again.
    unshareable: AtomicBool,
}

/// Checks and compiles `text` at `commit`, and optimizes its plan: with placeholders
/// for its parameters when `placeholders`, else with their values.
async fn prepare(
    graph: &Omnigraph,
    commit: &GraphCommit,
    text: &str,
    parameters: &BTreeMap<String, ScalarValue>,
    placeholders: bool,
    budget: usize,
) -> Result<Prepared> {
    let catalog = graph.catalog_at(commit).await?;
    let checked = check(&catalog, text)?;
    refuse_unread(parameters, checked.parameters())?;
    let mut tables = Tables::new();
    for def in catalog.types() {
        tables.insert(
            def.name().to_string(),
            graph.pinned_table(commit, def.name()).await?,
        );
    }
    // The artifacts of the edge types the query may walk, and no others: each is a
    // read (or a place in the handle's cache) of its own.
    let walked = walked_edge_types(&checked);
    let mut adjacency = Adjacencies::new();
    for def in catalog.types().iter().filter(|def| {
        !def.is_node()
            && walked
                .as_ref()
                .is_none_or(|walked| walked.contains(def.name()))
    }) {
        let found = graph.pinned_adjacency(commit, def.name()).await;
        adjacency.insert(def.name().to_string(), found);
    }
    let compiled = |binding| compile(&checked, &catalog, &tables, &adjacency, parameters, binding);
    let optimize = |plan: &LogicalPlan| {
        session()
            .optimize(plan)
            .map_err(|error| running(error, budget))
    };
    let prepared = |plan, placeholders, reusable, hops| Prepared {
        mode: checked.mode(),
        plan,
        placeholders,
        reusable,
        hops,
        reads: checked.parameters().clone(),
        shared: OnceLock::new(),
        unshareable: AtomicBool::new(false),
    };
    if placeholders {
        let compiled = compiled(Binding::Placeholders)?;
        // A plan DataFusion cannot optimize with placeholders is planned with the
        // values, as it would be without the cache: its errors are the query's own.
        if let Ok(plan) = optimize(&compiled.plan) {
            return Ok(prepared(plan, true, !compiled.value_bound, compiled.hops));
        }
    }
    let compiled = compiled(Binding::Literals)?;
    let plan = optimize(&compiled.plan)?;
    Ok(prepared(plan, false, false, compiled.hops))
}

/// Refuses a parameter the query does not read.
fn refuse_unread(
    parameters: &BTreeMap<String, ScalarValue>,
    reads: &BTreeSet<String>,
) -> Result<()> {
    match parameters.keys().find(|name| !reads.contains(*name)) {
        Some(name) => Err(OmniError::bad_input(
            InputLocation::in_source("parameters").field(name.clone()),
            format!("the query reads no ${name}"),
        )),
        None => Ok(()),
    }
}

/// The physical plan of `prepared` run with `parameters`.
async fn physical_plan(
    prepared: &Prepared,
    parameters: &BTreeMap<String, ScalarValue>,
    budget: usize,
) -> Result<Arc<dyn ExecutionPlan>> {
    let session = session();
    let plan = match prepared.placeholders {
        true => bind(&prepared.plan, parameters).map_err(|error| running(error, budget))?,
        false => prepared.plan.clone(),
    };
    // Planning reads no memory pool: the query's budget is its task's.
    session
        .query_planner()
        .create_physical_plan(&plan, session)
        .await
        .map_err(|error| running(error, budget))
}

/// A physical plan every run of a prepared plan shares, and its one parameter scan.
#[derive(Clone)]
struct Shared {
    plan: Arc<dyn ExecutionPlan>,
    /// The leaf each run replaces with Lance's scan of its values.
    leaf: Arc<dyn ExecutionPlan>,
}

/// The physical plan of `prepared` that its runs share, made once: planned with its
/// placeholders in the filters of its node scan, a leaf that waits for a run's values
/// (`ParameterScanExec`). `None` when DataFusion cannot plan it so (a placeholder
/// elsewhere), or when it is not a chain of operators that run again above one such
/// leaf (`shared_leaf`).
async fn shared_plan(prepared: &Prepared) -> Option<Shared> {
    if prepared.unshareable.load(Ordering::Relaxed) {
        return None;
    }
    if let Some(made) = prepared.shared.get() {
        return made.clone();
    }
    let session = chain_session();
    let made = match session
        .query_planner()
        .create_physical_plan(&prepared.plan, session)
        .await
    {
        Ok(plan) => shared_leaf(&plan).map(|leaf| Shared { plan, leaf }),
        Err(_) => None,
    };
    // Two runs that made it at once made the same plan: the first kept is used.
    prepared.shared.get_or_init(|| made).clone()
}

/// The one parameter scan of `plan`, when every operator of `plan` runs again, from its
/// copy, as it ran the first time. The operators are DataFusion's whose copy
/// (`with_new_children`) starts with no state of a run (metrics, a repartition's
/// channels), and an expansion. Each takes one input, so the plan is a chain down to
/// its one leaf. A join is not among them: its probe side keeps the dynamic filter of
/// its first run.
fn shared_leaf(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let mut all = true;
    let mut leaves = Vec::new();
    plan.apply(|node| {
        if node.is::<ParameterScanExec>() {
            leaves.push(node.clone());
        }
        let node = node.as_ref();
        all = node.is::<ProjectionExec>()
            || node.is::<FilterExec>()
            || node.is::<RepartitionExec>()
            || node.is::<CoalescePartitionsExec>()
            || node.is::<CooperativeExec>()
            || node.is::<GlobalLimitExec>()
            || node.is::<LocalLimitExec>()
            || node.is::<ExpandExec>()
            || node.is::<ParameterScanExec>();
        Ok(match all {
            true => TreeNodeRecursion::Continue,
            false => TreeNodeRecursion::Stop,
        })
    })
    .ok()?;
    match (all, leaves.as_slice()) {
        (true, [leaf]) => Some(leaf.clone()),
        _ => None,
    }
}

/// The shared physical plan of `prepared` for one run: its parameter scan replaced by
/// Lance's scan of its filters bound to `parameters`, and every operator above it a
/// copy with no state. `None` when there is no shared plan, or when a value does not
/// fit it (the caller plans the query with its values, whose errors are its own).
async fn bound_shared_plan(
    prepared: &Prepared,
    parameters: &BTreeMap<String, ScalarValue>,
    graph: &Omnigraph,
    commit: &GraphCommit,
) -> Option<Bound> {
    let Shared { plan, leaf } = shared_plan(prepared).await?;
    let Bound {
        plan: read,
        key_reused,
        key_taken,
    } = match leaf
        .downcast_ref::<ParameterScanExec>()?
        .bind(session(), &param_values(parameters), graph, commit)
        .await
    {
        Ok(bound) => bound,
        Err(Unbound::Value) => return None,
        Err(Unbound::Shape) => {
            prepared.unshareable.store(true, Ordering::Relaxed);
            return None;
        }
    };
    // The leaf's place takes Lance's scan; every operator above it, in a chain, is then
    // made again by `with_new_children` (a child of its changed), which gives each a
    // copy with no state of an earlier run: no operator of the run is the shared plan's.
    let mut read = Some(read);
    plan.transform_up(|node| {
        Ok(match Arc::ptr_eq(&node, &leaf) {
            true => Transformed::yes(read.take().expect("the plan has one parameter scan")),
            false => Transformed::no(node),
        })
    })
    .ok()
    .map(|transformed| Bound {
        plan: transformed.data,
        key_reused,
        key_taken,
    })
}

/// `parameters` as DataFusion binds them.
fn param_values(parameters: &BTreeMap<String, ScalarValue>) -> ParamValues {
    ParamValues::from(
        parameters
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect::<Vec<_>>(),
    )
}

/// `plan` with its placeholders bound to `parameters`, its expressions simplified again
/// as optimizing with the values would: a cast of a value is folded (one that cannot be
/// made fails here, at planning, as it does for a literal, not only when a row reaches
/// it).
fn bind(
    plan: &LogicalPlan,
    parameters: &BTreeMap<String, ScalarValue>,
) -> std::result::Result<LogicalPlan, DataFusionError> {
    let bound = plan.clone().with_param_values(param_values(parameters))?;
    static SIMPLIFY: OnceLock<Optimizer> = OnceLock::new();
    SIMPLIFY
        .get_or_init(|| Optimizer::with_rules(vec![Arc::new(SimplifyExpressions::new())]))
        .optimize(bound, session(), |_, _| {})
}

/// What a prepared plan is reused for: one handle's root, a commit of a branch, the
/// text, and the types of its parameters. A query whose parameters include one that
/// cannot be a placeholder has none.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PlanKey {
    /// The root's address: the entry holds the root weakly and is used only while it
    /// is this very root (its store, with its wrapper, is the one the plan reads).
    root: usize,
    /// Whether the handle's traversals may use adjacency artifacts (a plan walks them or
    /// the edge tables).
    adjacency: bool,
    branch: String,
    commit_id: String,
    text: String,
    types: Vec<(String, DataType)>,
}

impl PlanKey {
    fn of(
        graph: &Omnigraph,
        commit: &GraphCommit,
        text: &str,
        parameters: &BTreeMap<String, ScalarValue>,
    ) -> Option<(PlanKey, std::sync::Weak<StorageRoot>)> {
        if !parameters.values().all(crate::plan::placeholder_type) {
            return None;
        }
        let root = graph.graph().root();
        Some((
            PlanKey {
                root: Arc::as_ptr(root) as usize,
                adjacency: graph.reads_adjacency(),
                branch: commit.branch.clone(),
                commit_id: commit.commit_id.clone(),
                text: text.to_owned(),
                types: parameters
                    .iter()
                    .map(|(name, value)| (name.clone(), value.data_type()))
                    .collect(),
            },
            Arc::downgrade(root),
        ))
    }
}

/// The process's prepared plans, at most [`PLANS_CACHED_MAX`]; a full cache drops the
/// plan used least recently (each is a commit's, and a new commit makes the old ones
/// fall out of use), and the plans of a root no handle holds are dropped at the next
/// insert. A dropped plan's datasets are released after the lock.
mod plans {
    use super::{PlanKey, Prepared};
    use crate::limits::PLANS_CACHED_MAX;
    use omnigraph_core::storage::StorageRoot;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock, Weak};

    /// A prepared plan, the root it reads (held weakly) and when it was last used.
    struct Entry {
        root: Weak<StorageRoot>,
        prepared: Arc<Prepared>,
        used: u64,
    }

    #[derive(Default)]
    struct Plans {
        entries: HashMap<PlanKey, Entry>,
        /// Counts uses: an entry's `used` is the count at its last use.
        uses: u64,
    }

    fn plans() -> std::sync::MutexGuard<'static, Plans> {
        static PLANS: OnceLock<Mutex<Plans>> = OnceLock::new();
        PLANS
            .get_or_init(|| Mutex::new(Plans::default()))
            .lock()
            // A panic while the map was held cannot leave an entry half made.
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn get((key, root): &(PlanKey, Weak<StorageRoot>)) -> Option<Arc<Prepared>> {
        let mut plans = plans();
        plans.uses += 1;
        let uses = plans.uses;
        let entry = plans.entries.get_mut(key)?;
        if !(entry.root.ptr_eq(root) && entry.root.strong_count() > 0) {
            return None;
        }
        entry.used = uses;
        Some(entry.prepared.clone())
    }

    pub(super) fn insert((key, root): (PlanKey, Weak<StorageRoot>), prepared: Arc<Prepared>) {
        // Dropped after the lock: the last reference to a plan's datasets may go with it.
        let mut dropped: Vec<Entry> = Vec::new();
        let mut plans = plans();
        plans.uses += 1;
        let used = plans.uses;
        // The plans of a root no handle holds any more are never used again.
        let dead: Vec<PlanKey> = plans
            .entries
            .iter()
            .filter(|(_, entry)| entry.root.strong_count() == 0)
            .map(|(key, _)| key.clone())
            .collect();
        for key in dead {
            dropped.extend(plans.entries.remove(&key));
        }
        if plans.entries.len() >= PLANS_CACHED_MAX && !plans.entries.contains_key(&key) {
            // The plan used least recently makes room (a scan of at most
            // PLANS_CACHED_MAX entries, beside planning a query).
            let oldest = plans
                .entries
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                dropped.extend(plans.entries.remove(&oldest));
            }
        }
        dropped.extend(plans.entries.insert(
            key,
            Entry {
                root,
                prepared,
                used,
            },
        ));
        debug_assert!(plans.entries.len() <= PLANS_CACHED_MAX);
        drop(plans);
        drop(dropped);
    }
}

/// A JSON value as a typed scalar: integers as Int64, other numbers as Float64, lists
/// of one type (integers and floats make floats) as lists.
fn scalar(value: &Value) -> std::result::Result<ScalarValue, String> {
    Ok(match value {
        Value::Null => ScalarValue::Null,
        Value::Bool(b) => ScalarValue::Boolean(Some(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => ScalarValue::Int64(Some(i)),
            None => ScalarValue::Float64(Some(n.as_f64().ok_or("a number out of range")?)),
        },
        Value::String(s) => ScalarValue::Utf8(Some(s.clone())),
        Value::Array(items) => {
            let floats = items
                .iter()
                .any(|i| matches!(i, Value::Number(n) if n.as_i64().is_none()));
            let mut values = Vec::with_capacity(items.len());
            for item in items {
                let value = match (item, floats) {
                    (Value::Number(n), true) => ScalarValue::Float64(n.as_f64()),
                    (Value::Array(_) | Value::Object(_), _) => {
                        return Err("a list of lists or maps is not supported".into());
                    }
                    _ => scalar(item)?,
                };
                values.push(value);
            }
            let mut data_type = DataType::Null;
            for value in &values {
                let t = value.data_type();
                if t == DataType::Null {
                    continue;
                }
                if data_type != DataType::Null && data_type != t {
                    return Err(format!(
                        "a list of {data_type} and {t}: a list holds one type"
                    ));
                }
                data_type = t;
            }
            let values: Vec<ScalarValue> = values
                .into_iter()
                .map(|v| {
                    if v.is_null() {
                        ScalarValue::try_from(&data_type).unwrap_or(v)
                    } else {
                        v
                    }
                })
                .collect();
            ScalarValue::List(ScalarValue::new_list_nullable(&values, &data_type))
        }
        Value::Object(_) => return Err("a map is not supported as a parameter".into()),
    })
}

/// A failure while a query ran, typed by its root cause.
fn running(error: DataFusionError, budget: usize) -> OmniError {
    match error {
        DataFusionError::Context(_, inner) => running(*inner, budget),
        DataFusionError::ResourcesExhausted(message) => OmniError::query_failed(
            QueryFailure::OverBudget,
            format!("the query needs more than its memory budget of {budget} bytes ({message})"),
        ),
        DataFusionError::ArrowError(error, _) => match *error {
            ArrowError::DivideByZero => {
                OmniError::query_failed(QueryFailure::Evaluation, "an integer divided by zero")
            }
            ArrowError::ComputeError(message) | ArrowError::CastError(message) => {
                OmniError::query_failed(QueryFailure::Evaluation, message)
            }
            other => OmniError::query_failed(QueryFailure::Evaluation, other.to_string()),
        },
        DataFusionError::External(source) => match source.downcast::<OmniError>() {
            // A typed error an operator of ours raised while the query ran.
            Ok(ours) => *ours,
            Err(source) => match source.downcast::<omnigraph_core::lance::Error>() {
                Ok(lance) => OmniError::from_lance("query", *lance),
                Err(source) => OmniError::storage(StorageKind::Unknown, "query", source),
            },
        },
        DataFusionError::Shared(shared) => match shared.find_root() {
            DataFusionError::ResourcesExhausted(message) => OmniError::query_failed(
                QueryFailure::OverBudget,
                format!(
                    "the query needs more than its memory budget of {budget} bytes ({message})"
                ),
            ),
            other => OmniError::internal(format!("query: {other}")),
        },
        // The analyzer's type checks (coercion of the query's own expressions).
        DataFusionError::Plan(message) => OmniError::bad_query(
            omnigraph_core::QueryRefusal::WrongType,
            1,
            1,
            format!("the types in the query do not fit: {message}"),
        ),
        DataFusionError::Execution(message) => {
            OmniError::query_failed(QueryFailure::Evaluation, message)
        }
        other => OmniError::internal(format!("query: {other}")),
    }
}
