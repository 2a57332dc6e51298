//! JSONL input: lines read with a bound that holds while the line is read (a line
//! longer than the limit is refused as soon as the limit is passed, never buffered
//! whole), each an object naming its type, pushed into an ingest.

use crate::ingest::{Ingest, JSONL_READ_BUFFER_BYTES};
use crate::jsonl_rows::{self, LineTypeError};
use crate::limits::JSONL_LINE_BYTES_MAX;
use crate::limits::{CHUNK_BYTES_MAX, CHUNK_LINES_MAX};
use crate::read_ahead::ReadAhead;
use crate::rows::{self, RowSource};
use omnigraph_core::{InputLocation, OmniError, Result};

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
pub(crate) fn next_line<R: std::io::BufRead>(
    reader: &mut R,
    line: &mut Vec<u8>,
    max_bytes: usize,
) -> std::io::Result<Line> {
    line.clear();
    loop {
        let available = reader.fill_buf()?;
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

/// Lines split from the input with the type each names, handed over together.
struct LineChunk {
    /// The lines' bytes, one after another.
    bytes: Vec<u8>,
    /// The type names the lines name, each once.
    names: Vec<String>,
    lines: Vec<SplitLine>,
    /// Input consumed up to the end of the last line, blank lines and endings included.
    consumed: u64,
}

/// One line of a [`LineChunk`].
struct SplitLine {
    /// Where its bytes are in the chunk.
    start: usize,
    end: usize,
    /// One-based line number in the input.
    number: u64,
    what: Split,
}

/// What a line is.
enum Split {
    /// An object naming the type at this index of the chunk's names.
    Typed(usize),
    /// The input failed here; the splitter stopped.
    Failed(LineFailure),
}

/// Why a line cannot be pushed.
enum LineFailure {
    Read(String),
    TooLong,
    NotAnObject(String),
    NoType,
}

/// Splits an input into non-blank lines, each bounded by [`JSONL_LINE_BYTES_MAX`] while
/// it is read, and finds the type each names; ends after the first failure.
struct LineSplitter<R> {
    reader: Counted<R>,
    line: Vec<u8>,
    number: u64,
    ended: bool,
}

impl<R: std::io::BufRead> LineSplitter<R> {
    fn next_chunk(&mut self) -> Option<LineChunk> {
        if self.ended {
            return None;
        }
        let mut chunk = LineChunk {
            bytes: Vec::with_capacity(CHUNK_BYTES_MAX),
            names: Vec::new(),
            lines: Vec::with_capacity(CHUNK_LINES_MAX),
            consumed: 0,
        };
        while chunk.bytes.len() < CHUNK_BYTES_MAX && chunk.lines.len() < CHUNK_LINES_MAX {
            self.number += 1;
            let failed = match next_line(&mut self.reader, &mut self.line, JSONL_LINE_BYTES_MAX) {
                Err(error) => Some(LineFailure::Read(error.to_string())),
                Ok(Line::TooLong) => Some(LineFailure::TooLong),
                Ok(Line::End) => {
                    self.ended = true;
                    break;
                }
                Ok(Line::Read) if self.line.iter().all(u8::is_ascii_whitespace) => continue,
                Ok(Line::Read) => None,
            };
            let what = match failed {
                Some(failure) => Split::Failed(failure),
                None => match jsonl_rows::line_type(&self.line) {
                    Ok(type_name) => {
                        let at = match chunk.names.iter().position(|name| *name == type_name) {
                            Some(at) => at,
                            None => {
                                chunk.names.push(type_name);
                                chunk.names.len() - 1
                            }
                        };
                        Split::Typed(at)
                    }
                    Err(LineTypeError::NotAnObject(message)) => {
                        Split::Failed(LineFailure::NotAnObject(message))
                    }
                    Err(LineTypeError::NoType) => Split::Failed(LineFailure::NoType),
                },
            };
            let start = chunk.bytes.len();
            if matches!(what, Split::Typed(_)) {
                chunk.bytes.extend_from_slice(&self.line);
            }
            let stops = matches!(what, Split::Failed(_));
            chunk.lines.push(SplitLine {
                start,
                end: chunk.bytes.len(),
                number: self.number,
                what,
            });
            if stops {
                self.ended = true;
                break;
            }
        }
        chunk.consumed = self.reader.consumed;
        Some(chunk)
    }
}

/// Reads the JSONL file `file` of `file_bytes` (unknown for a pipe) into `ingest`, one
/// object per line, each line bounded by [`JSONL_LINE_BYTES_MAX`] while it is read.
/// Lines are split, and their types found, on a thread of their own ([`ReadAhead`]).
pub(crate) async fn push_jsonl(
    ingest: &mut Ingest<'_>,
    name: &str,
    input: Box<dyn std::io::Read + Send>,
    file_bytes: Option<u64>,
    spool: Option<std::sync::Arc<Spool>>,
    mut progress: impl FnMut(u64, u64),
) -> Result<()> {
    // Kept as it is read, below the read buffer: the spool holds what was read from the
    // input, whether or not the splitter got to it.
    let input: Box<dyn std::io::Read + Send> = match spool {
        Some(spool) => Box::new(Spooling {
            inner: input,
            spool,
        }),
        None => input,
    };
    let mut splitter = LineSplitter {
        reader: Counted {
            inner: std::io::BufReader::with_capacity(JSONL_READ_BUFFER_BYTES, input),
            consumed: 0,
        },
        line: Vec::new(),
        number: 0,
        ended: false,
    };
    let mut chunks = ReadAhead::start(Box::new(std::iter::from_fn(move || splitter.next_chunk())))?;
    let (mut rows, mut reported) = (0u64, None::<u64>);
    let shared: std::sync::Arc<str> = name.into();
    // Built only for an error: a location per line cost an allocation per row.
    let located = |line_number: u64| {
        let mut at = InputLocation::in_source(name);
        at.line = Some(line_number);
        at
    };
    let mut consumed = 0;
    while let Some(chunk) = chunks.next().await {
        if consumed == 0
            && chunk.consumed > 0
            && let Some(file_bytes) = file_bytes
        {
            // The rows of each type the file holds if its first lines are like the
            // rest: the call's key sets make room for that many (within their budget).
            for (at, type_name) in chunk.names.iter().enumerate() {
                let lines = chunk
                    .lines
                    .iter()
                    .filter(|line| matches!(line.what, Split::Typed(of) if of == at))
                    .count() as u64;
                let expected =
                    u128::from(file_bytes) * u128::from(lines) / u128::from(chunk.consumed);
                ingest.expect_rows(type_name, u64::try_from(expected).unwrap_or(u64::MAX));
            }
        }
        for line in &chunk.lines {
            let at = || located(line.number);
            let type_name = match &line.what {
                Split::Typed(at) => &chunk.names[*at],
                Split::Failed(LineFailure::Read(message)) => {
                    return Err(OmniError::bad_input(
                        at(),
                        format!("cannot read: {message}"),
                    ));
                }
                Split::Failed(LineFailure::TooLong) => {
                    return Err(OmniError::bad_input(
                        at(),
                        format!(
                            "the line is longer than the limit of {JSONL_LINE_BYTES_MAX} bytes"
                        ),
                    ));
                }
                Split::Failed(LineFailure::NotAnObject(message)) => {
                    return Err(ingest.failed(OmniError::bad_input(
                        at(),
                        format!("not a JSON object: {message}"),
                    )));
                }
                Split::Failed(LineFailure::NoType) => {
                    return Err(ingest.failed(OmniError::bad_input(
                        at().field(rows::TYPE_FIELD),
                        "every line needs a \"type\" naming its node or edge type",
                    )));
                }
            };
            let source = RowSource {
                source: shared.clone(),
                line: Some(line.number),
                row: line.number - 1,
            };
            ingest
                .push_line(type_name, source, &chunk.bytes[line.start..line.end])
                .await?;
            rows += 1;
        }
        consumed = chunk.consumed;
        if consumed - reported.unwrap_or(0) >= PROGRESS_BYTES_STEP {
            progress(consumed, rows);
            reported = Some(consumed);
        }
    }
    if reported != Some(consumed) {
        progress(consumed, rows);
    }
    Ok(())
}

/// A reader that counts the bytes consumed from it: the input a load has read, line
/// endings and blank lines included.
struct Counted<R> {
    inner: R,
    consumed: u64,
}

impl<R: std::io::Read> std::io::Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.consumed += read as u64;
        Ok(read)
    }
}

/// An input whose every read is kept in a [`Spool`].
struct Spooling<R> {
    inner: R,
    spool: std::sync::Arc<Spool>,
}

impl<R: std::io::Read> std::io::Read for Spooling<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.spool.keep(&buf[..read]);
        Ok(read)
    }
}

/// The bytes a load read from an input it cannot read twice (a pipe, a FIFO): a load
/// refused on a stale head runs again on the branch head from them, never from the
/// input (which would give it nothing, or only what was left, or wait for ever). Only a
/// whole input within the limit can be read again.
#[derive(Debug)]
pub(crate) struct Spool {
    bytes_max: usize,
    state: parking_lot::Mutex<SpoolState>,
}

#[derive(Debug, Default)]
struct SpoolState {
    bytes: Vec<u8>,
    /// The input ended (a read returned nothing) with every byte kept.
    whole: bool,
    /// The input passed the limit: nothing is kept.
    overflowed: bool,
}

impl Spool {
    /// A spool that keeps at most `bytes_max` bytes.
    pub(crate) fn new(bytes_max: usize) -> Spool {
        Spool {
            bytes_max,
            state: parking_lot::Mutex::new(SpoolState::default()),
        }
    }

    /// Keeps `read`, the next bytes of the input; nothing marks its end.
    fn keep(&self, read: &[u8]) {
        let mut state = self.state.lock();
        if state.overflowed {
            return;
        }
        if read.is_empty() {
            state.whole = true;
        } else if state.bytes.len() + read.len() > self.bytes_max {
            state.overflowed = true;
            state.bytes = Vec::new();
        } else {
            state.bytes.extend_from_slice(read);
        }
    }

    /// Whether the whole input is kept, to be read again.
    pub(crate) fn is_whole(&self) -> bool {
        let state = self.state.lock();
        state.whole && !state.overflowed
    }

    /// The whole input again, once (what is kept is handed over); `None` unless
    /// [`Spool::is_whole`].
    pub(crate) fn replay(&self) -> Option<std::io::Cursor<Vec<u8>>> {
        let mut state = self.state.lock();
        let whole = state.whole && !state.overflowed;
        whole.then(|| std::io::Cursor::new(std::mem::take(&mut state.bytes)))
    }
}

impl<R: std::io::BufRead> std::io::BufRead for Counted<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amount: usize) {
        self.consumed += amount as u64;
        self.inner.consume(amount);
    }
}

/// Input read between two progress reports of a load.
const PROGRESS_BYTES_STEP: u64 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<(Line, Vec<u8>)> {
        let mut reader = std::io::BufReader::with_capacity(3, input);
        let mut out = Vec::new();
        let mut line = Vec::new();
        for _ in 0..10 {
            let read = next_line(&mut reader, &mut line, max).unwrap();
            out.push((read, line.clone()));
            if read != Line::Read {
                break;
            }
        }
        out
    }

    #[test]
    fn lines_are_numbered_across_chunks_and_splitting_ends_at_the_first_bad_line() {
        let mut input = String::new();
        for row in 0..9_000 {
            input.push_str(&format!("{{\"type\":\"Person\",\"id\":\"p{row}\"}}\r\n"));
            if row % 1_000 == 0 {
                input.push_str("   \n");
            }
        }
        input.push_str("{\"id\":\"no type\"}\n{\"type\":\"Person\",\"id\":\"after\"}\n");
        let mut splitter = LineSplitter {
            reader: Counted {
                inner: std::io::BufReader::with_capacity(64, input.as_bytes()),
                consumed: 0,
            },
            line: Vec::new(),
            number: 0,
            ended: false,
        };
        let chunks: Vec<LineChunk> = std::iter::from_fn(|| splitter.next_chunk()).collect();
        assert_eq!(
            chunks.len(),
            2,
            "8,192 lines, then the rest up to the bad one"
        );
        let lines: Vec<&SplitLine> = chunks.iter().flat_map(|chunk| &chunk.lines).collect();
        assert_eq!(
            lines.len(),
            9_001,
            "blank lines are passed by, the line after the bad one is not read"
        );
        // Line numbers count the blank lines: row 8,500 comes after the 9 blank lines
        // that follow rows 0, 1,000, ..., 8,000.
        let (row, line) = (8_500usize, lines[8_500]);
        assert_eq!(line.number, row as u64 + 1 + (row / 1_000 + 1) as u64);
        let chunk = &chunks[1];
        let at = 8_500 - chunks[0].lines.len();
        assert_eq!(
            &chunk.bytes[chunk.lines[at].start..chunk.lines[at].end],
            b"{\"type\":\"Person\",\"id\":\"p8500\"}",
            "the line without its \\r\\n"
        );
        let last = lines[9_000];
        assert_eq!(last.number, 9_000 + 9 + 1);
        assert!(matches!(last.what, Split::Failed(LineFailure::NoType)));
        assert_eq!(chunk.names, ["Person"]);
        assert_eq!(
            chunks[1].consumed,
            input.len() as u64 - "{\"type\":\"Person\",\"id\":\"after\"}\n".len() as u64
        );
    }

    #[test]
    fn lines_within_the_limit_are_read_and_longer_ones_refused_while_reading() {
        let read = |bytes: &[u8]| (Line::Read, bytes.to_vec());
        assert_eq!(
            lines(b"abc\r\nde\n\nlast", 4),
            vec![
                read(b"abc"),
                read(b"de"),
                read(b""),
                read(b"last"),
                (Line::End, Vec::new())
            ]
        );
        assert_eq!(lines(b"abcde\nx", 4), vec![(Line::TooLong, Vec::new())]);
        assert_eq!(
            lines(b"abcd\r\n", 4),
            vec![read(b"abcd"), (Line::End, Vec::new())],
            "the line ending does not count"
        );
        assert_eq!(
            lines(b"abcd\r", 4),
            vec![read(b"abcd"), (Line::End, Vec::new())],
            "nor does a last line's"
        );
    }
}
