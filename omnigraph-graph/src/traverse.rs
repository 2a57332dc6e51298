//! Multi-hop traversal at one commit. Each step follows one edge type from the whole
//! frontier at once: the frontier's keys go to Lance in `IN` filters of
//! `KEY_LOOKUP_KEYS_MAX` keys each (with the step's edge filter pushed down beside them),
//! never one query per node; or, when optimize built the edge table's adjacency artifact
//! from the very version the commit pins, from that artifact, with no query
//! ([`crate::adjacency`]). The nodes a step reaches are deduplicated, filtered by the
//! step's node filter in the same batched way, and cut to the step's limit in key
//! order (the order of the keys' text form: `"p10"` before `"p9"`, `10` before `9`),
//! which is said, never silent. Edges never dangle (every writer checks their
//! endpoints), so a step without a node filter reads no node rows until the last.

use crate::graph::CommitRef;
use crate::layout;
use crate::limits::{
    KEY_LOOKUP_KEYS_MAX, READ_LIMIT_MAX, TRAVERSE_EDGES_PER_STEP_MAX, TRAVERSE_STARTS_MAX,
    TRAVERSE_STEPS_MAX,
};
use crate::omnigraph::Omnigraph;
use crate::reads::collect;
use crate::rows;
use omnigraph_core::schema::{
    Catalog, DeclKind, EDGE_DST_COLUMN, EDGE_ID_COLUMN, EDGE_SRC_COLUMN, TypeDef,
};
use omnigraph_core::{InputLocation, OmniError, Result};
use omnigraph_publish::adjacency::{Adjacency, AdjacencyWay};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Which way a step follows its edge type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StepDirection {
    /// From the edge's source to its destination.
    Out,
    /// From the edge's destination to its source.
    In,
    /// Either way: for an edge type whose two ends are the same node type.
    Both,
}

/// One step of a traversal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The edge type followed.
    pub edge_type: String,
    /// Which way.
    pub direction: StepDirection,
    /// A filter on the edges followed (Lance SQL on the edge's properties).
    pub edge_filter: Option<String>,
    /// A filter on the nodes reached (Lance SQL on their properties): the others are
    /// not reached, and the next step does not start from them.
    pub node_filter: Option<String>,
    /// The most nodes this step reaches, in key order; at most [`READ_LIMIT_MAX`].
    pub limit: usize,
}

impl Step {
    /// A step along `edge_type` in `direction`, with no filter and the largest limit.
    pub fn new(edge_type: &str, direction: StepDirection) -> Step {
        Step {
            edge_type: edge_type.to_string(),
            direction,
            edge_filter: None,
            node_filter: None,
            limit: READ_LIMIT_MAX,
        }
    }
}

/// How a step found its edges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepVia {
    /// The edge table's adjacency artifact, built from the version the commit pins.
    Adjacency,
    /// The edge table (through its index when built).
    EdgeTable,
}

/// What one step did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StepReport {
    /// The edge type followed.
    pub edge_type: String,
    /// Which way.
    pub direction: StepDirection,
    /// The type of the nodes reached.
    pub node_type: String,
    /// Edges followed.
    pub edges: usize,
    /// Distinct nodes reached (after the node filter and the limit).
    pub reached: usize,
    /// Whether the limit left nodes out.
    pub truncated: bool,
    /// How it found its edges; `None` when it started from no node.
    pub via: Option<StepVia>,
    /// Why it did not use an adjacency artifact, when it read the edge table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adjacency_passed: Option<String>,
}

/// One way from a start node to a node reached: `nodes` has one key more than `edges`,
/// which holds the ids of the edges between them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TraversalPath {
    /// The keys of the nodes along the path, the start first.
    pub nodes: Vec<Value>,
    /// The ids of the edges along the path.
    pub edges: Vec<Value>,
}

/// What a traversal reached.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Traversal {
    /// The seq of the commit read.
    pub seq: u64,
    /// The type of the nodes the last step reached.
    pub node_type: String,
    /// The nodes the last step reached, in key order.
    pub nodes: Vec<Map<String, Value>>,
    /// What each step did.
    pub steps: Vec<StepReport>,
    /// When asked for: one path to each node reached, in the order of `nodes`.
    pub paths: Option<Vec<TraversalPath>>,
}

/// A step checked against the catalog.
struct PlannedStep<'a> {
    step: &'a Step,
    /// `(near column, far column)` per way followed.
    ways: Vec<(&'static str, &'static str)>,
    far: TypeDef,
}

/// How a node was reached: the node it came from and the edge's id.
type Parent = (String, Value);

fn bad(field: String, message: String) -> OmniError {
    OmniError::bad_input(InputLocation::in_source("traverse").field(field), message)
}

/// A query's bad input, named as the traversal's `field` (a step's filter).
fn naming(field: &str) -> impl Fn(OmniError) -> OmniError + '_ {
    move |error| match error {
        OmniError::BadInput { message, .. } => bad(field.to_string(), message),
        other => other,
    }
}

/// Checks `steps` from nodes of `start` against `catalog`.
fn plan<'a>(catalog: &Catalog, start: &str, steps: &'a [Step]) -> Result<Vec<PlannedStep<'a>>> {
    if steps.is_empty() {
        return Err(bad(
            "steps".into(),
            "a traversal takes at least one step".into(),
        ));
    }
    if steps.len() > TRAVERSE_STEPS_MAX {
        return Err(bad(
            "steps".into(),
            format!(
                "{} steps are more than the most one traversal takes ({TRAVERSE_STEPS_MAX})",
                steps.len()
            ),
        ));
    }
    let start_type = catalog
        .get(start)
        .ok_or_else(|| bad("type".into(), format!("the schema has no type {start}")))?;
    if !start_type.is_node() {
        return Err(bad(
            "type".into(),
            format!("{start} is an edge type, not a node type"),
        ));
    }
    let mut near = start.to_string();
    let mut planned = Vec::with_capacity(steps.len());
    for (index, step) in steps.iter().enumerate() {
        let at = |what: &str| format!("steps[{index}].{what}");
        let edge = catalog.get(&step.edge_type).ok_or_else(|| {
            bad(
                at("edge"),
                format!("the schema has no type {}", step.edge_type),
            )
        })?;
        let DeclKind::Edge { from, to } = edge.kind() else {
            return Err(bad(
                at("edge"),
                format!("{} is a node type, not an edge type", step.edge_type),
            ));
        };
        let (ways, far) = match step.direction {
            StepDirection::Out if *from == near => (vec![(EDGE_SRC_COLUMN, EDGE_DST_COLUMN)], to),
            StepDirection::In if *to == near => (vec![(EDGE_DST_COLUMN, EDGE_SRC_COLUMN)], from),
            StepDirection::Both if *from == near && *to == near => (
                vec![
                    (EDGE_SRC_COLUMN, EDGE_DST_COLUMN),
                    (EDGE_DST_COLUMN, EDGE_SRC_COLUMN),
                ],
                to,
            ),
            direction => {
                return Err(bad(
                    at("direction"),
                    format!(
                        "{} goes from {from} to {to}: it does not lead {} from {near}",
                        step.edge_type,
                        match direction {
                            StepDirection::Out => "out",
                            StepDirection::In => "in",
                            StepDirection::Both => "both ways",
                        }
                    ),
                ));
            }
        };
        // Each filter is one expression over its type's own columns, checked before it
        // is joined to the key filter: `x) OR (true` cannot widen a step.
        if let Some(filter) = step.edge_filter.as_deref() {
            omnigraph_core::filter::check_on_type(edge, filter, "traverse")
                .map_err(naming(&at("edge_filter")))?;
        }
        if let Some(filter) = step.node_filter.as_deref() {
            omnigraph_core::filter::check_on_type(catalog.require(far)?, filter, "traverse")
                .map_err(naming(&at("node_filter")))?;
        }
        if step.limit > READ_LIMIT_MAX {
            return Err(bad(
                at("limit"),
                format!(
                    "a limit of {} is over the most one step reaches ({READ_LIMIT_MAX})",
                    step.limit
                ),
            ));
        }
        planned.push(PlannedStep {
            step,
            ways,
            far: catalog.require(far)?.clone(),
        });
        near = far.clone();
    }
    Ok(planned)
}

/// `filter` and `extra` (checked to be one expression) joined, each in parentheses; a
/// line break ends any comment in `extra` before its parenthesis closes.
fn and(filter: String, extra: Option<&str>) -> String {
    match extra {
        Some(extra) => format!("({filter}) AND ({extra}\n)"),
        None => filter,
    }
}

/// `column IN (...)` for rendered keys of `key_type`.
fn in_filter(
    column: &str,
    keys: &[&String],
    key_type: omnigraph_core::schema::PropertyType,
) -> String {
    rows::key_in_filter(column, keys.iter().map(|key| key.as_str()), key_type)
}

impl Omnigraph {
    /// Follows `steps` from the nodes of `start_type` with `start_keys`, at `at`: the
    /// nodes the last step reaches, in key order, what each step did, and with `paths`
    /// one path to each node. A start key no node has reaches nothing.
    pub async fn traverse(
        &self,
        start_type: &str,
        start_keys: &[Value],
        steps: &[Step],
        paths: bool,
        at: &CommitRef,
    ) -> Result<Traversal> {
        let commit = self.graph().commit(self.branch(), at).await?;
        let catalog = self.catalog_at(&commit).await?;
        let planned = plan(&catalog, start_type, steps)?;
        if start_keys.len() > TRAVERSE_STARTS_MAX {
            return Err(bad(
                "keys".into(),
                format!(
                    "{} start keys are more than one traversal takes ({TRAVERSE_STARTS_MAX})",
                    start_keys.len()
                ),
            ));
        }
        let start = catalog.require(start_type)?;
        // Rendered keys (the engine's one text form of a key) to their values.
        let mut frontier: BTreeMap<String, Value> = BTreeMap::new();
        for key in start_keys {
            rows::key_filter_literal(start, key)?;
            frontier.insert(rows::render_key(key), key.clone());
        }
        let mut first_adjacency = Some(self.adjacency_for(&commit, planned[0].step, paths).await);
        if first_adjacency.as_ref().is_some_and(|first| first.is_err()) {
            // Only keys some node has start. An artifact needs no such read: an edge
            // never names a missing node, so a key no node has reaches nothing there.
            let frontier_keys: Vec<&String> = frontier.keys().collect();
            let present = self
                .node_keys(&commit, start, &frontier_keys, None, "keys")
                .await?;
            frontier.retain(|key, _| present.contains_key(key));
        }
        let mut parents: Vec<BTreeMap<String, Parent>> = Vec::with_capacity(planned.len());
        let mut reports = Vec::with_capacity(planned.len());
        let mut near_type = start.clone();
        for (index, step) in planned.iter().enumerate() {
            let edges = self.table_of_type(&commit, &step.step.edge_type).await?;
            let mut reached: BTreeMap<String, (Value, Parent)> = BTreeMap::new();
            let mut followed = 0usize;
            let keys: Vec<&String> = frontier.keys().collect();
            let adjacency = match first_adjacency.take() {
                Some(first) => first,
                None => self.adjacency_for(&commit, step.step, paths).await,
            };
            let (via, adjacency_passed) = match &adjacency {
                Ok(adjacency) => {
                    followed = follow_adjacency(adjacency, step, index, &keys, &mut reached)?;
                    (StepVia::Adjacency, None)
                }
                Err(why) => (StepVia::EdgeTable, Some(why.clone())),
            };
            let lookups = if adjacency.is_ok() {
                &[][..]
            } else {
                &step.ways[..]
            };
            for (way, (near_column, far_column)) in lookups.iter().enumerate() {
                for chunk in keys.chunks(KEY_LOOKUP_KEYS_MAX) {
                    let keyed = in_filter(near_column, chunk, near_type.key_type());
                    // Both ways: a self-loop is found from either end and counts once.
                    // The second way leaves it out in the query, so the read limit
                    // counts only the edges the step keeps.
                    let keyed = if way == 0 {
                        keyed
                    } else {
                        format!("({keyed}) AND `{near_column}` != `{far_column}`")
                    };
                    let filter = and(keyed, step.step.edge_filter.as_deref());
                    let rows = collect(
                        &edges,
                        Some(&filter),
                        &[near_column, far_column, EDGE_ID_COLUMN],
                        Some(TRAVERSE_EDGES_PER_STEP_MAX - followed + 1),
                    )
                    .await
                    .map_err(naming(&format!("steps[{index}].edge")))?;
                    followed += rows.len();
                    if followed > TRAVERSE_EDGES_PER_STEP_MAX {
                        return Err(too_many_edges(index, step));
                    }
                    for mut row in rows {
                        let (Some(near), Some(far), Some(id)) = (
                            row.remove(*near_column),
                            row.remove(*far_column),
                            row.remove(EDGE_ID_COLUMN),
                        ) else {
                            return Err(OmniError::internal(format!(
                                "an edge of {} read without its endpoints or id",
                                step.step.edge_type
                            )));
                        };
                        // The first edge found to a node is its path.
                        reached
                            .entry(rows::render_key(&far))
                            .or_insert((far, (rows::render_key(&near), id)));
                    }
                }
            }
            let last = index + 1 == planned.len();
            if let Some(node_filter) = step.step.node_filter.as_deref() {
                let keys: Vec<&String> = reached.keys().collect();
                let kept = self
                    .node_keys(
                        &commit,
                        &step.far,
                        &keys,
                        Some(node_filter),
                        &format!("steps[{index}].node_filter"),
                    )
                    .await?;
                reached.retain(|key, _| kept.contains_key(key));
            }
            let truncated = reached.len() > step.step.limit;
            // Key order: the limit keeps the same nodes at every run.
            let reached: BTreeMap<String, (Value, Parent)> =
                reached.into_iter().take(step.step.limit).collect();
            reports.push(StepReport {
                edge_type: step.step.edge_type.clone(),
                direction: step.step.direction,
                node_type: step.far.name().to_string(),
                edges: followed,
                reached: reached.len(),
                truncated,
                via: Some(via),
                adjacency_passed,
            });
            let mut step_parents = BTreeMap::new();
            frontier = BTreeMap::new();
            for (key, (value, parent)) in reached {
                step_parents.insert(key.clone(), parent);
                frontier.insert(key, value);
            }
            parents.push(step_parents);
            near_type = step.far.clone();
            if last || frontier.is_empty() {
                // Later steps reach nothing from an empty frontier.
                for later in &planned[index + 1..] {
                    reports.push(StepReport {
                        edge_type: later.step.edge_type.clone(),
                        direction: later.step.direction,
                        node_type: later.far.name().to_string(),
                        edges: 0,
                        reached: 0,
                        truncated: false,
                        via: None,
                        adjacency_passed: None,
                    });
                    parents.push(BTreeMap::new());
                }
                break;
            }
        }
        let far = planned
            .last()
            .map(|step| step.far.clone())
            .ok_or_else(|| OmniError::internal("a planned traversal has no step"))?;
        let keys: Vec<&String> = frontier.keys().collect();
        let mut nodes = self.node_rows(&commit, &far, &keys, None, &[]).await?;
        let key_column = far.key_column().to_string();
        nodes.sort_by_cached_key(|row| {
            rows::render_key(row.get(&key_column).unwrap_or(&Value::Null))
        });
        let paths = paths.then(|| {
            nodes
                .iter()
                .map(|row| path_to(row.get(&key_column).unwrap_or(&Value::Null), &parents))
                .collect()
        });
        Ok(Traversal {
            seq: commit.seq,
            node_type: far.name().to_string(),
            nodes,
            steps: reports,
            paths,
        })
    }

    /// The adjacency artifact `step` may use at `commit`, or why it reads its edge table:
    /// adjacency reads are off, the traversal returns paths (which name edge ids, and
    /// the artifact holds none), the step filters edges (on properties the artifact
    /// does not hold), or there is no current artifact to use.
    async fn adjacency_for(
        &self,
        commit: &crate::commit::GraphCommit,
        step: &Step,
        paths: bool,
    ) -> std::result::Result<Arc<Adjacency>, String> {
        if !self.reads_adjacency() {
            return Err("adjacency reads are off on this handle".into());
        }
        if paths {
            return Err("paths name edge ids, which an artifact does not hold".into());
        }
        if step.edge_filter.is_some() {
            return Err("the step filters edges on their properties".into());
        }
        self.adjacency_at(commit, &step.edge_type).await
    }

    /// Which of `keys` (rendered) some node of `node` has, where `filter` holds: their
    /// rendered keys to their values. `field` names the filter in an error.
    async fn node_keys(
        &self,
        commit: &crate::commit::GraphCommit,
        node: &TypeDef,
        keys: &[&String],
        filter: Option<&str>,
        field: &str,
    ) -> Result<BTreeMap<String, Value>> {
        let key_column = node.key_column();
        let rows = self
            .node_rows(commit, node, keys, filter, &[key_column])
            .await
            .map_err(naming(field))?;
        Ok(rows
            .into_iter()
            .filter_map(|mut row| row.remove(key_column))
            .map(|key| (rows::render_key(&key), key))
            .collect())
    }

    /// The `columns` (all when empty) of the nodes of `node` with `keys` (rendered)
    /// where `filter` holds, read in chunks of `KEY_LOOKUP_KEYS_MAX` keys.
    async fn node_rows(
        &self,
        commit: &crate::commit::GraphCommit,
        node: &TypeDef,
        keys: &[&String],
        filter: Option<&str>,
        columns: &[&str],
    ) -> Result<Vec<Map<String, Value>>> {
        let table = self.table_of_type(commit, node.name()).await?;
        let mut found = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(KEY_LOOKUP_KEYS_MAX) {
            let keyed = in_filter(node.key_column(), chunk, node.key_type());
            let filter = and(keyed, filter);
            found.extend(collect(&table, Some(&filter), columns, Some(chunk.len())).await?);
        }
        Ok(found)
    }
}

fn too_many_edges(index: usize, step: &PlannedStep<'_>) -> OmniError {
    bad(
        format!("steps[{index}]"),
        format!(
            "step {index} follows more than {TRAVERSE_EDGES_PER_STEP_MAX} {} edges: narrow it with a filter, or a smaller limit on the step before",
            step.step.edge_type
        ),
    )
}

/// Follows `step` from the rendered `keys` in `adjacency`, as the edge table lookups
/// would (a self-loop counts once in a both-ways step), into `reached`; returns the
/// edges followed. Paths are never asked of an artifact, so no edge id is kept.
fn follow_adjacency(
    adjacency: &Adjacency,
    step: &PlannedStep<'_>,
    index: usize,
    keys: &[&String],
    reached: &mut BTreeMap<String, (Value, Parent)>,
) -> Result<usize> {
    let mut followed = 0usize;
    for (way, (near_column, _)) in step.ways.iter().enumerate() {
        let direction = if *near_column == EDGE_SRC_COLUMN {
            AdjacencyWay::Out
        } else {
            AdjacencyWay::In
        };
        for near in keys {
            for far in adjacency.far_keys(near, direction) {
                if way > 0 && far == near.as_str() {
                    continue;
                }
                followed += 1;
                if followed > TRAVERSE_EDGES_PER_STEP_MAX {
                    return Err(too_many_edges(index, step));
                }
                if !reached.contains_key(far) {
                    // A key reaches a query only as the far type's key: an artifact
                    // that names another (a crafted one) is refused as corrupt.
                    let value: Value = serde_json::from_str(far)
                        .ok()
                        .filter(|value| rows::key_filter_literal(&step.far, value).is_ok())
                        .ok_or_else(|| {
                            OmniError::corrupt(
                                layout::adjacency_path(adjacency.table_id(), adjacency.version()),
                                format!("{far} is not a key of {}", step.far.name()),
                            )
                        })?;
                    reached.insert(far.to_string(), (value, ((*near).clone(), Value::Null)));
                }
            }
        }
    }
    Ok(followed)
}

/// The path to the node with key `key` reached by the last step, back through each
/// step's parents.
fn path_to(key: &Value, parents: &[BTreeMap<String, Parent>]) -> TraversalPath {
    let mut nodes = vec![key.clone()];
    let mut edges = Vec::with_capacity(parents.len());
    let mut at = rows::render_key(key);
    for step in parents.iter().rev() {
        let Some((near, edge)) = step.get(&at) else {
            break;
        };
        edges.push(edge.clone());
        nodes.push(serde_json::from_str(near).unwrap_or(Value::String(near.clone())));
        at = near.clone();
    }
    nodes.reverse();
    edges.reverse();
    TraversalPath { nodes, edges }
}
