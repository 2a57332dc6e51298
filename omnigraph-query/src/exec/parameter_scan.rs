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
//! filters, which `run.rs` puts in the leaf's place before the run starts: the read is
//! the one a plan made for the values makes. A scan without placeholders (a plan bound
//! before it is planned, as every `EXPLAIN` and `PROFILE` is) is Lance's, as before.

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use std::collections::BTreeMap;
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
            filter.apply(|expr| {
                placeholders |= matches!(expr, Expr::Placeholder(_));
                Ok(match placeholders {
                    true => TreeNodeRecursion::Stop,
                    false => TreeNodeRecursion::Continue,
                })
            })?;
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
    projection: Option<Vec<usize>>,
    /// The filters DataFusion pushed to the scan, placeholders and all.
    filters: Vec<Expr>,
    limit: Option<usize>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl ParameterScanExec {
    /// Lance's scan of this table with the filters bound to `parameters` and simplified
    /// (a cast of a value folded), as a plan made for the values would scan. An error
    /// when a value does not fit (a cast that fails), or when Lance's plan is not the
    /// shape the leaf's parents were made for: the caller then plans the query with its
    /// values, whose errors are the query's own.
    pub(crate) async fn bind(
        &self,
        session: &dyn Session,
        parameters: &BTreeMap<String, ScalarValue>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let table = Arc::new(DFSchema::try_from(self.lance.schema())?);
        let simplifier = ExprSimplifier::new(SimplifyContext::builder().with_schema(table).build());
        let mut filters = Vec::with_capacity(self.filters.len());
        for filter in &self.filters {
            let bound = filter
                .clone()
                .transform_up(|expr| match expr {
                    Expr::Placeholder(Placeholder { id, field }) => {
                        let value = id
                            .strip_prefix('$')
                            .and_then(|name| parameters.get(name))
                            .ok_or_else(|| {
                                DataFusionError::Plan(format!("no value for the placeholder {id}"))
                            })?;
                        let value = match field {
                            Some(field) if value.data_type() != *field.data_type() => {
                                value.cast_to(field.data_type())?
                            }
                            _ => value.clone(),
                        };
                        Ok(Transformed::yes(Expr::Literal(value, None)))
                    }
                    other => Ok(Transformed::no(other)),
                })?
                .data;
            filters.push(simplifier.simplify(bound)?);
        }
        let plan = self
            .lance
            .scan(session, self.projection.as_ref(), &filters, self.limit)
            .await?;
        let partitions = plan.properties().output_partitioning().partition_count();
        let columns = plan.schema();
        let same_columns = columns.fields().len() == self.schema.fields().len()
            && columns
                .fields()
                .iter()
                .zip(self.schema.fields())
                .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
        if partitions != 1 || !same_columns {
            return Err(DataFusionError::Plan(format!(
                "Lance planned the bound scan in {partitions} partitions with columns {columns}, \
                 not the one partition and columns {} the shared plan was made for",
                self.schema
            )));
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
