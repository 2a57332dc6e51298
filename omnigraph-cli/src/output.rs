//! How results and errors reach the terminal: one JSON document with `--json`, aligned
//! tables otherwise; errors on stderr with their code and evidence.

use omnigraph_core::OmniError;
use omnigraph_maintenance::{MaintenanceProgress, ProgressItems, ProgressSink, ProgressStage};
use serde_json::{Map, Value};
use std::process::ExitCode;
use std::sync::Arc;

/// Where a command's result goes.
pub struct Output {
    json: bool,
}

impl Output {
    /// JSON mode or human mode.
    pub fn new(json: bool) -> Output {
        Output { json }
    }

    /// Whether `--json` was given.
    pub fn json(&self) -> bool {
        self.json
    }

    /// Prints `document` as JSON, or calls `human` to print it for people.
    pub fn emit(&self, document: Value, human: impl FnOnce(&Value)) {
        if self.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&document).unwrap_or_default()
            );
        } else {
            human(&document);
        }
    }

    /// A progress bar over `total` bytes on a terminal (rate and ETA); none with
    /// `--json` or when stderr is not a terminal.
    pub fn byte_bar(&self, total: u64) -> Option<indicatif::ProgressBar> {
        if !self.terminal() {
            return None;
        }
        let bar = indicatif::ProgressBar::new(total);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta} {msg}",
        ) {
            bar.set_style(style);
        }
        Some(bar)
    }

    /// Runs `work` under a spinner showing `message` (none with `--json` or when stderr
    /// is not a terminal); `work` gets the spinner to report progress on, and it is
    /// cleared when `work` ends, whatever its outcome.
    pub async fn spinning<T, F: std::future::Future<Output = T>>(
        &self,
        message: &str,
        work: impl FnOnce(Option<indicatif::ProgressBar>) -> F,
    ) -> T {
        let spinner = self.spinner(message);
        let done = work(spinner.clone()).await;
        if let Some(spinner) = spinner {
            spinner.finish_and_clear();
        }
        done
    }

    /// Runs maintenance `work` under a progress bar that the run's progress reports
    /// move (none with `--json` or when stderr is not a terminal); `work` gets the sink
    /// to hand the run, and the bar is cleared when `work` ends, whatever its outcome.
    pub async fn with_maintenance_bar<T, F: std::future::Future<Output = T>>(
        &self,
        work: impl FnOnce(Option<ProgressSink>) -> F,
    ) -> T {
        let bar = self.terminal().then(|| {
            let bar = indicatif::ProgressBar::new(0);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{msg} {bar:30} {human_pos}/{human_len} {prefix} eta {eta}",
            ) {
                bar.set_style(style);
            }
            bar.enable_steady_tick(std::time::Duration::from_millis(250));
            bar
        });
        let sink = bar.clone().map(|bar| -> ProgressSink {
            Arc::new(move |progress: &MaintenanceProgress| show_progress(&bar, progress))
        });
        let done = work(sink).await;
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        done
    }

    /// Whether progress is drawn: stderr is a terminal and `--json` was not given.
    fn terminal(&self) -> bool {
        use std::io::IsTerminal;
        !self.json && std::io::stderr().is_terminal()
    }

    /// A progress spinner on a terminal for long work; none with `--json` or when
    /// stderr is not a terminal.
    pub fn spinner(&self, message: &str) -> Option<indicatif::ProgressBar> {
        if !self.terminal() {
            return None;
        }
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_message(message.to_string());
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        Some(bar)
    }
}

/// Moves `bar` to a maintenance run's latest figures.
fn show_progress(bar: &indicatif::ProgressBar, progress: &MaintenanceProgress) {
    let stage = match progress.stage {
        ProgressStage::Planning => " planning",
        ProgressStage::Working => "",
    };
    let items = match progress.items {
        ProgressItems::Rows => "rows",
        ProgressItems::Files => "files",
        ProgressItems::Indexes => "indexes",
        ProgressItems::Tables => "tables",
    };
    // The words first: each call may draw.
    bar.set_prefix(items);
    bar.set_message(format!(
        "{}{stage} (tables {}/{})",
        progress.operation.replace('_', "-"),
        progress.tables_done,
        progress.tables_total
    ));
    bar.set_length(progress.total);
    bar.set_position(progress.done);
}

/// Prints rows of text as an aligned table under `columns`, in that order.
pub fn print_columns(columns: &[&str], rows: &[Vec<String>]) {
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(index, column)| {
            rows.iter()
                .map(|row| row.get(index).map_or(0, |cell| cell.chars().count()))
                .chain([column.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |values: &[String]| {
        values
            .iter()
            .zip(&widths)
            .map(|(value, width)| format!("{value:<width$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let header: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
    println!("{}", line(&header));
    for row in rows {
        println!("{}", line(row));
    }
}

pub fn print_rows(rows: &[Map<String, Value>]) {
    if rows.is_empty() {
        println!("(no rows)");
        return;
    }
    let columns: Vec<&str> = rows[0].keys().map(String::as_str).collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            columns
                .iter()
                .map(|column| cell(row.get(*column)))
                .collect()
        })
        .collect();
    print_columns(&columns, &cells);
}

pub fn cell(value: Option<&Value>) -> String {
    const CELL_MAX: usize = 48;
    let text = match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(items)) => {
            format!(
                "[{} {}]",
                items.len(),
                noun(items.len() as u64, "value", "values")
            )
        }
        Some(other) => other.to_string(),
    };
    if text.chars().count() > CELL_MAX {
        format!("{}…", text.chars().take(CELL_MAX - 1).collect::<String>())
    } else {
        text
    }
}

/// Prints the error's code, message and evidence on stderr (as JSON with `--json`) and
/// returns the exit code from the core error table.
pub fn report_error(error: &OmniError, json: bool) -> ExitCode {
    let code = error.code();
    if json {
        let mut document = serde_json::json!({
            "error": {
                "code": code.code,
                "message": error.to_string(),
                "evidence": error.evidence(),
                "exit_code": code.exit_code,
            }
        });
        if let OmniError::BadQuery {
            refusal,
            line,
            column,
            ..
        } = error
        {
            // Where the query goes wrong and why, for a tool to point at.
            document["error"]["query"] =
                serde_json::json!({"refusal": refusal.name(), "line": line, "column": column});
        }
        if let OmniError::QueryFailed { reason, .. } = error {
            document["error"]["query"] = serde_json::json!({"failure": reason.name()});
        }
        if let OmniError::MergeConflict { conflicts, .. } = error {
            // The message names the first few per type; the document, every one.
            document["error"]["conflicts"] = serde_json::json!(conflicts);
        }
        eprintln!("{document}");
    } else {
        eprintln!("error[{}]: {error}", code.code);
        eprintln!("evidence: {}", error.evidence());
    }
    ExitCode::from(u8::try_from(code.exit_code).unwrap_or(1))
}

/// The noun for `count` things: `one` for exactly one, `many` otherwise ("1 row", "0
/// rows", "2 rows").
pub(crate) fn noun(count: u64, one: &'static str, many: &'static str) -> &'static str {
    if count == 1 { one } else { many }
}

/// Stdout for a stream of lines that a reader may stop reading (`| head`): notes when
/// the reader closed the pipe, so the command can end quietly instead of failing.
pub struct ClosableStdout {
    out: std::io::BufWriter<std::io::Stdout>,
    closed: Arc<std::sync::atomic::AtomicBool>,
}

impl ClosableStdout {
    /// Buffered stdout, and the flag set once a write finds the pipe closed.
    pub fn new() -> (ClosableStdout, Arc<std::sync::atomic::AtomicBool>) {
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let out = std::io::BufWriter::new(std::io::stdout());
        (
            ClosableStdout {
                out,
                closed: closed.clone(),
            },
            closed,
        )
    }

    fn noting<T>(&self, result: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(error) = &result
            && error.kind() == std::io::ErrorKind::BrokenPipe
        {
            self.closed
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        result
    }
}

impl std::io::Write for ClosableStdout {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let written = self.out.write(bytes);
        self.noting(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let flushed = self.out.flush();
        self.noting(flushed)
    }
}

#[cfg(test)]
mod noun_tests {
    #[test]
    fn one_thing_is_singular_and_any_other_count_plural() {
        assert_eq!(super::noun(1, "row", "rows"), "row");
        assert_eq!(super::noun(0, "row", "rows"), "rows");
        assert_eq!(super::noun(2, "row", "rows"), "rows");
    }
}
