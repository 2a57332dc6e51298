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
//! asked and cannot run. [`ParameterScanExec::bind`] plans Lance's own scan of the bound
//! filters, which `run.rs` puts in the leaf's place before the run starts. Lance gets
//! what a plan made for the values hands it (the same filters, projection and limit),
//! so it chooses the same index and reads the same rows. DataFusion's physical
//! optimizer does not run over Lance's scan again: a rewrite it might make inside it
//! is not made, and a query without `ORDER BY` may return its rows in another order. A
//! scan without placeholders (a plan bound before it is planned, as every `EXPLAIN`
//! and `PROFILE` is) is Lance's, as before.

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, DFSchemaRef, DataFusionError, ParamValues, Result};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::{SendableRecordBatchStream, SessionState, TaskContext};
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::optimizer::OptimizerConfig;
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use std::sync::Arc;

/// Lance's provider of a node table, whose scans with a placeholder in their filters
/// are planned when a run binds it.
#[derive(Debug)]
pub(crate) struct ParameterScan {
    lance: Arc<dyn TableProvider>,
}

impl ParameterScan {
    pub(crate) fn new(lance: Arc<dyn TableProvider>) -> ParameterScan {
        ParameterScan { lance }
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
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            // Lance plans a scan of one partition (its read of fragments is parallel
            // inside it); `bind` refuses a plan of more, which its parents were not
            // made for.
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Ok(Arc::new(ParameterScanExec {
            table: Arc::new(DFSchema::try_from(self.lance.schema())?),
            lance: self.lance.clone(),
            projection: projection.cloned(),
            filters: filters.to_vec(),
            limit,
            schema,
            properties: Arc::new(properties),
        }))
    }
}

/// A scan of a node table whose filters wait for a run's parameters: a leaf of a
/// physical plan that every run shares, replaced by Lance's scan of the bound filters
/// before the run starts ([`ParameterScanExec::bind`]). It never runs itself.
#[derive(Debug)]
pub(crate) struct ParameterScanExec {
    lance: Arc<dyn TableProvider>,
    /// The table's columns, unqualified as the filters name them: what `bind`
    /// simplifies the bound filters against.
    table: DFSchemaRef,
    projection: Option<Vec<usize>>,
    /// The filters DataFusion pushed to the scan, placeholders and all.
    filters: Vec<Expr>,
    limit: Option<usize>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
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
    ) -> std::result::Result<Arc<dyn ExecutionPlan>, Unbound> {
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
        Ok(plan)
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
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal(
                "a parameter scan has no children".into(),
            ))
        }
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
