//! A text leg's prefix: its last word stands for the words of the column that begin
//! with it. Lance 14's inverted index has no prefix lookup (its n-gram tokenizer cuts a
//! whole value, not its words), so the words are found by reading the column at the
//! pinned version, over the leg's candidates when it has them, cut as the index cuts
//! it (its tokenizer, lowercasing, accent folding, stop words and longest token) but
//! not stemmed, since a prefix is of the written word. The `PREFIX_EXPANSIONS_MAX` held
//! by the most rows (ties by word) replace the prefix, and the leg then matches any
//! word, scored by BM25 through the index as any leg is.

use crate::limits::{PREFIX_EXPANSIONS_MAX, PREFIX_ROWS_READ_MAX, PREFIX_WORDS_COUNTED_MAX};
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use futures::TryStreamExt;
use omnigraph_core::OmniError;
use omnigraph_core::lance::Dataset;
use omnigraph_core::lance_tokenizer::TokenStream;
use std::collections::{HashMap, HashSet};

/// The words of `query` as written: runs of letters and digits.
fn written(query: &str) -> impl DoubleEndedIterator<Item = &str> {
    query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
}

/// The last word of `query`, lowercased: the prefix whose length the planner checks.
pub(crate) fn prefix_of(query: &str) -> Option<String> {
    written(query).next_back().map(str::to_lowercase)
}

fn external(error: impl std::error::Error + Send + Sync + 'static) -> DataFusionError {
    DataFusionError::External(Box::new(error))
}

/// The tokens in `stream`.
fn collect(mut stream: omnigraph_core::lance_tokenizer::BoxTokenStream<'_>) -> Vec<String> {
    let mut out = Vec::new();
    while stream.advance() {
        out.push(stream.token().text.clone());
    }
    out
}

/// `query` with its last word replaced by the words of `property` that begin with it,
/// among the rows `filter` keeps (every row without one): `None` when no word of the
/// query is left to match.
pub(crate) async fn expand(
    table: &Dataset,
    property: &str,
    index: Option<&str>,
    query: &str,
    filter: Option<&Expr>,
) -> Result<Option<String>> {
    let built = match index {
        Some(index) => omnigraph_core::adapter::built_full_text_params(table, index)
            .await
            .map_err(external)?,
        None => None,
    };
    // The index's own cut, without its stemmer: a prefix is of the written word.
    let params = built.unwrap_or_default().stem(false);
    let mut tokenizer = params.build().map_err(external)?;
    let mut words: Vec<&str> = written(query).collect();
    let Some(last) = words.pop() else {
        return Ok(None);
    };
    let given = collect(tokenizer.token_stream_for_search(&words.join(" ")));
    // A prefix the tokenizer drops (a stop word) is kept as written, lowercased.
    let prefix = collect(tokenizer.token_stream_for_search(last))
        .pop()
        .unwrap_or_else(|| last.to_lowercase());
    let mut scanner = table.scan();
    scanner.project(&[property]).map_err(external)?;
    if let Some(filter) = filter {
        scanner.filter_expr(filter.clone());
    }
    let mut stream = scanner.try_into_stream().await.map_err(external)?;
    // Rows holding each word that begins with the prefix.
    let mut holding: HashMap<String, u64> = HashMap::new();
    let mut rows = 0usize;
    while let Some(batch) = stream.try_next().await.map_err(external)? {
        rows += batch.num_rows();
        if rows > PREFIX_ROWS_READ_MAX {
            return Err(external(OmniError::query_failed(
                omnigraph_core::QueryFailure::Evaluation,
                format!(
                    "a prefix reads the words of at most {PREFIX_ROWS_READ_MAX} rows: restrict the leg to candidates (a node variable bound before the call)"
                ),
            )));
        }
        let column = datafusion::arrow::compute::cast(batch.column(0), &DataType::Utf8)?;
        let texts = column.as_string::<i32>();
        for row in 0..texts.len() {
            if texts.is_null(row) {
                continue;
            }
            let mut seen: HashSet<String> = HashSet::new();
            for word in collect(tokenizer.token_stream_for_doc(texts.value(row))) {
                if word.starts_with(&prefix) && seen.insert(word.clone()) {
                    // Past the bound, only the words already met are counted.
                    if holding.len() < PREFIX_WORDS_COUNTED_MAX || holding.contains_key(&word) {
                        *holding.entry(word).or_default() += 1;
                    }
                }
            }
        }
    }
    let mut found: Vec<(String, u64)> = holding
        .into_iter()
        .filter(|(word, _)| !given.contains(word))
        .collect();
    found.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    found.truncate(PREFIX_EXPANSIONS_MAX);
    if found.is_empty() && given.is_empty() {
        return Ok(None);
    }
    let mut words = given;
    words.extend(found.into_iter().map(|(word, _)| word));
    Ok(Some(words.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::prefix_of;

    #[test]
    fn a_prefix_is_the_last_run_of_letters_and_digits_lowercased() {
        assert_eq!(prefix_of("Ada's  Graph-DB, V2!").as_deref(), Some("v2"));
        assert_eq!(prefix_of("harbor Qua").as_deref(), Some("qua"));
        assert_eq!(prefix_of(" ,; "), None);
    }
}
