//! A recursive-descent parser from tokens to declarations. Syntax only: every semantic
//! rule (keys, duplicates, reserved names, endpoints) is checked by the catalog, so a
//! stored document and parsed source obey the same rules.

use super::lexer::{Token, tokenize};
use super::{Catalog, DeclKind, IndexKind, PropertyDecl, PropertyType, Span, TypeDecl};
use crate::error::{InputLocation, OmniError, Result};

/// Parses `.pg` source into a checked [`Catalog`]. `source_name` (a file name, or
/// `<inline>`) is named in every error, with the line and column.
pub fn parse(source_name: &str, text: &str) -> Result<Catalog> {
    let tokens = tokenize(source_name, text)?;
    let mut parser = Parser {
        source_name,
        tokens,
        position: 0,
    };
    let decls = parser.schema()?;
    Catalog::build_in(source_name, decls)
}

struct Parser<'a> {
    source_name: &'a str,
    tokens: Vec<(Token, Span)>,
    position: usize,
}

impl Parser<'_> {
    fn peek(&self) -> &Token {
        &self.tokens[self.position].0
    }

    fn span(&self) -> Span {
        self.tokens[self.position].1
    }

    fn advance(&mut self) -> (Token, Span) {
        let token = self.tokens[self.position].clone();
        // The last token is Eof; never step past it.
        if self.position + 1 < self.tokens.len() {
            self.position += 1;
        }
        token
    }

    fn error_here(&self, message: String) -> OmniError {
        let span = self.span();
        OmniError::bad_input(
            InputLocation::in_source(self.source_name).at(span.line.into(), span.column.into()),
            message,
        )
    }

    fn expect(&mut self, expected: Token, context: &str) -> Result<Span> {
        if *self.peek() == expected {
            Ok(self.advance().1)
        } else {
            Err(self.error_here(format!(
                "expected {} {context}, found {}",
                expected.describe(),
                self.peek().describe()
            )))
        }
    }

    fn ident(&mut self, what: &str) -> Result<(String, Span)> {
        match self.peek().clone() {
            Token::Ident(name) => {
                let span = self.advance().1;
                Ok((name, span))
            }
            other => Err(self.error_here(format!("expected {what}, found {}", other.describe()))),
        }
    }

    fn schema(&mut self) -> Result<Vec<TypeDecl>> {
        let mut decls = Vec::new();
        loop {
            match self.peek().clone() {
                Token::Eof => return Ok(decls),
                Token::Ident(word) if word == "node" => decls.push(self.node()?),
                Token::Ident(word) if word == "edge" => decls.push(self.edge()?),
                other => {
                    return Err(self.error_here(format!(
                        "expected 'node' or 'edge', found {}",
                        other.describe()
                    )));
                }
            }
        }
    }

    fn node(&mut self) -> Result<TypeDecl> {
        let span = self.advance().1;
        let (name, _) = self.ident("a node type name")?;
        let properties = self.properties(&name)?;
        Ok(TypeDecl {
            name,
            kind: DeclKind::Node,
            properties,
            span,
        })
    }

    fn edge(&mut self) -> Result<TypeDecl> {
        let span = self.advance().1;
        let (name, _) = self.ident("an edge type name")?;
        self.expect(Token::Colon, &format!("after edge {name}"))?;
        let (from, _) = self.ident("the source node type")?;
        self.expect(
            Token::Arrow,
            &format!("between the endpoints of edge {name}"),
        )?;
        let (to, _) = self.ident("the destination node type")?;
        let properties = if *self.peek() == Token::LBrace {
            self.properties(&name)?
        } else {
            Vec::new()
        };
        Ok(TypeDecl {
            name,
            kind: DeclKind::Edge { from, to },
            properties,
            span,
        })
    }

    fn properties(&mut self, type_name: &str) -> Result<Vec<PropertyDecl>> {
        self.expect(
            Token::LBrace,
            &format!("to open the properties of {type_name}"),
        )?;
        let mut properties = Vec::new();
        loop {
            match self.peek() {
                Token::RBrace => {
                    self.advance();
                    return Ok(properties);
                }
                Token::Comma => {
                    self.advance();
                }
                Token::Ident(_) => properties.push(self.property()?),
                other => {
                    return Err(self.error_here(format!(
                        "expected a property or '}}' in {type_name}, found {}",
                        other.describe()
                    )));
                }
            }
        }
    }

    fn property(&mut self) -> Result<PropertyDecl> {
        let (name, span) = self.ident("a property name")?;
        self.expect(Token::Colon, &format!("after property {name}"))?;
        let data_type = self.property_type()?;
        let optional = if *self.peek() == Token::Question {
            self.advance();
            true
        } else {
            false
        };
        let mut property = PropertyDecl {
            name,
            data_type,
            optional,
            key: false,
            index: None,
            span,
        };
        while *self.peek() == Token::At {
            self.annotation(&mut property)?;
        }
        Ok(property)
    }

    fn property_type(&mut self) -> Result<PropertyType> {
        let type_span = self.span();
        let (name, _) = self.ident("a property type")?;
        if name == "Vector" {
            self.expect(Token::LParen, "after Vector")?;
            let dimension_span = self.span();
            let dimension = match self.advance().0 {
                Token::Int(value) => value,
                other => {
                    self.position -= 1;
                    return Err(self.error_here(format!(
                        "expected the vector dimension, found {}",
                        other.describe()
                    )));
                }
            };
            self.expect(Token::RParen, "after the vector dimension")?;
            let dimension = u32::try_from(dimension).map_err(|_| {
                OmniError::bad_input(
                    InputLocation::in_source(self.source_name)
                        .at(dimension_span.line.into(), dimension_span.column.into()),
                    format!("vector dimension {dimension} is too large"),
                )
            })?;
            return Ok(PropertyType::Vector(dimension));
        }
        PropertyType::from_scalar_name(&name).ok_or_else(|| {
            OmniError::bad_input(
                InputLocation::in_source(self.source_name)
                    .at(type_span.line.into(), type_span.column.into()),
                format!(
                    "unknown type '{name}'; the types are {} and Vector(n)",
                    PropertyType::SCALAR_NAMES.join(", ")
                ),
            )
        })
    }

    fn annotation(&mut self, property: &mut PropertyDecl) -> Result<()> {
        let at = self.advance().1;
        let (word, _) = self.ident("an annotation after '@'")?;
        let argument = if *self.peek() == Token::LParen {
            self.advance();
            let (argument, _) = self.ident("an index kind (fts or vector)")?;
            self.expect(Token::RParen, "after the index kind")?;
            Some(argument)
        } else {
            None
        };
        let here = |message: String| {
            OmniError::bad_input(
                InputLocation::in_source(self.source_name)
                    .at(at.line.into(), at.column.into())
                    .field(property.name.clone()),
                message,
            )
        };
        match (word.as_str(), argument.as_deref()) {
            ("key", None) => {
                if property.key {
                    return Err(here(format!("@key is given twice on {}", property.name)));
                }
                property.key = true;
            }
            ("index", argument) => {
                let kind = match argument {
                    None | Some("btree") => IndexKind::BTree,
                    Some("fts") => IndexKind::FullText,
                    Some("vector") => IndexKind::Vector,
                    Some(other) => {
                        return Err(here(format!(
                            "unknown index kind '{other}'; use @index, @index(fts) or @index(vector)"
                        )));
                    }
                };
                if property.index.is_some() {
                    return Err(here(format!(
                        "{} declares more than one index",
                        property.name
                    )));
                }
                property.index = Some(kind);
            }
            ("key", Some(argument)) => {
                return Err(here(format!("@key takes no argument, found '{argument}'")));
            }
            (other, _) => {
                return Err(here(format!(
                    "unknown annotation '@{other}'; use @key or @index"
                )));
            }
        }
        Ok(())
    }
}
