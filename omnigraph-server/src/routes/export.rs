//! The export route: every row of one type at a branch head or a commit, streamed as
//! JSONL in the load route's format (so an export loads back as it is) or as an Arrow
//! IPC stream. Only the batch in flight is held, whatever the table's size.

use super::{State, accepted, arrow_failed, commit_headers, query_params};
use crate::auth::Admitted;
use crate::error::ApiError;
use crate::routes::query::ARROW_STREAM;
use crate::tokens::Role;
use arrow::ipc::writer::StreamWriter;
use axum::body::{Body, Bytes};
use axum::extract::{self, Path, Request};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, BoxStream, StreamExt};
use omnigraph_core::arrow_array::RecordBatch;
use omnigraph_core::{OmniError, Result};
use omnigraph_publish::CommitRef;
use serde::Deserialize;

/// The header that says how many rows the body holds: a client that read fewer was cut
/// off (a cut at a row's or a message's boundary looks like an end to a reader that does
/// not check HTTP's framing).
pub(crate) const ROWS_HEADER: &str = "x-omnigraph-rows";

/// The media type of JSON lines.
pub(crate) const JSON_LINES: &str = "application/x-ndjson";

/// Which commit to export.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExportParams {
    /// The branch (default `main`).
    branch: Option<String>,
    /// A commit seq or id of the branch (default: its head).
    at: Option<String>,
}

/// Streams every row of a type.
#[utoipa::path(get, path = "/graphs/{graph}/export/{type}", params(ExportParams,
        ("graph" = String, Path, description = "The served graph"),
        ("type" = String, Path, description = "The node or edge type")),
    responses(
        (status = 200, description = "The rows: JSON lines ({\"type\": T, ...} per row, as the load route takes them), or an Arrow IPC stream (Accept: application/vnd.apache.arrow.stream) in the type's columns; the commit in x-omnigraph-seq and x-omnigraph-commit-id, the row count in x-omnigraph-rows. A failure after the first rows were sent ends the body without its last chunk: the client sees an incomplete body, never a short one."),
        (status = 400, description = "A malformed query string"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no read role on the graph"),
        (status = 404, description = "No such graph, branch, commit or type"),
        (status = 406, description = "The client accepts neither JSON lines nor Arrow"),
        (status = 429, description = "The token has as many requests in flight as it may"),
    ))]
pub(crate) async fn export(
    extract::State(state): extract::State<State>,
    Path((graph, type_name)): Path<(String, String)>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let (served, admitted) = state.admit(&headers, &graph, Role::Read)?;
    let format = format(&headers)?;
    let params: ExportParams = query_params(request.uri())?;
    let handle = served.handle(params.branch.as_deref()).await?;
    let at = params
        .at
        .as_deref()
        .map_or(CommitRef::Head, CommitRef::parse);
    let export = handle.export(&type_name, &at).await?;
    let (seq, commit_id, rows) = (export.seq(), export.commit_id().to_owned(), export.rows());
    let mut encoder = Encoder::new(format, &export)?;
    let mut batches = export.into_stream();
    // The first batch is read before the status is sent: a table that cannot be read
    // at all gets its error status and body.
    let first = batches.next().await.transpose()?;
    let mut opening = encoder.opening();
    let end = match first {
        Some(batch) => {
            opening.extend_from_slice(&encoder.batch(&batch)?);
            false
        }
        None => {
            opening.extend_from_slice(&encoder.finish()?);
            true
        }
    };
    let rest = Streaming {
        batches,
        encoder,
        _admitted: admitted,
    };
    let body: BoxStream<'static, Result<Bytes>> = if end {
        stream::once(async move {
            // The slot is held until the only chunk is handed to the connection.
            let _held = rest;
            Ok(Bytes::from(opening))
        })
        .boxed()
    } else {
        stream::once(async move { Ok(Bytes::from(opening)) })
            .chain(rest.into_stream())
            .boxed()
    };
    let mut response = Body::from_stream(body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.media_type()),
    );
    commit_headers(headers, seq, &commit_id);
    headers.insert(ROWS_HEADER, HeaderValue::from(rows));
    Ok(response)
}

/// How the rows are written.
#[derive(Clone, Copy)]
enum Format {
    JsonLines,
    Arrow,
}

impl Format {
    fn media_type(self) -> &'static str {
        match self {
            Format::JsonLines => JSON_LINES,
            Format::Arrow => ARROW_STREAM,
        }
    }
}

/// The format the client accepts (JSON lines without an `Accept`); 406 when neither.
fn format(headers: &HeaderMap) -> Result<Format, ApiError> {
    let Some(types) = accepted(headers) else {
        return Ok(Format::JsonLines);
    };
    if types.contains(&ARROW_STREAM) {
        return Ok(Format::Arrow);
    }
    if types.iter().any(|kind| {
        matches!(
            *kind,
            JSON_LINES | "application/jsonl" | "application/*" | "*/*"
        )
    }) {
        return Ok(Format::JsonLines);
    }
    Err(ApiError::NotAcceptable(format!(
        "the export route gives {JSON_LINES} or {ARROW_STREAM}, not {types:?}"
    )))
}

/// The rest of the rows, encoded as they arrive; the token's slot is held until the
/// last is sent.
struct Streaming {
    batches: BoxStream<'static, Result<RecordBatch>>,
    encoder: Encoder,
    _admitted: Admitted,
}

impl Streaming {
    /// The chunks of the body after the first, ending with the format's end; a failure
    /// ends the stream with its error, which ends the body incomplete.
    fn into_stream(self) -> BoxStream<'static, Result<Bytes>> {
        stream::unfold(Some(self), |state| async move {
            let mut state = state?;
            match state.batches.next().await {
                Some(Ok(batch)) => match state.encoder.batch(&batch) {
                    Ok(bytes) => Some((Ok(Bytes::from(bytes)), Some(state))),
                    Err(error) => Some((Err(failed(error)), None)),
                },
                Some(Err(error)) => Some((Err(failed(error)), None)),
                None => Some((state.encoder.finish().map(Bytes::from), None)),
            }
        })
        .boxed()
    }
}

/// A failure after the status was sent: the operator's log has it; the client sees the
/// body end without its last chunk.
fn failed(error: OmniError) -> OmniError {
    eprintln!("omnigraph serve: an export stopped after its first rows: {error}");
    error
}

/// Rows to bytes in one format.
enum Encoder {
    JsonLines { type_name: String },
    Arrow(Box<StreamWriter<Vec<u8>>>),
}

impl Encoder {
    fn new(format: Format, export: &omnigraph_graph::Export) -> Result<Encoder> {
        Ok(match format {
            Format::JsonLines => Encoder::JsonLines {
                type_name: export.type_name().to_owned(),
            },
            Format::Arrow => Encoder::Arrow(Box::new(
                StreamWriter::try_new(Vec::new(), &export.schema()).map_err(arrow_failed)?,
            )),
        })
    }

    /// What comes before the first row: the Arrow stream's schema.
    fn opening(&mut self) -> Vec<u8> {
        match self {
            Encoder::JsonLines { .. } => Vec::new(),
            Encoder::Arrow(writer) => std::mem::take(writer.get_mut()),
        }
    }

    fn batch(&mut self, batch: &RecordBatch) -> Result<Vec<u8>> {
        match self {
            Encoder::JsonLines { type_name } => omnigraph_graph::json_lines(type_name, batch),
            Encoder::Arrow(writer) => {
                writer.write(batch).map_err(arrow_failed)?;
                Ok(std::mem::take(writer.get_mut()))
            }
        }
    }

    /// The format's end: the Arrow stream's end-of-stream marker.
    fn finish(&mut self) -> Result<Vec<u8>> {
        match self {
            Encoder::JsonLines { .. } => Ok(Vec::new()),
            Encoder::Arrow(writer) => {
                writer.finish().map_err(arrow_failed)?;
                Ok(std::mem::take(writer.get_mut()))
            }
        }
    }
}
