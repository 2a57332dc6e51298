//! Tokens of the `.pg` schema language, each with the line and column it starts at.

use super::{SCHEMA_BYTES_MAX, Span};
use crate::error::{InputLocation, OmniError, Result};

/// One token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Token {
    /// A name or keyword: ASCII letters, digits and `_`, not starting with a digit.
    Ident(String),
    /// An unsigned integer literal.
    Int(u64),
    LBrace,
    RBrace,
    LParen,
    RParen,
    Colon,
    Comma,
    Arrow,
    Question,
    At,
    Eof,
}

impl Token {
    /// How the token reads in an error message.
    pub(crate) fn describe(&self) -> String {
        match self {
            Token::Ident(name) => format!("'{name}'"),
            Token::Int(value) => format!("'{value}'"),
            Token::LBrace => "'{'".into(),
            Token::RBrace => "'}'".into(),
            Token::LParen => "'('".into(),
            Token::RParen => "')'".into(),
            Token::Colon => "':'".into(),
            Token::Comma => "','".into(),
            Token::Arrow => "'->'".into(),
            Token::Question => "'?'".into(),
            Token::At => "'@'".into(),
            Token::Eof => "end of input".into(),
        }
    }
}

/// Splits `text` into tokens; the last is always [`Token::Eof`].
pub(crate) fn tokenize(source_name: &str, text: &str) -> Result<Vec<(Token, Span)>> {
    if text.len() > SCHEMA_BYTES_MAX {
        return Err(OmniError::bad_input(
            InputLocation::in_source(source_name),
            format!(
                "schema is {} bytes; the limit is {SCHEMA_BYTES_MAX}",
                text.len()
            ),
        ));
    }
    let mut tokens = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut index = 0;
    let mut line = 1u32;
    let mut column = 1u32;
    let error = |span: Span, message: String| {
        OmniError::bad_input(
            InputLocation::in_source(source_name).at(span.line.into(), span.column.into()),
            message,
        )
    };
    while index < chars.len() {
        let c = chars[index];
        let span = Span { line, column };
        if c == '\n' {
            index += 1;
            line += 1;
            column = 1;
            continue;
        }
        if c.is_whitespace() {
            index += 1;
            column += 1;
            continue;
        }
        if c == '/' && chars.get(index + 1) == Some(&'/') {
            while index < chars.len() && chars[index] != '\n' {
                index += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let start = index;
            while index < chars.len()
                && (chars[index].is_ascii_alphanumeric() || chars[index] == '_')
            {
                index += 1;
            }
            let name: String = chars[start..index].iter().collect();
            column += (index - start) as u32;
            if let Some(&next) = chars.get(index)
                && is_path_character(next)
                && !(next == '/' && chars.get(index + 1) == Some(&'/'))
            {
                return Err(error(
                    Span { line, column },
                    format!(
                        "'{next}' is not allowed in a name ('{name}{next}…'): names are ASCII letters, digits and '_', with no path characters, separators or dots"
                    ),
                ));
            }
            tokens.push((Token::Ident(name), span));
            continue;
        }
        if c.is_ascii_digit() {
            let start = index;
            while index < chars.len() && chars[index].is_ascii_digit() {
                index += 1;
            }
            let digits: String = chars[start..index].iter().collect();
            column += (index - start) as u32;
            let value = digits
                .parse::<u64>()
                .map_err(|_| error(span, format!("number {digits} is too large")))?;
            tokens.push((Token::Int(value), span));
            continue;
        }
        let (token, width) = match c {
            '{' => (Token::LBrace, 1),
            '}' => (Token::RBrace, 1),
            '(' => (Token::LParen, 1),
            ')' => (Token::RParen, 1),
            ':' => (Token::Colon, 1),
            ',' => (Token::Comma, 1),
            '?' => (Token::Question, 1),
            '@' => (Token::At, 1),
            '-' if chars.get(index + 1) == Some(&'>') => (Token::Arrow, 2),
            other if is_path_character(other) => {
                return Err(error(
                    span,
                    format!(
                        "unexpected '{other}': names are ASCII letters, digits and '_', with no path characters, separators or dots"
                    ),
                ));
            }
            other => {
                return Err(error(span, format!("unexpected character {other:?}")));
            }
        };
        tokens.push((token, span));
        index += width;
        column += width as u32;
    }
    tokens.push((Token::Eof, Span { line, column }));
    Ok(tokens)
}

/// Characters that would let a name act as a path or a qualified name.
fn is_path_character(c: char) -> bool {
    matches!(c, '/' | '\\' | '.' | '~' | '%' | '$')
}
