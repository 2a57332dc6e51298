//! JSONL input: lines read with a bound that holds while the line is read (a line
//! longer than the limit is refused as soon as the limit is passed, never buffered
//! whole), each an object naming its type, pushed into an ingest.

use crate::handle::jsonl_rows::{self, LineTypeError};
use crate::ingest::{Ingest, JSONL_LINE_BYTES_MAX};
use crate::rows::{self, RowSource};
use omnigraph_core::{InputLocation, OmniError, Result};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// What [`next_line`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A line is in the buffer (without its `\n` or `\r\n`).
    Read,
    /// The input has ended.
    End,
    /// The line is longer than the limit; what was read of it is discarded.
    TooLong,
}

/// Reads the next line of `reader` into `line` (cleared first), holding at most
/// `max_bytes` of it; the line ending does not count.
pub(crate) async fn next_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
    max_bytes: usize,
) -> std::io::Result<Line> {
    line.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            if line.is_empty() {
                return Ok(Line::End);
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Line::Read);
        }
        let (take, ends) = match available.iter().position(|byte| *byte == b'\n') {
            Some(at) => (at + 1, true),
            None => (available.len(), false),
        };
        let held = line.len() + take - usize::from(ends);
        // A `\r` at the end of what is held may be part of a `\r\n` ending, which does
        // not count towards the limit.
        let last_held = if ends {
            (take >= 2)
                .then(|| available[take - 2])
                .or(line.last().copied())
        } else {
            Some(available[take - 1])
        };
        let carriage = usize::from(held > 0 && last_held == Some(b'\r'));
        if held - carriage > max_bytes {
            line.clear();
            return Ok(Line::TooLong);
        }
        line.extend_from_slice(&available[..take]);
        reader.consume(take);
        if ends {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Line::Read);
        }
    }
}

/// Reads JSONL from `reader` into `ingest`, one object per line, each line bounded by
/// [`JSONL_LINE_BYTES_MAX`] while it is read.
pub(crate) async fn push_jsonl(
    ingest: &mut Ingest<'_>,
    name: &str,
    reader: impl tokio::io::AsyncBufRead + Unpin,
    mut progress: impl FnMut(u64, u64),
) -> Result<()> {
    let mut reader = Counted {
        inner: reader,
        consumed: 0,
    };
    let mut line = Vec::new();
    let mut line_number = 0u64;
    let (mut rows, mut reported) = (0u64, None::<u64>);
    let shared: std::sync::Arc<str> = name.into();
    // Built only for an error: a location per line cost an allocation per row.
    let located = |line_number: u64| {
        let mut at = InputLocation::in_source(name);
        at.line = Some(line_number);
        at
    };
    loop {
        line_number += 1;
        let at = || located(line_number);
        let read = next_line(&mut reader, &mut line, JSONL_LINE_BYTES_MAX)
            .await
            .map_err(|error| OmniError::bad_input(at(), format!("cannot read: {error}")))?;
        match read {
            Line::End => {
                if reported != Some(reader.consumed) {
                    progress(reader.consumed, rows);
                }
                return Ok(());
            }
            Line::TooLong => {
                return Err(OmniError::bad_input(
                    at(),
                    format!("the line is longer than the limit of {JSONL_LINE_BYTES_MAX} bytes"),
                ));
            }
            Line::Read => {}
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let type_name = match jsonl_rows::line_type(&line) {
            Ok(type_name) => type_name,
            Err(LineTypeError::NotAnObject(message)) => {
                return Err(ingest.failed(OmniError::bad_input(
                    at(),
                    format!("not a JSON object: {message}"),
                )));
            }
            Err(LineTypeError::NoType) => {
                return Err(ingest.failed(OmniError::bad_input(
                    at().field(rows::TYPE_FIELD),
                    "every line needs a \"type\" naming its node or edge type",
                )));
            }
        };
        let source = RowSource {
            source: shared.clone(),
            line: Some(line_number),
            row: line_number - 1,
        };
        ingest.push_line(&type_name, source, &line).await?;
        rows += 1;
        if reader.consumed - reported.unwrap_or(0) >= PROGRESS_BYTES_STEP {
            progress(reader.consumed, rows);
            reported = Some(reader.consumed);
        }
    }
}

/// A reader that counts the bytes consumed from it: the input a load has read, line
/// endings and blank lines included.
struct Counted<R> {
    inner: R,
    consumed: u64,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Counted<R> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        this.consumed += (buf.filled().len() - before) as u64;
        polled
    }
}

impl<R: tokio::io::AsyncBufRead + Unpin> tokio::io::AsyncBufRead for Counted<R> {
    fn poll_fill_buf(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<&[u8]>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_fill_buf(cx)
    }

    fn consume(self: std::pin::Pin<&mut Self>, amount: usize) {
        let this = self.get_mut();
        this.consumed += amount as u64;
        std::pin::Pin::new(&mut this.inner).consume(amount);
    }
}

/// Input read between two progress reports of a load.
const PROGRESS_BYTES_STEP: u64 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<(Line, Vec<u8>)> {
        let mut reader = tokio::io::BufReader::with_capacity(3, input);
        let mut out = Vec::new();
        let mut line = Vec::new();
        for _ in 0..10 {
            let read = next_line(&mut reader, &mut line, max).await.unwrap();
            out.push((read, line.clone()));
            if read != Line::Read {
                break;
            }
        }
        out
    }

    #[tokio::test]
    async fn lines_within_the_limit_are_read_and_longer_ones_refused_while_reading() {
        let read = |bytes: &[u8]| (Line::Read, bytes.to_vec());
        assert_eq!(
            lines(b"abc\r\nde\n\nlast", 4).await,
            vec![
                read(b"abc"),
                read(b"de"),
                read(b""),
                read(b"last"),
                (Line::End, Vec::new())
            ]
        );
        assert_eq!(
            lines(b"abcde\nx", 4).await,
            vec![(Line::TooLong, Vec::new())]
        );
        assert_eq!(
            lines(b"abcd\r\n", 4).await,
            vec![read(b"abcd"), (Line::End, Vec::new())],
            "the line ending does not count"
        );
        assert_eq!(
            lines(b"abcd\r", 4).await,
            vec![read(b"abcd"), (Line::End, Vec::new())],
            "nor does a last line's"
        );
    }
}
