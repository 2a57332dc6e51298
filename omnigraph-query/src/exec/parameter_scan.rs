//! A node table's scan whose filters read a parameter, planned by Lance when a run has
//! the values, so that one physical plan serves every value a query is run with.
//!
//! DataFusion hands a scan its filters when it makes the physical plan, and Lance plans
//! its read then: for `id = 'p1'` it chooses the key's BTree. A filter that holds a
//! placeholder (`id = $id`) cannot be planned so, and every run of a prepared plan used
//! to bind its values and make the whole physical plan again: DataFusion's optimizer
//! passes, and the statistics they ask Lance for, took a sixth of a served point read's
//! CPU. [`ParameterScan`] wraps Lance's provider: a scan whose filters hold a
//! placeholder becomes a [`ParameterScanExec`], a leaf that keeps what the scan was
//! asked and cannot run. [`ParameterScanExec::bind`] has Lance plan its own scan of the
//! bound filters (or remakes Lance's plan of a key's equality, below), which `run.rs`
//! puts in the leaf's place before the run starts. Lance gets
//! what a plan made for the values hands it (the same filters, projection and limit),
//! so it chooses the same index and reads the same rows. DataFusion's physical
//! optimizer does not run over Lance's scan again: a rewrite it might make inside it
//! is not made, and a query without `ORDER BY` may return its rows in another order. A
//! scan without placeholders (a plan bound before it is planned, as every `EXPLAIN`
//! and `PROFILE` is) is Lance's, as before.
//!
//! A node key's equality to a value is first asked of the handle's key cache
//! ([`Omnigraph::key_row`]): when it describes the pinned version, the leaf's place
//! takes a [`KeyTakeExec`] of the key's one row (or of none), and Lance plans nothing.

use super::key_take::{KeyRow, KeyTakeExec};
use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::Column;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{
    DFSchema, DFSchemaRef, DataFusionError, ParamValues, Result, ScalarValue,
};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::{SendableRecordBatchStream, SessionState, TaskContext};
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{BinaryExpr, Operator};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::optimizer::OptimizerConfig;
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use omnigraph_core::lance::Dataset;
use omnigraph_core::lance::io::exec::filtered_read::FilteredReadExec;
use omnigraph_core::lance::io::exec::scalar_index::ScalarIndexExec;
use omnigraph_core::lance_index::scalar::SargableQuery;
use omnigraph_core::lance_index::scalar::expression::{ScalarIndexExpr, ScalarIndexSearch};
use omnigraph_graph::Omnigraph;
use omnigraph_publish::GraphCommit;
use std::sync::{Arc, OnceLock};

/// Lance's provider of a node table, whose scans with a placeholder in their filters
/// are planned when a run binds it.
#[derive(Debug)]
pub(crate) struct ParameterScan {
    lance: Arc<dyn TableProvider>,
    /// The table Lance's provider reads, at the commit's version.
    dataset: Arc<Dataset>,
    /// The node type and its key column, whose equality a warm handle answers from its
    /// key cache.
    key: Option<KeyColumn>,
}

/// A node type and its key column.
#[derive(Clone, Debug)]
pub(crate) struct KeyColumn {
    pub(crate) type_name: String,
    pub(crate) column: String,
}

impl ParameterScan {
    pub(crate) fn new(
        lance: Arc<dyn TableProvider>,
        dataset: Arc<Dataset>,
        key: Option<KeyColumn>,
    ) -> ParameterScan {
        ParameterScan {
            lance,
            dataset,
            key,
        }
    }
}

#[async_trait]
impl TableProvider for ParameterScan {
    fn schema(&self) -> SchemaRef {
        self.lance.schema()
    }

    fn table_type(&self) -> TableType {
        self.lance.table_type()
    }

    /// Lance's answer: a placeholder's filter is Lance's too, once bound.
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.lance.supports_filters_pushdown(filters)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut placeholders = false;
        for filter in filters {
            placeholders |= filter.exists(|expr| Ok(matches!(expr, Expr::Placeholder(_))))?;
        }
        if !placeholders {
            return self.lance.scan(state, projection, filters, limit).await;
        }
        let schema = match projection {
            Some(columns) => Arc::new(self.lance.schema().project(columns)?),
            None => self.lance.schema(),
        };
        // Lance plans a scan of one partition (its read of fragments is parallel inside
        // it); `bind` refuses a plan of more, which its parents were not made for.
        let properties = super::one_partition(schema.clone());
        Ok(Arc::new(ParameterScanExec {
            table: Arc::new(DFSchema::try_from(self.lance.schema())?),
            lance: self.lance.clone(),
            dataset: self.dataset.clone(),
            key: self.key.clone(),
            projection: projection.cloned(),
            filters: filters.to_vec(),
            limit,
            schema,
            properties: Arc::new(properties),
            key_read: OnceLock::new(),
        }))
    }
}

/// A scan of a node table whose filters wait for a run's parameters: a leaf of a
/// physical plan that every run shares, replaced by Lance's scan of the bound filters
/// before the run starts ([`ParameterScanExec::bind`]). It never runs itself.
#[derive(Debug)]
pub(crate) struct ParameterScanExec {
    lance: Arc<dyn TableProvider>,
    dataset: Arc<Dataset>,
    key: Option<KeyColumn>,
    /// The table's columns, unqualified as the filters name them: what `bind`
    /// simplifies the bound filters against.
    table: DFSchemaRef,
    projection: Option<Vec<usize>>,
    /// The filters DataFusion pushed to the scan, placeholders and all.
    filters: Vec<Expr>,
    limit: Option<usize>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    /// Lance's plan of a key's equality, once a run's plan was one.
    key_read: OnceLock<KeyRead>,
}

/// Lance's scan of a run bound to its values (or the shared plan with that scan in
/// its leaf's place).
#[derive(Debug)]
pub(crate) struct Bound {
    pub(crate) plan: Arc<dyn ExecutionPlan>,
    /// Whether it is Lance's plan of an earlier run with this run's value put in
    /// ([`KeyRead`]), not planned by Lance again.
    pub(crate) key_reused: bool,
    /// Whether it reads a key's row from the place the handle's key cache holds
    /// ([`KeyTakeExec`]), not through Lance's filtered read.
    pub(crate) key_taken: bool,
}

/// Why a parameter scan could not be bound for a run.
#[derive(Debug)]
pub(crate) enum Unbound {
    /// A value the filters cannot take (a cast that fails), or Lance's planning of the
    /// bound scan failed: this run only. The run planned with its values says why.
    Value,
    /// Lance's scan is not the shape the shared plan was made for (its partitions or
    /// columns), or the filters' placeholders are not the run's parameters: no run can
    /// share the plan.
    Shape,
}

impl ParameterScanExec {
    /// Lance's scan of this table with the filters bound to `parameters` and simplified
    /// as DataFusion's optimizer simplifies a plan bound to them (a cast of a value
    /// folded), the scan a plan made for the values hands Lance. The caller then plans
    /// the query with its values, whose errors are the query's own, on either error.
    pub(crate) async fn bind(
        &self,
        session: &SessionState,
        parameters: &ParamValues,
        graph: &Omnigraph,
        commit: &GraphCommit,
    ) -> std::result::Result<Bound, Unbound> {
        let simplifier = ExprSimplifier::new(
            SimplifyContext::builder()
                .with_schema(self.table.clone())
                .with_config_options(OptimizerConfig::options(session))
                .with_query_execution_start_time(session.query_execution_start_time())
                .build(),
        );
        let mut filters = Vec::with_capacity(self.filters.len());
        for filter in &self.filters {
            let bound = filter
                .clone()
                .transform_up(|expr| match expr {
                    Expr::Placeholder(Placeholder { id, field }) => {
                        let (value, metadata) =
                            parameters.get_placeholders_with_values(&id)?.into_inner();
                        // The plan's key holds the parameters' types, so each value has
                        // its placeholder's type.
                        if let Some(field) = field
                            && value.data_type() != *field.data_type()
                        {
                            return Err(DataFusionError::Internal(format!(
                                "{id} is {}, its placeholder {}",
                                value.data_type(),
                                field.data_type()
                            )));
                        }
                        Ok(Transformed::yes(Expr::Literal(value, metadata)))
                    }
                    other => Ok(Transformed::no(other)),
                })
                .map_err(|_| Unbound::Shape)?
                .data;
            filters.push(simplifier.simplify(bound).map_err(|_| Unbound::Value)?);
        }
        if let Some(plan) = self.key_take(&filters, graph, commit).await {
            return Ok(Bound {
                plan,
                key_reused: false,
                key_taken: true,
            });
        }
        if let Some(key_read) = self.key_read.get()
            && let Some(plan) = key_read.with_value(&filters)
        {
            return Ok(Bound {
                plan,
                key_reused: true,
                key_taken: false,
            });
        }
        let plan = self
            .lance
            .scan(session, self.projection.as_ref(), &filters, self.limit)
            .await
            .map_err(|_| Unbound::Value)?;
        let partitions = plan.properties().output_partitioning().partition_count();
        let columns = plan.schema();
        let same_columns = columns.fields().len() == self.schema.fields().len()
            && columns
                .fields()
                .iter()
                .zip(self.schema.fields())
                .all(|(a, b)| {
                    a.name() == b.name()
                        && a.data_type() == b.data_type()
                        && a.is_nullable() == b.is_nullable()
                });
        if partitions != 1 || !same_columns {
            return Err(Unbound::Shape);
        }
        if self.key_read.get().is_none()
            && let Some(key_read) = KeyRead::of(&plan, &filters)
        {
            let _ = self.key_read.set(key_read);
        }
        Ok(Bound {
            plan,
            key_reused: false,
            key_taken: false,
        })
    }
}

impl ParameterScanExec {
    /// The read of a node's row by its key's equality, answered by the handle's key
    /// cache: the one row's place taken from Lance, or no row.
    async fn key_take(
        &self,
        filters: &[Expr],
        graph: &Omnigraph,
        commit: &GraphCommit,
    ) -> Option<Arc<dyn ExecutionPlan>> {
        let key = self.key.as_ref()?;
        let (_, column, value) = key_equality(filters)?;
        if column.name != key.column || self.schema.fields().is_empty() || self.limit == Some(0) {
            return None;
        }
        let field = self
            .lance
            .schema()
            .field_with_name(&key.column)
            .ok()?
            .clone();
        if *field.data_type() != value.data_type() {
            return None;
        }
        let array = value.to_array().ok()?;
        let rendered = omnigraph_core::keys::render_array_key(array.as_ref(), 0);
        let row = match graph
            .key_row(commit, &key.type_name, &self.dataset, &rendered)
            .await
            .ok()??
        {
            None => KeyRow::Absent,
            // The key is the row's one column asked: its value is the key's.
            Some(_) if matches!(self.schema.fields().as_ref(), [only] if only.name() == &key.column) => {
                KeyRow::KeyOnly(array)
            }
            Some(address) => KeyRow::At(address),
        };
        Some(Arc::new(KeyTakeExec::new(
            self.dataset.clone(),
            row,
            self.schema.clone(),
        )))
    }
}

/// Lance's plan of a scan whose one filter is a key's equality to a value, answered
/// exactly from the key's scalar index (a key's, or any column's whose index answers
/// equality exactly): its operators above one filtered read (projections),
/// the read, and under it the index search, whose query is the value's equality. The
/// value is in two places, the search's query and the read's filter (for fragments the
/// index does not cover), and nowhere else: [`KeyRead::of`] takes only such a plan, and
/// [`KeyRead::with_value`] makes it again with another value of the same type in both.
///
/// Lance's planning of such a value depends on the key's column, the value's type and
/// the dataset, pinned with the plan, not on the value ([`key_equality`] takes only
/// such values: not a null, which Lance searches otherwise, nor a float). Every
/// operator of the plan made is new: nothing of a run is shared with another. The
/// search is made without Lance's fragment scope and segment choice (settings Lance
/// keeps to itself): Lance's table provider never narrows a scan's fragments or
/// segments, so the index's segments that meet the dataset are loaded, as before, and
/// the read decides which fragments the result covers.
#[derive(Debug)]
struct KeyRead {
    plan: Arc<dyn ExecutionPlan>,
    column: Column,
    data_type: DataType,
}

impl KeyRead {
    /// `plan`, Lance's for `filters`, if it is a key's equality as above.
    fn of(plan: &Arc<dyn ExecutionPlan>, filters: &[Expr]) -> Option<KeyRead> {
        let (filter, column, value) = key_equality(filters)?;
        let mut reads = 0usize;
        let mut fits = true;
        plan.apply(|node| {
            if let Some(read) = node.downcast_ref::<FilteredReadExec>() {
                reads += 1;
                let options = read.options();
                let search = read.index_input().and_then(index_search);
                fits &= options.full_filter.as_ref() == Some(filter)
                    && options.refine_filter.is_none()
                    && options.overlay_block.is_none()
                    && read.row_stream_input().is_none()
                    && search.is_some_and(|search| {
                        search.column == column.name
                            && !search.needs_recheck
                            && matches!(
                                search.query.as_any().downcast_ref::<SargableQuery>(),
                                Some(SargableQuery::Equals(found)) if found.eq(value)
                            )
                    });
                return Ok(TreeNodeRecursion::Jump);
            }
            fits &= node.is::<ProjectionExec>() || node.is::<CooperativeExec>();
            Ok(TreeNodeRecursion::Continue)
        })
        .ok()?;
        if !(fits && reads == 1) {
            return None;
        }
        let ran = KeyRead {
            plan: plan.clone(),
            column: column.clone(),
            data_type: value.data_type(),
        };
        // The plan kept is a copy made the same way, never run: Lance's read keeps what
        // it ran (its stream and scheduler), which the run's plan would hold while the
        // shared plan lives.
        Some(KeyRead {
            plan: ran.with_value(filters)?,
            ..ran
        })
    }

    /// Lance's plan with the value of `filters` in the place of the first one, or
    /// `None` if `filters` are not this key's equality to a value of its type.
    fn with_value(&self, filters: &[Expr]) -> Option<Arc<dyn ExecutionPlan>> {
        let (filter, column, value) = key_equality(filters)?;
        if *column != self.column || value.data_type() != self.data_type {
            return None;
        }
        let made = self
            .plan
            .clone()
            .transform_down(|node| {
                let Some(read) = node.downcast_ref::<FilteredReadExec>() else {
                    return Ok(Transformed::no(node));
                };
                // `of` took only a read with an index input holding one query.
                let index = read
                    .index_input()
                    .cloned()
                    .expect("a key's read has an index input")
                    .transform_up(|node| {
                        let Some(search) = node.downcast_ref::<ScalarIndexExec>() else {
                            return Ok(Transformed::no(node));
                        };
                        let ScalarIndexExpr::Query(found) = search.expr() else {
                            unreachable!("a key's index search is one query");
                        };
                        let query = ScalarIndexSearch {
                            query: Arc::new(SargableQuery::Equals(value.clone())),
                            ..found.clone()
                        };
                        let made = ScalarIndexExec::new(
                            search.dataset().clone(),
                            ScalarIndexExpr::Query(query),
                            search.result_format(),
                        );
                        Ok(Transformed::yes(Arc::new(made) as Arc<dyn ExecutionPlan>))
                    })?
                    .data;
                let options = read
                    .options()
                    .clone()
                    .with_filter(None, Some(filter.clone()))?;
                let made = FilteredReadExec::try_new(read.dataset().clone(), options, Some(index))?;
                Ok(Transformed::new(
                    Arc::new(made) as Arc<dyn ExecutionPlan>,
                    true,
                    TreeNodeRecursion::Jump,
                ))
            })
            .ok()?;
        Some(made.data)
    }
}

/// The one filter of `filters` if it is a column's equality to a value that is not
/// null, as the optimizer leaves `key = $value` once bound: the filter, the column and
/// the value. The value is an integer or a text, whose equality Lance plans the same
/// for every value of the type: Lance rewrites a float's equality to zero as
/// equality to either zero (`x IN (-0.0, 0.0)`, its indexes keying on the bits), so a
/// float's plan depends on its value.
fn key_equality(filters: &[Expr]) -> Option<(&Expr, &Column, &ScalarValue)> {
    let [filter] = filters else {
        return None;
    };
    let Expr::BinaryExpr(BinaryExpr {
        left,
        op: Operator::Eq,
        right,
    }) = filter
    else {
        return None;
    };
    match (left.as_ref(), right.as_ref()) {
        (Expr::Column(column), Expr::Literal(value, None))
            if !value.is_null() && planned_alike(&value.data_type()) =>
        {
            Some((filter, column, value))
        }
        _ => None,
    }
}

/// Whether Lance plans the equality of a column of `data_type` to every value alike.
fn planned_alike(data_type: &DataType) -> bool {
    data_type.is_integer()
        || matches!(
            data_type,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        )
}

/// The index search under a read's index input: one scalar index query, under
/// cooperative wrappers only.
fn index_search(input: &Arc<dyn ExecutionPlan>) -> Option<&ScalarIndexSearch> {
    let mut node = input;
    loop {
        if let Some(search) = node.downcast_ref::<ScalarIndexExec>() {
            return match search.expr() {
                ScalarIndexExpr::Query(query) => Some(query),
                _ => None,
            };
        }
        if !node.is::<CooperativeExec>() {
            return None;
        }
        let [child] = node.children()[..] else {
            return None;
        };
        node = child;
    }
}

impl DisplayAs for ParameterScanExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "ParameterScanExec: filters=[")?;
        for (at, filter) in self.filters.iter().enumerate() {
            if at > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{filter}")?;
        }
        write!(f, "]")
    }
}

impl ExecutionPlan for ParameterScanExec {
    fn name(&self) -> &str {
        "ParameterScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        super::leaf_with_no_children(self, &children, "a parameter scan")
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        Err(DataFusionError::Internal(
            "a parameter scan runs only once bound to a run's values".into(),
        ))
    }
}
