//! A text leg's prefix: its last word stands for the words of the column that begin
//! with it. Lance 14's inverted index has no prefix lookup (its n-gram tokenizer cuts a
//! whole value, not its words), so the words are found by reading the column at the
//! pinned version: the `PREFIX_EXPANSIONS_MAX` held by the most rows (ties by word)
//! replace the prefix, and the leg then matches any word, scored by BM25 through the
//! index as any leg is.

use crate::limits::{PREFIX_CHARS_MIN, PREFIX_EXPANSIONS_MAX, PREFIX_WORDS_COUNTED_MAX};
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result};
use futures::TryStreamExt;
use omnigraph_core::lance::Dataset;
use std::collections::{HashMap, HashSet};

/// The words of `text` as the simple tokenizer cuts them: runs of letters and digits,
/// lowercased.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
}

/// The prefix of `query`: its last word.
pub(crate) fn prefix_of(query: &str) -> Option<String> {
    words(query).last()
}

/// `query` with its last word replaced by the words of `property` that begin with it:
/// `None` when none does.
pub(crate) async fn expand(table: &Dataset, property: &str, query: &str) -> Result<Option<String>> {
    let mut given: Vec<String> = words(query).collect();
    let Some(prefix) = given.pop() else {
        return Ok(None);
    };
    debug_assert!(
        prefix.chars().count() >= PREFIX_CHARS_MIN,
        "the planner checked"
    );
    let lance = |error| DataFusionError::External(Box::new(error));
    let mut scanner = table.scan();
    scanner.project(&[property]).map_err(lance)?;
    let mut stream = scanner.try_into_stream().await.map_err(lance)?;
    // Rows holding each word that begins with the prefix.
    let mut holding: HashMap<String, u64> = HashMap::new();
    while let Some(batch) = stream.try_next().await.map_err(lance)? {
        let column = datafusion::arrow::compute::cast(batch.column(0), &DataType::Utf8)?;
        let texts = column.as_string::<i32>();
        for row in 0..texts.len() {
            if texts.is_null(row) {
                continue;
            }
            let mut seen: HashSet<String> = HashSet::new();
            for word in words(texts.value(row)) {
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
    given.extend(found.into_iter().map(|(word, _)| word));
    Ok(Some(given.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::words;

    #[test]
    fn words_are_runs_of_letters_and_digits_lowercased() {
        let cut: Vec<String> = words("Ada's  Graph-DB, v2!").collect();
        assert_eq!(cut, ["ada", "s", "graph", "db", "v2"]);
    }
}
