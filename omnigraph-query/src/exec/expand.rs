//! Expansion through the adjacency artifact: each input row is repeated once per edge
//! its node has the chosen ways, with the key (and type) of the node at the far end.
//! It answers what a join of the rows with the edge table's `src`/`dst` answers, as a
//! multiset, without reading the edge table: a hop from a few nodes costs their edges,
//! not a scan of every edge.
//!
//! The artifact is untrusted state: a far key that is not a key of the far type's
//! column type is refused as corrupt, naming the artifact.

use crate::limits::{EXPAND_BATCH_ROWS_MAX, EXPAND_RESOLVED_CACHED_MAX, EXPAND_TEXT_KEY_BYTES_MAX};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int32Builder, Int64Builder, StringBuilder, UInt32Builder,
};
use datafusion::arrow::compute::{interleave, take};
use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Int64Type, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DFSchema, DFSchemaRef, DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;
use omnigraph_core::OmniError;
use omnigraph_publish::adjacency::{Adjacency, AdjacencyWay};
use omnigraph_publish::layout;
use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, Weak};

/// The types a key column of the plan may have (a node's key property's type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd)]
pub(crate) enum KeyType {
    Text,
    Int32,
    Int64,
}

impl KeyType {
    /// The key type of a plan column, when an artifact can hold it.
    pub(crate) fn of(data_type: &DataType) -> Option<KeyType> {
        match data_type {
            DataType::Utf8 => Some(KeyType::Text),
            DataType::Int32 => Some(KeyType::Int32),
            DataType::Int64 => Some(KeyType::Int64),
            _ => None,
        }
    }

    pub(crate) fn data_type(self) -> DataType {
        match self {
            KeyType::Text => DataType::Utf8,
            KeyType::Int32 => DataType::Int32,
            KeyType::Int64 => DataType::Int64,
        }
    }
}

/// One way a hop walks an edge type through its artifact.
#[derive(Clone)]
pub(crate) struct ExpandWay {
    pub(crate) adjacency: Arc<Adjacency>,
    pub(crate) direction: AdjacencyWay,
    /// The near node's type this way starts from (a row of another type skips it).
    pub(crate) from_type: String,
    /// The far node's type.
    pub(crate) to_type: String,
    /// An undirected pattern meets a loop once: the second way over the same edge
    /// type skips the edges whose ends are the same node.
    pub(crate) skip_loops: bool,
    /// The artifact's keys, parsed and checked when the hop was planned.
    pub(crate) resolved: Arc<Resolved>,
}

/// The artifact by name only: DataFusion formats plans with `Debug`, and an artifact's
/// own `Debug` prints every edge.
impl std::fmt::Debug for ExpandWay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ExpandWay({}, {} -> {})",
            self.describe(),
            self.from_type,
            self.to_type
        )
    }
}

impl ExpandWay {
    fn identity(&self) -> (&str, u64, bool, &str, &str, bool) {
        (
            self.adjacency.table_id(),
            self.adjacency.version(),
            self.direction == AdjacencyWay::Out,
            &self.from_type,
            &self.to_type,
            self.skip_loops,
        )
    }

    /// Written into EXPLAIN: the edge type's table, its version and the direction.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{}@{} {}",
            self.adjacency.table_id(),
            self.adjacency.version(),
            match self.direction {
                AdjacencyWay::Out => "out",
                AdjacencyWay::In => "in",
            }
        )
    }
}

/// The logical expansion: `input`'s columns, then the far node's key (and its type
/// when the ways reach several).
#[derive(Clone, Debug)]
pub(crate) struct Expand {
    input: LogicalPlan,
    near: String,
    near_label: Option<String>,
    ways: Arc<[ExpandWay]>,
    far: String,
    far_label: Option<String>,
    far_type: KeyType,
    schema: DFSchemaRef,
}

impl Expand {
    /// The expansion of `input`'s node in column `near` (its type in `near_label`
    /// when it may be of several) over `ways`, into the columns `far` and
    /// `far_label`. The near key must have the far key's type (the planner expands
    /// only when every node type's key has one type) and a label must be text.
    pub(crate) fn new(
        input: LogicalPlan,
        (near, near_label): (&str, Option<&str>),
        ways: Vec<ExpandWay>,
        (far, far_label): (&str, Option<&str>),
        far_type: KeyType,
    ) -> Result<Expand> {
        assert!(!ways.is_empty(), "an expansion walks at least one way");
        let schema = Self::schema_of(&input, far, far_label, far_type)?;
        let expand = Expand {
            input,
            near: near.to_string(),
            near_label: near_label.map(str::to_string),
            ways: ways.into(),
            far: far.to_string(),
            far_label: far_label.map(str::to_string),
            far_type,
            schema,
        };
        let (near, near_label) = expand.near_index(expand.input.schema())?;
        let fields = expand.input.schema().fields();
        if KeyType::of(fields[near].data_type()) != Some(far_type)
            || near_label.is_some_and(|label| fields[label].data_type() != &DataType::Utf8)
        {
            return Err(DataFusionError::Internal(format!(
                "an expansion from {} ({}) to keys of {:?}",
                expand.near,
                fields[near].data_type(),
                far_type
            )));
        }
        Ok(expand)
    }

    fn schema_of(
        input: &LogicalPlan,
        far: &str,
        far_label: Option<&str>,
        far_type: KeyType,
    ) -> Result<DFSchemaRef> {
        let mut fields = vec![Field::new(far, far_type.data_type(), false)];
        if let Some(label) = far_label {
            fields.push(Field::new(label, DataType::Utf8, false));
        }
        let added = DFSchema::from_unqualified_fields(fields.into(), Default::default())?;
        Ok(Arc::new(input.schema().join(&added)?))
    }

    /// The places of the near key and label in `schema`.
    fn near_index(&self, schema: &DFSchema) -> Result<(usize, Option<usize>)> {
        let key = schema
            .index_of_column_by_name(None, &self.near)
            .ok_or_else(|| {
                DataFusionError::Internal(format!("an expansion's input lacks {}", self.near))
            })?;
        let label = match &self.near_label {
            Some(label) => Some(schema.index_of_column_by_name(None, label).ok_or_else(|| {
                DataFusionError::Internal(format!("an expansion's input lacks {label}"))
            })?),
            None => None,
        };
        Ok((key, label))
    }

    #[allow(clippy::type_complexity)]
    fn identity(
        &self,
    ) -> (
        &LogicalPlan,
        &str,
        Option<&str>,
        Vec<(&str, u64, bool, &str, &str, bool)>,
        &str,
        Option<&str>,
        KeyType,
    ) {
        (
            &self.input,
            &self.near,
            self.near_label.as_deref(),
            self.ways.iter().map(ExpandWay::identity).collect(),
            &self.far,
            self.far_label.as_deref(),
            self.far_type,
        )
    }

    /// The physical operator over `input`, planned from this node.
    pub(crate) fn plan(&self, input: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        let (near, near_label) = self.near_index(self.input.schema())?;
        let schema: SchemaRef = Arc::new(self.schema.as_arrow().clone());
        let properties = ExpandExec::properties_of(&schema, input.as_ref());
        Ok(Arc::new(ExpandExec {
            input,
            near,
            near_label,
            ways: self.ways.clone(),
            far_type: self.far_type,
            far_label: self.far_label.is_some(),
            schema,
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }
}

impl PartialEq for Expand {
    fn eq(&self, other: &Expand) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for Expand {}

impl Hash for Expand {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

impl PartialOrd for Expand {
    fn partial_cmp(&self, other: &Expand) -> Option<Ordering> {
        self.identity().partial_cmp(&other.identity())
    }
}

impl UserDefinedLogicalNodeCore for Expand {
    fn name(&self) -> &str {
        "Expand"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    /// A filter on the input's columns holds the same below the expansion (it repeats
    /// rows, never changes them): only the far end's columns keep a filter above it.
    fn prevent_predicate_push_down_columns(&self) -> HashSet<String> {
        [Some(&self.far), self.far_label.as_ref()]
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    fn fmt_for_explain(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "Expand: {} -> {} through the adjacency of {}",
            self.near,
            self.far,
            crate::plan::describe(&self.ways)
        )
    }

    fn with_exprs_and_inputs(&self, _exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> Result<Self> {
        let [input] = <[LogicalPlan; 1]>::try_from(inputs).map_err(|inputs| {
            DataFusionError::Internal(format!("an expansion has one input, not {}", inputs.len()))
        })?;
        let schema = Self::schema_of(&input, &self.far, self.far_label.as_deref(), self.far_type)?;
        let expand = Expand {
            input,
            schema,
            ..self.clone()
        };
        expand.near_index(expand.input.schema())?;
        Ok(expand)
    }

    /// The input columns the wanted outputs name, and the near key and label always.
    fn necessary_children_exprs(&self, output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        let inputs = self.input.schema().fields().len();
        let (near, near_label) = self.near_index(self.input.schema()).ok()?;
        let needed: BTreeSet<usize> = output_columns
            .iter()
            .copied()
            .filter(|index| *index < inputs)
            .chain([near])
            .chain(near_label)
            .collect();
        Some(vec![needed.into_iter().collect()])
    }
}

/// The physical expansion (see the module's docs). It keeps its input's partitioning:
/// each partition expands its own rows.
#[derive(Debug)]
pub(crate) struct ExpandExec {
    input: Arc<dyn ExecutionPlan>,
    near: usize,
    near_label: Option<usize>,
    ways: Arc<[ExpandWay]>,
    far_type: KeyType,
    far_label: bool,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl ExpandExec {
    /// Its input's partitioning, emitted as rows arrive.
    fn properties_of(schema: &SchemaRef, input: &dyn ExecutionPlan) -> PlanProperties {
        PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            input.properties().output_partitioning().clone(),
            EmissionType::Incremental,
            Boundedness::Bounded,
        )
    }
}

impl DisplayAs for ExpandExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "ExpandExec: adjacency {}",
            crate::plan::describe(&self.ways)
        )
    }
}

impl ExecutionPlan for ExpandExec {
    fn name(&self) -> &str {
        "ExpandExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = <[Arc<dyn ExecutionPlan>; 1]>::try_from(children).map_err(|children| {
            DataFusionError::Internal(format!(
                "an expansion has one input, not {}",
                children.len()
            ))
        })?;
        let properties = ExpandExec::properties_of(&self.schema, input.as_ref());
        Ok(Arc::new(ExpandExec {
            input,
            near: self.near,
            near_label: self.near_label,
            ways: self.ways.clone(),
            far_type: self.far_type,
            far_label: self.far_label,
            schema: self.schema.clone(),
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let metrics = BaselineMetrics::new(&self.metrics, partition);
        let resolved = self.ways.iter().map(|way| way.resolved.clone()).collect();
        let expander = Arc::new(Expander {
            near: self.near,
            near_label: self.near_label,
            ways: self.ways.clone(),
            resolved,
            far_label: self.far_label,
            schema: self.schema.clone(),
        });
        let stream = input
            .map(move |batch| {
                let expander = expander.clone();
                let metrics = metrics.clone();
                let chunks: Box<dyn Iterator<Item = Result<RecordBatch>> + Send> = match batch {
                    Ok(batch) => Box::new(Chunks {
                        expander,
                        batch,
                        row: 0,
                        metrics,
                    }),
                    Err(error) => Box::new(std::iter::once(Err(error))),
                };
                futures::stream::iter(chunks)
            })
            .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// What every batch of one partition is expanded with.
struct Expander {
    near: usize,
    near_label: Option<usize>,
    ways: Arc<[ExpandWay]>,
    /// Each way's artifact's keys, parsed.
    resolved: Vec<Arc<Resolved>>,
    far_label: bool,
    schema: SchemaRef,
}

/// Keys as the plan holds them, parsed from their rendered form (the far keys of an
/// expansion's batch, the nodes of a count's degrees).
pub(crate) enum KeyColumn {
    Text(StringBuilder),
    Int32(Int32Builder),
    Int64(Int64Builder),
}

impl KeyColumn {
    pub(crate) fn new(key_type: KeyType) -> KeyColumn {
        match key_type {
            KeyType::Text => KeyColumn::Text(StringBuilder::new()),
            KeyType::Int32 => KeyColumn::Int32(Int32Builder::new()),
            KeyType::Int64 => KeyColumn::Int64(Int64Builder::new()),
        }
    }

    /// Appends the rendered key `far` (`keys::render_key`'s form), or says why it is
    /// not a key of this type.
    pub(crate) fn push(&mut self, far: &str) -> std::result::Result<(), String> {
        let refused = || format!("holds the key {far:?}, not a key of the node's type");
        match self {
            KeyColumn::Text(builder) => {
                let text = far
                    .strip_prefix('"')
                    .and_then(|rest| rest.strip_suffix('"'))
                    .ok_or_else(refused)?;
                if text.contains('\\') {
                    let unescaped: String = serde_json::from_str(far).map_err(|_| refused())?;
                    builder.append_value(unescaped);
                } else {
                    builder.append_value(text);
                }
            }
            KeyColumn::Int32(builder) => builder.append_value(far.parse().map_err(|_| refused())?),
            KeyColumn::Int64(builder) => builder.append_value(far.parse().map_err(|_| refused())?),
        }
        Ok(())
    }

    pub(crate) fn finish(self) -> ArrayRef {
        match self {
            KeyColumn::Text(mut builder) => Arc::new(builder.finish()),
            KeyColumn::Int32(mut builder) => Arc::new(builder.finish()),
            KeyColumn::Int64(mut builder) => Arc::new(builder.finish()),
        }
    }
}

/// One input batch's expansion, a batch of at most about `EXPAND_BATCH_ROWS_MAX`
/// rows at a time.
struct Chunks {
    expander: Arc<Expander>,
    batch: RecordBatch,
    row: usize,
    metrics: BaselineMetrics,
}

impl Iterator for Chunks {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        if self.row >= self.batch.num_rows() {
            return None;
        }
        let timer = self.metrics.elapsed_compute().timer();
        let chunk = self.expander.chunk(&self.batch, &mut self.row);
        timer.done();
        match chunk {
            Ok(Some(chunk)) => {
                self.metrics.record_output(chunk.num_rows());
                Some(Ok(chunk))
            }
            Ok(None) => None,
            Err(error) => {
                self.row = self.batch.num_rows();
                Some(Err(error))
            }
        }
    }
}

impl Expander {
    /// The expansion of `batch`'s rows from `row` on until a batch is full; `None`
    /// when those rows have no edge.
    fn chunk(&self, batch: &RecordBatch, row: &mut usize) -> Result<Option<RecordBatch>> {
        let near = batch.column(self.near);
        let near_label = self
            .near_label
            .map(|index| batch.column(index).as_string::<i32>());
        let mut repeated = UInt32Builder::new();
        // Per output row: which way's keys and which position in them.
        let mut far: Vec<(usize, usize)> = Vec::new();
        let mut far_labels = StringBuilder::new();
        let mut rendered = String::new();
        while *row < batch.num_rows() && far.len() < EXPAND_BATCH_ROWS_MAX {
            let at = *row;
            *row += 1;
            if near.is_null(at) || near_label.is_some_and(|labels| labels.is_null(at)) {
                // A node an optional match left null has no edge.
                continue;
            }
            let label = near_label.map(|labels| labels.value(at));
            for (index, (way, resolved)) in self.ways.iter().zip(&self.resolved).enumerate() {
                if label.is_some_and(|label| label != way.from_type) {
                    continue;
                }
                let Some(position) = resolved.position(near.as_ref(), at, way, &mut rendered)
                else {
                    continue;
                };
                for &end in way.adjacency.far_positions(position, way.direction) {
                    if way.skip_loops && end == position {
                        continue;
                    }
                    far.push((index, end as usize));
                    if self.far_label {
                        far_labels.append_value(&way.to_type);
                    }
                    repeated.append_value(at as u32);
                }
            }
        }
        if far.is_empty() {
            return Ok(None);
        }
        let indices = repeated.finish();
        let mut columns: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .map(|column| take(column.as_ref(), &indices, None))
            .collect::<std::result::Result<_, _>>()?;
        let keys: Vec<&dyn Array> = self.resolved.iter().map(|r| r.keys.as_ref()).collect();
        columns.push(interleave(&keys, &far)?);
        if self.far_label {
            columns.push(Arc::new(far_labels.finish()));
        }
        Ok(Some(RecordBatch::try_new(self.schema.clone(), columns)?))
    }
}

/// An artifact's keys as the plan holds them, parsed and checked once: the key at each
/// position, and for integer keys an index from key to position (a text key is found
/// by the artifact's own search over its rendered keys).
pub(crate) struct Resolved {
    keys: ArrayRef,
    positions: Option<HashMap<i64, u32>>,
}

impl Resolved {
    /// The key at each of the artifact's positions, as the plan holds keys.
    pub(crate) fn keys(&self) -> &ArrayRef {
        &self.keys
    }

    /// The position of the key in `near` at `row`, when an edge names it: an integer
    /// by its number, a text key (no index of numbers) by the artifact's search.
    fn position(
        &self,
        near: &dyn Array,
        row: usize,
        way: &ExpandWay,
        rendered: &mut String,
    ) -> Option<u32> {
        match (&self.positions, near.data_type()) {
            (Some(positions), DataType::Int64) => positions
                .get(&near.as_primitive::<Int64Type>().value(row))
                .copied(),
            (Some(positions), DataType::Int32) => positions
                .get(&i64::from(near.as_primitive::<Int32Type>().value(row)))
                .copied(),
            _ => {
                rendered.clear();
                omnigraph_core::keys::push_text_key(rendered, near.as_string::<i32>().value(row));
                way.adjacency.position(rendered)
            }
        }
    }
}

/// The parsed keys of `adjacency`, from the process's cache (keyed by the artifact's
/// identity, which a handle keeps while it holds it) or parsed now; or why an
/// expansion cannot read them (their text is longer than an Arrow column holds). A key
/// that is not a key of `key_type` makes the artifact corrupt.
pub(crate) fn resolved(
    adjacency: &Arc<Adjacency>,
    key_type: KeyType,
) -> omnigraph_core::Result<std::result::Result<Arc<Resolved>, String>> {
    type Cached = (Weak<Adjacency>, KeyType, Arc<Resolved>);
    static CACHE: Mutex<Vec<Cached>> = Mutex::new(Vec::new());
    {
        let mut cache = CACHE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        cache.retain(|(weak, _, _)| weak.strong_count() > 0);
        if let Some((_, _, found)) = cache.iter().find(|(weak, kind, _)| {
            std::ptr::eq(weak.as_ptr(), Arc::as_ptr(adjacency)) && *kind == key_type
        }) {
            return Ok(Ok(found.clone()));
        }
    }
    let corrupt = |why: String| {
        OmniError::corrupt(
            layout::adjacency_path(adjacency.table_id(), adjacency.version()),
            why,
        )
    };
    let nodes = adjacency.nodes() as usize;
    if key_type == KeyType::Text {
        // Rendered keys are no shorter than their text: a bound on them is safe.
        let text_bytes: usize = (0..nodes as u32).map(|p| adjacency.key(p).len()).sum();
        if text_bytes > EXPAND_TEXT_KEY_BYTES_MAX {
            return Ok(Err(format!(
                "its keys take {text_bytes} bytes, more than one text column holds"
            )));
        }
    }
    let mut keys = KeyColumn::new(key_type);
    for position in 0..nodes as u32 {
        keys.push(adjacency.key(position)).map_err(corrupt)?;
    }
    let keys = keys.finish();
    // Integer keys are found by their number; text keys by the artifact's own search.
    let numbers: Option<Vec<i64>> = match key_type {
        KeyType::Text => None,
        KeyType::Int32 => Some(
            keys.as_primitive::<Int32Type>()
                .values()
                .iter()
                .map(|&number| i64::from(number))
                .collect(),
        ),
        KeyType::Int64 => Some(keys.as_primitive::<Int64Type>().values().to_vec()),
    };
    let positions = numbers.map(|numbers| {
        numbers
            .into_iter()
            .zip(0u32..)
            .collect::<HashMap<i64, u32>>()
    });
    let found = Arc::new(Resolved { keys, positions });
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !cache.iter().any(|(weak, kind, _)| {
        std::ptr::eq(weak.as_ptr(), Arc::as_ptr(adjacency)) && *kind == key_type
    }) {
        cache.push((Arc::downgrade(adjacency), key_type, found.clone()));
    }
    while cache.len() > EXPAND_RESOLVED_CACHED_MAX {
        cache.remove(0);
    }
    Ok(Ok(found))
}
