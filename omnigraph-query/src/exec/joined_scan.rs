//! A scan of a table that a hop joins, which reads only the rows the join can meet when
//! its keys are few: an edge table, met on the end the hop starts from, and a node
//! table, met on its key by the nodes a hop reached.
//!
//! The hop is a hash join whose build side is the rows the hop starts from (or the
//! nodes it reached) and whose probe side is this scan. DataFusion's hash join hands its
//! probe side a dynamic filter, complete once the build side is read: when the build
//! side holds at most [`EXPAND_LOOKUP_KEYS_MAX`] distinct keys, the filter holds them as
//! a list. The scan then asks Lance for the rows whose column is in that list, which
//! Lance answers from the column's BTree index (an edge's end, a node's key); otherwise
//! it reads every row. The join checks every key either way: the filter only decides
//! how much is read, never what the hop returns.
//!
//! [`EXPAND_LOOKUP_KEYS_MAX`]: crate::limits::EXPAND_LOOKUP_KEYS_MAX

use crate::limits::{EXPAND_LOOKUP_KEYS_MAX, VARIABLE_VALUE_BYTES_ESTIMATE};
use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::catalog::Session;
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DataFusionError, Result, ScalarValue, Statistics};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Operator;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{
    BinaryExpr, CaseExpr, DynamicFilterPhysicalExpr, InListExpr, Literal,
};
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation, PushedDown,
};
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::{StreamExt, TryStreamExt};
use omnigraph_core::lance::Dataset;
use std::sync::Arc;

/// An edge or node table at the version the commit pins, as a hop's join reads it.
#[derive(Debug)]
pub(crate) struct JoinedTable {
    dataset: Arc<Dataset>,
    schema: SchemaRef,
    size: Size,
}

/// What a joined scan tells DataFusion of its table's size, which decides the join's
/// sides: which one it holds, and whether it holds it whole.
#[derive(Debug, Clone, Copy)]
enum Size {
    /// Its rows: an edge table's scan, as it always told (a hop from many nodes over
    /// few edges builds on the edges, and reads them all, which is cheap).
    Rows,
    /// Its rows and an estimate of their bytes, as Lance's own scan of a node table
    /// tells them, so a node table the hop reached is sized as it was before it was
    /// looked up.
    RowsAndBytes,
}

impl JoinedTable {
    /// An edge table, met on the end a hop starts from.
    pub(crate) fn edges(dataset: Arc<Dataset>) -> JoinedTable {
        JoinedTable::sized(dataset, Size::Rows)
    }

    /// A node table, met on the key of the nodes a hop reached.
    pub(crate) fn nodes(dataset: Arc<Dataset>) -> JoinedTable {
        JoinedTable::sized(dataset, Size::RowsAndBytes)
    }

    fn sized(dataset: Arc<Dataset>, size: Size) -> JoinedTable {
        let schema = Arc::new(datafusion::arrow::datatypes::Schema::from(dataset.schema()));
        JoinedTable {
            dataset,
            schema,
            size,
        }
    }
}

#[async_trait]
impl TableProvider for JoinedTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    /// Every filter goes to Lance (which answers an indexed column's equality from its
    /// index) and stays in the plan: Lance's answer is not relied on to be exact.
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let schema = match projection {
            Some(columns) => Arc::new(self.schema.project(columns)?),
            None => self.schema.clone(),
        };
        let filter = filters
            .iter()
            .cloned()
            .map(unqualified)
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .reduce(Expr::and);
        Ok(Arc::new(JoinedScanExec::new(
            self.dataset.clone(),
            schema,
            filter,
            self.size,
        )))
    }
}

/// `expr` with its columns named as the table names them (Lance knows no qualifier).
fn unqualified(expr: Expr) -> Result<Expr> {
    expr.transform(|expr| match expr {
        Expr::Column(column) => Ok(Transformed::yes(Expr::Column(Column::new_unqualified(
            column.name,
        )))),
        other => Ok(Transformed::no(other)),
    })
    .map(|transformed| transformed.data)
}

/// The scan of a [`JoinedTable`]: its columns, its static filter, and the dynamic
/// filters its join hands it. It reports the table's rows (inexact: before filters),
/// and for a node table an estimate of their bytes ([`Size`]).
#[derive(Debug, Clone)]
pub(crate) struct JoinedScanExec {
    dataset: Arc<Dataset>,
    schema: SchemaRef,
    filter: Option<Expr>,
    size: Size,
    dynamic: Vec<Arc<dyn PhysicalExpr>>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl JoinedScanExec {
    fn new(
        dataset: Arc<Dataset>,
        schema: SchemaRef,
        filter: Option<Expr>,
        size: Size,
    ) -> JoinedScanExec {
        let properties = super::one_partition(schema.clone());
        JoinedScanExec {
            dataset,
            schema,
            filter,
            size,
            dynamic: Vec::new(),
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for JoinedScanExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let columns: Vec<&str> = self
            .schema
            .fields()
            .iter()
            .map(|field| field.name().as_str())
            .collect();
        write!(f, "JoinedScanExec: columns=[{}]", columns.join(", "))?;
        if let Some(filter) = &self.filter {
            write!(f, ", filter={filter}")?;
        }
        if !self.dynamic.is_empty() {
            write!(
                f,
                ", keys looked up in the index when the join's keys are few"
            )?;
        }
        write!(f, ", uri={}", self.dataset.uri())
    }
}

impl ExecutionPlan for JoinedScanExec {
    fn name(&self) -> &str {
        "JoinedScanExec"
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
        super::leaf_with_no_children(self, &children, "a joined scan")
    }

    /// Keeps the dynamic filters a join hands down, to read at execution; says none is
    /// applied exactly, so every filter stays where it was.
    fn handle_child_pushdown_result(
        &self,
        phase: FilterPushdownPhase,
        result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        let mut dynamic = Vec::new();
        let verdicts = result
            .parent_filters
            .iter()
            .map(|pushed| {
                if phase == FilterPushdownPhase::Post
                    && pushed.filter.is::<DynamicFilterPhysicalExpr>()
                {
                    dynamic.push(pushed.filter.clone());
                }
                PushedDown::No
            })
            .collect();
        let mut propagation = FilterPushdownPropagation::with_parent_pushdown_result(verdicts);
        if !dynamic.is_empty() {
            let mut scan = self.clone();
            scan.dynamic.extend(dynamic);
            propagation = propagation.with_updated_node(Arc::new(scan) as Arc<dyn ExecutionPlan>);
        }
        Ok(propagation)
    }

    fn partition_statistics(&self, _partition: Option<usize>) -> Result<Arc<Statistics>> {
        let mut statistics = Statistics::new_unknown(&self.schema);
        let rows: Option<usize> = self
            .dataset
            .manifest()
            .fragments
            .iter()
            .map(|fragment| fragment.num_rows())
            .sum();
        if let Some(rows) = rows {
            statistics.num_rows = Precision::Inexact(rows);
            if let Size::RowsAndBytes = self.size {
                statistics.total_byte_size =
                    Precision::Inexact(rows.saturating_mul(estimated_row_bytes(&self.schema)));
            }
        }
        Ok(Arc::new(statistics))
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let looked_up = MetricBuilder::new(&self.metrics).counter("keys_looked_up", partition);
        let output_rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let dataset = self.dataset.clone();
        let schema = self.schema.clone();
        let filter = self.filter.clone();
        let dynamic = self.dynamic.clone();
        let read = async move {
            let lookup = dynamic.iter().find_map(lookup_filter);
            let filter = match (filter, lookup) {
                (filter, Some((lookup, keys))) => {
                    looked_up.add(keys);
                    Some(match filter {
                        Some(filter) => filter.and(lookup),
                        None => lookup,
                    })
                }
                (filter, None) => filter,
            };
            scan(dataset, schema, filter, output_rows).await
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::once(read).try_flatten(),
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// Bytes an Arrow row of `schema` takes, estimated as Lance 14 estimates its own scans'
/// rows: fixed widths as they are, a variable-width value as
/// [`VARIABLE_VALUE_BYTES_ESTIMATE`] and its offset; at least 8.
fn estimated_row_bytes(schema: &SchemaRef) -> usize {
    fn bytes(data_type: &datafusion::arrow::datatypes::DataType) -> usize {
        use datafusion::arrow::datatypes::DataType;
        match data_type {
            DataType::Boolean => 1,
            DataType::FixedSizeList(child, dim) => {
                (*dim).max(0) as usize * bytes(child.data_type())
            }
            DataType::LargeUtf8 | DataType::LargeBinary => VARIABLE_VALUE_BYTES_ESTIMATE + 8,
            other => other
                .primitive_width()
                .unwrap_or(VARIABLE_VALUE_BYTES_ESTIMATE + 4),
        }
    }
    schema
        .fields()
        .iter()
        .map(|field| bytes(field.data_type()))
        .sum::<usize>()
        .max(8)
}

fn lance_error(error: impl std::error::Error + Send + Sync + 'static) -> DataFusionError {
    DataFusionError::External(Box::new(error))
}

/// The stream of `dataset`'s rows that `filter` keeps, with the columns of `schema`
/// (Lance's batches as it gives them, as its own table provider passes them on).
async fn scan(
    dataset: Arc<Dataset>,
    schema: SchemaRef,
    filter: Option<Expr>,
    output_rows: Count,
) -> Result<SendableRecordBatchStream> {
    let mut scanner = dataset.scan();
    // In any order, as the plan's other scans: an order would cost Lance parallelism.
    scanner.scan_in_order(false);
    // A count reads no column: only the rows' addresses, which cost no I/O.
    let count_only = schema.fields().is_empty();
    if count_only {
        scanner.empty_project().map_err(lance_error)?;
    } else {
        let columns: Vec<&str> = schema
            .fields()
            .iter()
            .map(|field| field.name().as_str())
            .collect();
        scanner.project(&columns).map_err(lance_error)?;
    }
    if let Some(filter) = filter {
        scanner.filter_expr(filter);
    }
    let stream = scanner.try_into_stream().await.map_err(lance_error)?;
    let shaped = schema.clone();
    let stream = stream.map(move |batch| {
        let batch = batch.map_err(lance_error)?;
        output_rows.add(batch.num_rows());
        if count_only {
            let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
            Ok(RecordBatch::try_new_with_options(
                shaped.clone(),
                Vec::new(),
                &options,
            )?)
        } else {
            Ok(batch)
        }
    });
    Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
}

/// The filter a join's complete dynamic filter sets on the scan, and how many keys it
/// names: `end IN (keys)` when the filter lists the build side's keys of one column;
/// `None` (read every row) when it is not complete yet, or holds bounds or a hash
/// table only.
fn lookup_filter(filter: &Arc<dyn PhysicalExpr>) -> Option<(Expr, usize)> {
    let dynamic = filter.downcast_ref::<DynamicFilterPhysicalExpr>()?;
    // Only a complete filter names every key the join can meet; a scan that started
    // before reads every row. (`inner` is DataFusion's one synchronous view of it.)
    if !dynamic.inner().is_complete {
        return None;
    }
    let current = dynamic.current().ok()?;
    let (column, keys) = listed(&current)?;
    let count = keys.len();
    // DataFusion bounds the list per build partition; a join of many partitions
    // lists more keys than a lookup pays for.
    if count > EXPAND_LOOKUP_KEYS_MAX {
        return None;
    }
    let list = keys
        .into_iter()
        .map(|key| Expr::Literal(key, None))
        .collect();
    Some((
        Expr::Column(Column::new_unqualified(column)).in_list(list, false),
        count,
    ))
}

/// The keys `expr` accepts in one column, when it accepts no other row: an `IN` list
/// (its nulls and repeats dropped), a conjunction holding one, or a choice by
/// partition each branch of which holds one on the same column (or accepts nothing).
fn listed(expr: &Arc<dyn PhysicalExpr>) -> Option<(String, Vec<ScalarValue>)> {
    if let Some(list) = expr.downcast_ref::<InListExpr>() {
        if list.negated() {
            return None;
        }
        let column = list
            .expr()
            .downcast_ref::<datafusion::physical_expr::expressions::Column>()?;
        let mut keys = Vec::with_capacity(list.list().len());
        for item in list.list() {
            let value = item.downcast_ref::<Literal>()?.value();
            if !value.is_null() {
                keys.push(value.clone());
            }
        }
        distinct(&mut keys);
        // A list of nulls alone names no key to look up.
        return (!keys.is_empty()).then(|| (column.name().to_string(), keys));
    }
    if let Some(binary) = expr.downcast_ref::<BinaryExpr>() {
        // Either side of a conjunction bounds what it accepts.
        if *binary.op() == Operator::And {
            return listed(binary.left()).or_else(|| listed(binary.right()));
        }
        return None;
    }
    if let Some(case) = expr.downcast_ref::<CaseExpr>() {
        let mut column: Option<String> = None;
        let mut keys = Vec::new();
        let branches = case
            .when_then_expr()
            .iter()
            .map(|(_, then)| then)
            .chain(case.else_expr());
        for branch in branches {
            if accepts_nothing(branch) {
                continue;
            }
            let (named, listed) = listed(branch)?;
            if column.as_ref().is_some_and(|column| *column != named) {
                return None;
            }
            column = Some(named);
            keys.extend(listed);
        }
        distinct(&mut keys);
        return column.map(|column| (column, keys));
    }
    None
}

/// `keys` sorted, each once.
fn distinct(keys: &mut Vec<ScalarValue>) {
    keys.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    keys.dedup();
}

/// Whether `expr` is the literal `false` (a partition with no key).
fn accepts_nothing(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.downcast_ref::<Literal>()
        .is_some_and(|literal| literal.value() == &ScalarValue::Boolean(Some(false)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::expressions::{col, in_list, lit};

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("src", DataType::Int64, false),
            Field::new("dst", DataType::Int64, false),
        ])
    }

    fn list(column: &str, keys: &[Option<i64>]) -> Arc<dyn PhysicalExpr> {
        let schema = schema();
        let items = keys
            .iter()
            .map(|key| lit(ScalarValue::Int64(*key)))
            .collect();
        in_list(col(column, &schema).unwrap(), items, &false, &schema).unwrap()
    }

    fn and(left: Arc<dyn PhysicalExpr>, right: Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr> {
        Arc::new(BinaryExpr::new(left, Operator::And, right))
    }

    fn bound(operator: Operator, key: i64) -> Arc<dyn PhysicalExpr> {
        Arc::new(BinaryExpr::new(
            col("src", &schema()).unwrap(),
            operator,
            lit(ScalarValue::Int64(Some(key))),
        ))
    }

    fn keys(found: Option<(String, Vec<ScalarValue>)>) -> Option<(String, Vec<i64>)> {
        found.map(|(column, keys)| {
            let numbers = keys
                .into_iter()
                .map(|key| match key {
                    ScalarValue::Int64(Some(number)) => number,
                    other => panic!("{other:?}"),
                })
                .collect();
            (column, numbers)
        })
    }

    #[test]
    fn a_list_of_keys_is_found_without_its_nulls_and_repeats() {
        let listed_keys = keys(listed(&list("src", &[Some(3), None, Some(1), Some(3)])));
        assert_eq!(listed_keys, Some(("src".into(), vec![1, 3])));
        // Nulls alone name nothing to look up.
        assert_eq!(keys(listed(&list("src", &[None]))), None);
        // The join's bounds beside its list: the list.
        let bounded = and(
            and(bound(Operator::GtEq, 1), bound(Operator::LtEq, 3)),
            list("src", &[Some(1), Some(3)]),
        );
        assert_eq!(keys(listed(&bounded)), Some(("src".into(), vec![1, 3])));
        // Bounds alone, a negated list, a disjunction: no lookup.
        assert_eq!(keys(listed(&bound(Operator::GtEq, 1))), None);
        let schema = schema();
        let negated = in_list(
            col("src", &schema).unwrap(),
            vec![lit(ScalarValue::Int64(Some(1)))],
            &true,
            &schema,
        )
        .unwrap();
        assert_eq!(keys(listed(&negated)), None);
        let either: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            list("src", &[Some(1)]),
            Operator::Or,
            list("src", &[Some(2)]),
        ));
        assert_eq!(keys(listed(&either)), None);
    }

    #[test]
    fn a_choice_by_partition_looks_up_every_partitions_keys_or_none() {
        let schema = schema();
        let partition = |at: i64| lit(ScalarValue::Int64(Some(at)));
        let case = |branches: Vec<(i64, Arc<dyn PhysicalExpr>)>, otherwise: bool| {
            let when_then = branches
                .into_iter()
                .map(|(at, then)| (partition(at), then))
                .collect();
            let expr: Arc<dyn PhysicalExpr> = Arc::new(
                CaseExpr::try_new(
                    Some(col("src", &schema).unwrap()),
                    when_then,
                    Some(lit(otherwise)),
                )
                .unwrap(),
            );
            expr
        };
        let both = case(
            vec![
                (0, list("src", &[Some(4), Some(2)])),
                (1, lit(false)),
                (2, list("src", &[Some(2), Some(9)])),
            ],
            false,
        );
        assert_eq!(keys(listed(&both)), Some(("src".into(), vec![2, 4, 9])));
        // A partition that gave up (true) or lists another column: read every row.
        let gave_up = case(vec![(0, list("src", &[Some(4)]))], true);
        assert_eq!(keys(listed(&gave_up)), None);
        let mixed = case(
            vec![(0, list("src", &[Some(4)])), (1, list("dst", &[Some(5)]))],
            false,
        );
        assert_eq!(keys(listed(&mixed)), None);
    }
}
