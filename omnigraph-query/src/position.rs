//! Where in a query's text a byte offset falls, as a person counts: one-based line and
//! column, columns in characters.

/// The one-based line and column of byte `offset` in `text` (clamped to its length and
/// to a character boundary).
pub(crate) fn line_and_column(text: &str, offset: usize) -> (u64, u64) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() as u64 + 1;
    let line_start = before.rfind('\n').map_or(0, |at| at + 1);
    let column = before[line_start..].chars().count() as u64 + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::line_and_column;

    #[test]
    fn lines_and_columns_count_from_one_in_characters() {
        let text = "MATCH (p)\n  WHERE p.näme = 1\nRETURN p";
        assert_eq!(line_and_column(text, 0), (1, 1));
        assert_eq!(line_and_column(text, 6), (1, 7));
        let at = text.find("WHERE").unwrap();
        assert_eq!(line_and_column(text, at), (2, 3));
        // After a two-byte character, columns count characters.
        let at = text.find(" = 1").unwrap();
        assert_eq!(line_and_column(text, at), (2, 15));
        assert_eq!(line_and_column(text, text.len() + 10), (3, 9));
    }
}
