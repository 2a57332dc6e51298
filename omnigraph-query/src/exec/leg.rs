//! A retrieval leg: the `k` nodes of one type nearest to a vector or best matching a
//! text, read through Lance at the version the commit pins, each with its score and
//! rank.
//!
//! Unrestricted, a leg searches the whole table: the vector index when one is built
//! (Lance searches the fragments it does not cover exactly, and merges), the inverted
//! index for text (BM25; flat BM25 where it is missing or stale).
//!
//! Restricted to candidates (the nodes a pattern bound before it), a leg ranks those
//! only. Their keys are Lance's *prefilter*, so the top `k` is taken among them and a
//! leg returns `min(k, candidates that match)` rows, never fewer because a post-filter
//! dropped some. A restricted vector leg is exact: it reads the candidates' vectors and
//! computes every distance (Lance's prefiltered IVF search may stop short of `k` when
//! the probes it is held to miss the candidates).
//!
//! Ranks are competition ranks: a hit's rank is one more than the number of hits
//! strictly better, so equal scores share a rank and a fusion does not depend on the
//! order Lance returns ties in.
//!
//! One node runs every leg of a call (a fusion has several): the candidates are read
//! once, and the legs' searches run at once; each row says which leg found it.

use crate::limits::{LEG_CANDIDATES_MAX, LEG_FETCH_MAX};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, RecordBatch, new_empty_array,
};
use datafusion::arrow::compute::{cast, concat, take};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{DFSchema, DFSchemaRef, DataFusionError, Result, ScalarValue};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlan, UserDefinedLogicalNodeCore, col, lit};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};
use omnigraph_core::OmniError;
use omnigraph_core::lance::Dataset;
use omnigraph_core::lance_index::scalar::FullTextSearchQuery;
use omnigraph_core::lance_index::scalar::inverted::query::{
    FtsQuery, MatchQuery, Operator, PhraseQuery,
};
use omnigraph_core::lance_linalg::distance::DistanceType;
use std::cmp::Ordering;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// What a leg searches for.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Search {
    /// The rows whose `property` is nearest to `query` (Lance's distance: squared
    /// Euclidean for L2, `1 - cos` for cosine, `1 - x·y` for dot).
    Vector {
        property: String,
        query: Vec<f32>,
        /// `None`: the index's own metric (L2 for the indexes the engine builds).
        metric: Option<DistanceType>,
        /// The fewest IVF partitions probed; Lance probes more until it has `k` rows.
        /// `None`: the index's default share.
        nprobes: Option<usize>,
        /// The property's declared vector index, whose default share applies.
        index: Option<String>,
        /// Re-rank `k × refine` candidates by exact distance.
        refine: Option<u32>,
    },
    /// The rows whose `property` best matches `query` by BM25.
    Text {
        property: String,
        query: String,
        matching: TextMatch,
        /// The property's declared full-text index (a phrase needs its positions).
        index: Option<String>,
    },
}

/// How a text leg matches its query's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TextMatch {
    /// A row holding any of the words, each within `fuzziness` edits.
    Any { fuzziness: u32 },
    /// A row holding every word, each within `fuzziness` edits.
    All { fuzziness: u32 },
    /// A row holding the words in order, at most `slop` words between each two
    /// consecutive ones.
    Phrase { slop: u32 },
    /// A row holding any of the words, the last standing for the words that begin
    /// with it (`prefix.rs`).
    Prefix,
}

impl std::fmt::Display for TextMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            TextMatch::Any { fuzziness } => write!(f, "any word, fuzziness {fuzziness}"),
            TextMatch::All { fuzziness } => write!(f, "every word, fuzziness {fuzziness}"),
            TextMatch::Phrase { slop } => write!(f, "phrase, slop {slop}"),
            TextMatch::Prefix => write!(f, "any word, the last a prefix"),
        }
    }
}

impl Search {
    /// Whether a smaller score is better (a distance) or a larger one (a BM25 score).
    fn smaller_is_better(&self) -> bool {
        matches!(self, Search::Vector { .. })
    }

    fn score_column(&self) -> &'static str {
        match self {
            Search::Vector { .. } => "_distance",
            Search::Text { .. } => "_score",
        }
    }

    fn describe(&self) -> String {
        match self {
            Search::Vector {
                property, query, ..
            } => format!("vector {property} ({} dimensions)", query.len()),
            Search::Text {
                property, matching, ..
            } => format!("text {property} ({matching})"),
        }
    }
}

/// One leg: where it searches and for what.
#[derive(Debug)]
pub(crate) struct LegSpec {
    pub(crate) table: Arc<Dataset>,
    pub(crate) type_name: String,
    /// The type's key column in its table.
    pub(crate) key_column: String,
    pub(crate) search: Search,
    pub(crate) k: usize,
}

impl LegSpec {
    /// As `EXPLAIN` shows it, over candidates when the leg has an `input`.
    fn describe<T>(&self, input: &Option<T>) -> String {
        format!(
            "top {} of {} by {}{}",
            self.k,
            self.type_name,
            self.search.describe(),
            if input.is_some() {
                ", among candidates"
            } else {
                ""
            }
        )
    }

    fn identity(&self) -> (&str, u64, &str, String, usize) {
        (
            &self.type_name,
            self.table.version().version,
            &self.key_column,
            format!("{:?}", self.search),
            self.k,
        )
    }
}

/// The names of the legs' columns.
pub(crate) struct LegColumns {
    /// The node's key, of the type's key type.
    pub(crate) key: String,
    /// Lance's distance or BM25 score (Float64).
    pub(crate) score: String,
    /// The competition rank (Int64).
    pub(crate) rank: String,
    /// The score scaled over the leg's hits to 0 (the worst) to 1 (the best), Float64;
    /// 1 when every hit scores the same. A fusion by score sums these.
    pub(crate) normalised: String,
    /// Which leg found the row: its place among the call's legs (Int64).
    pub(crate) leg: String,
}

/// The logical legs: the columns [`LegColumns`] names, at most each leg's `k` rows
/// from each leg. With an input, the input's one column holds the
/// candidates' keys (of the key's type).
#[derive(Clone, Debug)]
pub(crate) struct Leg {
    input: Option<LogicalPlan>,
    specs: Arc<[LegSpec]>,
    schema: DFSchemaRef,
}

impl Leg {
    /// The legs `specs` (of one type) over the whole table, or over the keys
    /// `candidates` holds in its only column, into columns named by `columns`.
    pub(crate) fn new(
        specs: Vec<LegSpec>,
        candidates: Option<LogicalPlan>,
        columns: &LegColumns,
    ) -> Result<Leg> {
        let Some(spec) = specs.first() else {
            return Err(DataFusionError::Internal("a call with no leg".into()));
        };
        if specs.iter().any(|other| {
            other.type_name != spec.type_name
                || other.table.version().version != spec.table.version().version
        }) {
            return Err(DataFusionError::Internal(
                "a call's legs search one table".into(),
            ));
        }
        let key_type = spec
            .table
            .schema()
            .field(&spec.key_column)
            .map(|field| field.data_type())
            .ok_or_else(|| {
                DataFusionError::Internal(format!(
                    "{} has no key column {}",
                    spec.type_name, spec.key_column
                ))
            })?;
        if let Some(candidates) = &candidates {
            let fields = candidates.schema().fields();
            if fields.len() != 1 || fields[0].data_type() != &key_type {
                return Err(DataFusionError::Internal(format!(
                    "a leg's candidates are one column of {key_type}"
                )));
            }
        }
        let fields = vec![
            Field::new(&columns.key, key_type, false),
            Field::new(&columns.score, DataType::Float64, false),
            Field::new(&columns.rank, DataType::Int64, false),
            Field::new(&columns.normalised, DataType::Float64, false),
            Field::new(&columns.leg, DataType::Int64, false),
        ];
        let schema = DFSchema::from_unqualified_fields(fields.into(), Default::default())?;
        Ok(Leg {
            input: candidates,
            specs: specs.into(),
            schema: Arc::new(schema),
        })
    }

    /// As `EXPLAIN` shows it.
    fn describe(&self) -> String {
        self.specs
            .iter()
            .map(|spec| spec.describe(&self.input))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The physical leg, planned from this node.
    pub(crate) fn plan(&self, input: Option<Arc<dyn ExecutionPlan>>) -> Arc<dyn ExecutionPlan> {
        let schema: SchemaRef = Arc::new(self.schema.as_arrow().clone());
        Arc::new(LegExec {
            properties: Arc::new(LegExec::properties_of(&schema)),
            input,
            specs: self.specs.clone(),
            described: self.describe(),
            schema,
        })
    }
}

impl PartialEq for Leg {
    fn eq(&self, other: &Leg) -> bool {
        self.input == other.input
            && self.schema == other.schema
            && self.specs.len() == other.specs.len()
            && self
                .specs
                .iter()
                .zip(other.specs.iter())
                .all(|(a, b)| a.identity() == b.identity())
    }
}

impl Eq for Leg {}

impl Hash for Leg {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.input.hash(state);
        self.schema.hash(state);
        for spec in self.specs.iter() {
            spec.identity().hash(state);
        }
    }
}

/// Ordered only when equal: legs have no order the optimizer could use.
impl PartialOrd for Leg {
    fn partial_cmp(&self, other: &Leg) -> Option<Ordering> {
        (self == other).then_some(Ordering::Equal)
    }
}

impl UserDefinedLogicalNodeCore for Leg {
    fn name(&self) -> &str {
        "Leg"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        self.input.iter().collect()
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "Leg: {}", self.describe())
    }

    fn with_exprs_and_inputs(&self, _exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> Result<Self> {
        let input = match (inputs.len(), self.input.is_some()) {
            (0, false) => None,
            (1, true) => inputs.into_iter().next(),
            (n, _) => {
                return Err(DataFusionError::Internal(format!(
                    "a leg has {} inputs, not {n}",
                    usize::from(self.input.is_some())
                )));
            }
        };
        Ok(Leg {
            input,
            ..self.clone()
        })
    }

    /// Every output column is the leg's own; its input's one column is always read.
    fn necessary_children_exprs(&self, _output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        Some(self.input.iter().map(|_| vec![0]).collect())
    }
}

/// The physical legs: one partition, one batch, emitted once every search ends.
#[derive(Debug)]
pub(crate) struct LegExec {
    input: Option<Arc<dyn ExecutionPlan>>,
    specs: Arc<[LegSpec]>,
    described: String,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl LegExec {
    fn properties_of(schema: &SchemaRef) -> PlanProperties {
        PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        )
    }
}

impl DisplayAs for LegExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "LegExec: {}", self.described)
    }
}

impl ExecutionPlan for LegExec {
    fn name(&self) -> &str {
        "LegExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.input.iter().collect()
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        self.input
            .iter()
            .map(|_| Distribution::SinglePartition)
            .collect()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != usize::from(self.input.is_some()) {
            return Err(DataFusionError::Internal(format!(
                "a leg has {} inputs, not {}",
                usize::from(self.input.is_some()),
                children.len()
            )));
        }
        Ok(Arc::new(LegExec {
            input: children.into_iter().next(),
            specs: self.specs.clone(),
            described: self.described.clone(),
            schema: self.schema.clone(),
            properties: self.properties.clone(),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "a leg has one partition, not {partition}"
            )));
        }
        let input = match &self.input {
            Some(input) => Some(input.execute(0, context)?),
            None => None,
        };
        let specs = self.specs.clone();
        let schema = self.schema.clone();
        let batch = futures::stream::once(async move {
            let candidates = match input {
                Some(input) => Some(candidates(input).await?),
                None => None,
            };
            let searches = specs
                .iter()
                .enumerate()
                .map(|(leg, spec)| search(spec, leg as i64, candidates.as_deref(), &schema));
            let batches = futures::future::try_join_all(searches).await?;
            Ok(datafusion::arrow::compute::concat_batches(
                &schema, &batches,
            )?)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            batch,
        )))
    }
}

/// The distinct non-null keys of the candidates, at most [`LEG_CANDIDATES_MAX`].
async fn candidates(mut input: SendableRecordBatchStream) -> Result<Vec<ScalarValue>> {
    let mut seen: HashSet<ScalarValue> = HashSet::new();
    let mut keys = Vec::new();
    while let Some(batch) = input.next().await {
        let batch = batch?;
        let column = batch.column(0);
        for row in 0..column.len() {
            if column.is_null(row) {
                continue;
            }
            let key = ScalarValue::try_from_array(column, row)?;
            if seen.insert(key.clone()) {
                if keys.len() == LEG_CANDIDATES_MAX {
                    return Err(DataFusionError::External(Box::new(
                        OmniError::query_failed(
                            omnigraph_core::QueryFailure::Evaluation,
                            format!(
                                "a leg restricted to more than {LEG_CANDIDATES_MAX} candidates: narrow the pattern before it, or search the whole type"
                            ),
                        ),
                    )));
                }
                keys.push(key);
            }
        }
    }
    Ok(keys)
}

/// Runs the leg's search through Lance and ranks what it returns. Hits tied with the
/// `k`-th are all read before the cut, so the cut among them is by key, not by the
/// order Lance met them in: Lance is asked for twice as many until the last hit it
/// returns scores worse than the `k`-th, or it has no more, within
/// [`LEG_FETCH_MAX`] hits.
async fn search(
    spec: &LegSpec,
    leg: i64,
    candidates: Option<&[ScalarValue]>,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    if candidates.is_some_and(<[ScalarValue]>::is_empty) {
        return Ok(RecordBatch::new_empty(schema.clone()));
    }
    let filter = candidates.map(|candidates| {
        let keys: Vec<Expr> = candidates.iter().cloned().map(lit).collect();
        col(spec.key_column.as_str()).in_list(keys, false)
    });
    // A leg's own probes and refine, else its index's defaults (as `status` reports).
    let probes = match &spec.search {
        Search::Vector {
            nprobes,
            refine,
            index,
            ..
        } => {
            // The index is read only when its defaults apply: not for candidates
            // (searched exactly) nor when the leg sets both.
            let defaults_apply = filter.is_none() && (nprobes.is_none() || refine.is_none());
            let built = match index {
                Some(index) if defaults_apply => {
                    omnigraph_core::adapter::built_vector_index(&spec.table, index)
                        .await
                        .map_err(|error| DataFusionError::External(Box::new(error)))?
                }
                _ => None,
            };
            Probes {
                nprobes: nprobes.or_else(|| {
                    built.map(|b| omnigraph_core::adapter::default_nprobes(b.partitions))
                }),
                refine: refine.or_else(|| {
                    built.and_then(|b| omnigraph_core::adapter::default_refine(b.quantisation))
                }),
            }
        }
        Search::Text {
            matching: TextMatch::Phrase { .. },
            index: Some(index),
            ..
        } => {
            let positions = omnigraph_core::adapter::full_text_positions(&spec.table, index)
                .await
                .map_err(|error| DataFusionError::External(Box::new(error)))?;
            if positions == Some(false) {
                return Err(DataFusionError::External(Box::new(
                    OmniError::query_failed(
                        omnigraph_core::QueryFailure::Evaluation,
                        format!(
                            "the full-text index {index} of {} keeps no word positions, which a phrase needs (it was built before phrases were supported): rebuild it with `omnigraph rebuild-index ROOT --type {} --index {index}`",
                            spec.type_name, spec.type_name
                        ),
                    ),
                )));
            }
            Probes {
                nprobes: None,
                refine: None,
            }
        }
        Search::Text { .. } => Probes {
            nprobes: None,
            refine: None,
        },
    };
    // A prefix's words, found before the search.
    let expanded = match &spec.search {
        Search::Text {
            property,
            query,
            matching: TextMatch::Prefix,
            index,
        } => match super::prefix::expand(
            &spec.table,
            property,
            index.as_deref(),
            query,
            filter.as_ref(),
        )
        .await?
        {
            Some(words) => Some(words),
            None => return Ok(RecordBatch::new_empty(schema.clone())),
        },
        _ => None,
    };
    // One more than k: a tie at the k-th shows in one search when it has an end.
    let mut fetch = (spec.k + 1).min(LEG_FETCH_MAX);
    loop {
        let batches =
            lance_search(spec, expanded.as_deref(), filter.clone(), fetch, probes).await?;
        let returned: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let hits = Hits::of(spec, &batches, schema)?;
        let complete =
            returned < fetch || fetch >= LEG_FETCH_MAX || hits.tie_ends_before_last(spec.k);
        if complete {
            return hits.batch(spec.k, leg, schema);
        }
        fetch = (fetch * 2).min(LEG_FETCH_MAX);
    }
}

/// How a vector search probes an IVF index.
#[derive(Clone, Copy, Debug)]
struct Probes {
    nprobes: Option<usize>,
    refine: Option<u32>,
}

/// One search of `fetch` hits through Lance; a text leg's words are `expanded` when its
/// prefix was.
async fn lance_search(
    spec: &LegSpec,
    expanded: Option<&str>,
    filter: Option<Expr>,
    fetch: usize,
    probes: Probes,
) -> Result<Vec<RecordBatch>> {
    let lance = |error| DataFusionError::External(Box::new(error));
    let mut scanner = spec.table.scan();
    // The score named too: Lance adds it unnamed today, and says it will stop.
    scanner
        .project(&[spec.key_column.as_str(), spec.search.score_column()])
        .map_err(lance)?;
    match &spec.search {
        Search::Vector {
            property,
            query,
            metric,
            ..
        } => {
            let query = datafusion::arrow::array::Float32Array::from(query.clone());
            scanner.nearest(property, &query, fetch).map_err(lance)?;
            if let Some(metric) = metric {
                scanner.distance_metric(*metric);
            }
            if filter.is_some() {
                // Exact over the candidates: see the module's docs.
                scanner.use_index(false);
            } else {
                if let Some(nprobes) = probes.nprobes {
                    scanner.minimum_nprobes(nprobes);
                }
                if let Some(refine) = probes.refine {
                    scanner.refine(refine);
                }
            }
        }
        Search::Text {
            property,
            query,
            matching,
            ..
        } => {
            let query = expanded.unwrap_or(query).to_string();
            let words = |fuzziness: u32, operator: Operator| {
                MatchQuery::new(query.clone())
                    .with_column(Some(property.clone()))
                    .with_fuzziness(Some(fuzziness))
                    .with_operator(operator)
                    .into()
            };
            let matching: FtsQuery = match *matching {
                TextMatch::Any { fuzziness } => words(fuzziness, Operator::Or),
                TextMatch::All { fuzziness } => words(fuzziness, Operator::And),
                TextMatch::Prefix => words(0, Operator::Or),
                TextMatch::Phrase { slop } => PhraseQuery::new(query.clone())
                    .with_column(Some(property.clone()))
                    .with_slop(slop)
                    .into(),
            };
            let search = FullTextSearchQuery::new_query(matching).limit(Some(fetch as i64));
            scanner.full_text_search(search).map_err(lance)?;
            scanner.limit(Some(fetch as i64), None).map_err(lance)?;
        }
    }
    if let Some(filter) = filter {
        scanner.filter_expr(filter);
        scanner.prefilter(true);
    }
    scanner
        .try_into_stream()
        .await
        .map_err(lance)?
        .try_collect()
        .await
        .map_err(lance)
}

/// What one search returned: best first (ties by key), without the rows that are no
/// hit.
struct Hits {
    keys: ArrayRef,
    scores: Vec<f64>,
}

impl Hits {
    fn of(spec: &LegSpec, batches: &[RecordBatch], schema: &SchemaRef) -> Result<Hits> {
        let score_column = spec.search.score_column();
        let mut keys: Vec<ArrayRef> = Vec::with_capacity(batches.len());
        let mut scores: Vec<ArrayRef> = Vec::with_capacity(batches.len());
        for batch in batches {
            let (Some(key), Some(score)) = (
                batch.column_by_name(&spec.key_column),
                batch.column_by_name(score_column),
            ) else {
                return Err(DataFusionError::Internal(format!(
                    "Lance's search of {} returned no {} or {score_column}",
                    spec.type_name, spec.key_column
                )));
            };
            keys.push(key.clone());
            scores.push(cast(score, &DataType::Float64)?);
        }
        let key_type = schema.field(0).data_type().clone();
        let concatenated = |arrays: &[ArrayRef], data_type: &DataType| match arrays {
            [] => Ok(new_empty_array(data_type)),
            _ => concat(&arrays.iter().map(|a| a.as_ref()).collect::<Vec<_>>()),
        };
        let keys = concatenated(&keys, &key_type)?;
        let scores = concatenated(&scores, &DataType::Float64)?;
        let values = scores.as_primitive::<datafusion::arrow::datatypes::Float64Type>();
        // A hit without a score (a null vector) is no hit; nor is a non-finite one
        // (Lance marks a candidate it did not reach with an infinite distance).
        let mut order: Vec<usize> = (0..keys.len())
            .filter(|&row| {
                !keys.is_null(row) && values.is_valid(row) && values.value(row).is_finite()
            })
            .collect();
        let key_values: Vec<ScalarValue> = (0..keys.len())
            .map(|row| ScalarValue::try_from_array(&keys, row))
            .collect::<Result<_>>()?;
        let smaller_is_better = spec.search.smaller_is_better();
        order.sort_by(|&a, &b| {
            let by_score = values.value(a).total_cmp(&values.value(b));
            let by_score = if smaller_is_better {
                by_score
            } else {
                by_score.reverse()
            };
            by_score.then_with(|| {
                key_values[a]
                    .partial_cmp(&key_values[b])
                    .unwrap_or(Ordering::Equal)
            })
        });
        let indices = datafusion::arrow::array::UInt32Array::from(
            order.iter().map(|&row| row as u32).collect::<Vec<_>>(),
        );
        Ok(Hits {
            keys: take(&keys, &indices, None)?,
            scores: order.iter().map(|&row| values.value(row)).collect(),
        })
    }

    /// Whether every hit tied with the `k`-th is in hand: there is a hit after the
    /// `k`-th, and the last scores differently (so worse). Only then is the cut at `k`
    /// by key. (When Lance had no more to give, the caller knows it is all.)
    fn tie_ends_before_last(&self, k: usize) -> bool {
        match (self.scores.get(k - 1), self.scores.last()) {
            (Some(kth), Some(last)) => self.scores.len() > k && kth != last,
            _ => false,
        }
    }

    /// The first `k` as the rows of leg `leg`, each with its competition rank.
    fn batch(self, k: usize, leg: i64, schema: &SchemaRef) -> Result<RecordBatch> {
        let count = self.scores.len().min(k);
        let mut ranks: Vec<i64> = Vec::with_capacity(count);
        for place in 0..count {
            let tied = place > 0 && self.scores[place - 1] == self.scores[place];
            ranks.push(match ranks.last() {
                Some(rank) if tied => *rank,
                _ => place as i64 + 1,
            });
        }
        let scores = &self.scores[..count];
        RecordBatch::try_new(
            Arc::new(Schema::new(schema.fields().clone())),
            vec![
                self.keys.slice(0, count),
                Arc::new(Float64Array::from(scores.to_vec())),
                Arc::new(Int64Array::from(ranks)),
                Arc::new(Float64Array::from(normalised(scores))),
                Arc::new(Int64Array::from(vec![leg; count])),
            ],
        )
        .map_err(Into::into)
    }
}

/// `scores`, best first, scaled to 1 (the first) down to 0 (the last); all 1 when they
/// are equal. Best first, so this holds for a distance and for a BM25 score alike.
fn normalised(scores: &[f64]) -> Vec<f64> {
    let (Some(best), Some(worst)) = (scores.first(), scores.last()) else {
        return Vec::new();
    };
    let span = best - worst;
    scores
        .iter()
        .map(|score| {
            if span == 0.0 {
                1.0
            } else {
                (score - worst) / span
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::normalised;

    #[test]
    fn scores_are_scaled_best_one_worst_zero() {
        // A BM25 score (larger is better) and a distance (smaller is better).
        assert_eq!(normalised(&[4.0, 3.0, 2.0]), vec![1.0, 0.5, 0.0]);
        assert_eq!(normalised(&[0.5, 1.0, 2.5]), vec![1.0, 0.75, 0.0]);
        assert_eq!(normalised(&[7.0, 7.0]), vec![1.0, 1.0]);
        assert!(normalised(&[]).is_empty());
    }
}
