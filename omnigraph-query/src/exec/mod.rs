//! The operators of our own that plans hold, as DataFusion `ExecutionPlan`s with
//! declared partitioning, and the physical planner that knows them.

pub(crate) mod expand;
pub(crate) mod joined_scan;
pub(crate) mod key_take;
pub(crate) mod leg;
pub(crate) mod parameter_scan;
pub(crate) mod prefix;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::SessionState;
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::{LogicalPlan, UserDefinedLogicalNode};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::{Partitioning, PlanProperties};
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};
use std::sync::Arc;

/// The properties of a leaf of ours: one partition of `schema`'s rows, emitted as they
/// are read, bounded.
pub(crate) fn one_partition(schema: SchemaRef) -> PlanProperties {
    PlanProperties::new(
        EquivalenceProperties::new(schema),
        Partitioning::UnknownPartitioning(1),
        EmissionType::Incremental,
        Boundedness::Bounded,
    )
}

/// A leaf's `with_new_children`: itself for no children, else an internal error
/// naming `what`.
pub(crate) fn leaf_with_no_children(
    leaf: Arc<dyn ExecutionPlan>,
    children: &[Arc<dyn ExecutionPlan>],
    what: &str,
) -> Result<Arc<dyn ExecutionPlan>> {
    match children {
        [] => Ok(leaf),
        _ => Err(DataFusionError::Internal(format!("{what} has no children"))),
    }
}

/// DataFusion's physical planner, with our operators.
#[derive(Debug)]
pub(crate) struct Operators;

#[async_trait]
impl QueryPlanner for Operators {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session_state: &SessionState,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(Extensions)])
            .create_physical_plan(logical_plan, session_state)
            .await
    }
}

struct Extensions;

#[async_trait]
impl ExtensionPlanner for Extensions {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session_state: &SessionState,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        if let Some(leg) = node.as_any().downcast_ref::<leg::Leg>() {
            return match physical_inputs {
                [] => Ok(Some(leg.plan(None))),
                [input] => Ok(Some(leg.plan(Some(input.clone())))),
                _ => Ok(None),
            };
        }
        let Some(expand) = node.as_any().downcast_ref::<expand::Expand>() else {
            return Ok(None);
        };
        let [input] = physical_inputs else {
            return Ok(None);
        };
        expand.plan(input.clone()).map(Some)
    }
}
