//! A query checked against the schema before it reads anything: every label, edge type,
//! property, variable and function it names exists and fits, every clause is one the
//! engine runs, and a variable-length pattern has a bound. The first refusal is the
//! error, at its line and column.

use crate::functions;
use crate::limits::{
    NESTING_MAX, PATTERN_ELEMENTS_MAX, QUERY_BYTES_MAX, QUERY_TOKENS_MAX, VAR_LENGTH_HOPS_MAX,
};
use crate::position::line_and_column;
use omnigraph_core::schema::{Catalog, DeclKind, PropertyType, TypeDef};
use omnigraph_core::{OmniError, QueryRefusal, Result};
use open_cypher::ast::{
    BinaryOperator, ClauseKind, ExecutionMode, Expr, ExprKind, IsPredicate, LabelExpression,
    LabelExpressionKind, LiteralKind, MatchClause, NodePattern, ParameterName, PathFactorKind,
    Pattern, ProjectionClause, ProjectionItemKind, Quantifier, QuantifierKind, Query, QueryKind,
    RelationshipDirection, RelationshipPattern, StatementKind, SubqueryExpressionKind,
};
use open_cypher::{Keyword, Span, TokenKind};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Whether a query asks for its plan instead of, or beside, its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Run it and return its rows.
    Run,
    /// Return the plan, with the path chosen for each hop (`EXPLAIN`).
    Explain,
    /// Run it and return rows and time per operator (`PROFILE`).
    Profile,
}

/// What a name in a query's scope stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Binding {
    /// A node of one of these node types (every one it may be, sorted).
    Node(Vec<String>),
    /// A relationship of one of these edge types (sorted).
    Relationship(Vec<String>),
    /// Any other value: a property, an aggregate, an `UNWIND` element, a variable-length
    /// pattern's list of relationships.
    Value,
}

/// A query that passed every check against a schema: what the executor compiles.
#[derive(Clone, Debug)]
pub struct CheckedQuery {
    pub(crate) mode: Mode,
    pub(crate) columns: Vec<String>,
    pub(crate) parameters: BTreeSet<String>,
    pub(crate) bindings: BTreeMap<String, Binding>,
    /// The syntax tree the checks ran on, for the executor.
    pub(crate) query: Query,
    /// The text it was parsed from (`EXPLAIN`/`PROFILE` blanked), whose positions the
    /// tree's spans are.
    pub(crate) text: String,
}

impl CheckedQuery {
    /// Whether it asks for its plan (`EXPLAIN`, `PROFILE`) or its rows.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The names of the columns it returns, in order.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// The parameters (`$name`) it reads; each must be given when it runs.
    pub fn parameters(&self) -> &BTreeSet<String> {
        &self.parameters
    }

    /// What each variable of its patterns stands for, by name: the types a node or
    /// relationship may be after its patterns narrowed it (what `OPTIONAL MATCH` and
    /// `EXISTS { }` narrow stays in them). A name bound again after `WITH` renamed it
    /// shows its last binding.
    pub fn bindings(&self) -> &BTreeMap<String, Binding> {
        &self.bindings
    }
}

/// Checks `text` against `catalog`: the one entry point of the language.
pub fn check(catalog: &Catalog, text: &str) -> Result<CheckedQuery> {
    if text.len() > QUERY_BYTES_MAX {
        return Err(OmniError::bad_query(
            QueryRefusal::Unsupported,
            1,
            1,
            format!(
                "the query is {} bytes; the limit is {QUERY_BYTES_MAX}",
                text.len()
            ),
        ));
    }
    let (mode, blanked) = prescan(text)?;
    let parsed = open_cypher::parse(&blanked).map_err(|errors| {
        let (span, message) = errors
            .diagnostics()
            .first()
            .map_or((Span::new(0, 0), "not a query".to_string()), |first| {
                (first.primary_span, first.message.clone())
            });
        let (line, column) = line_and_column(text, span.start);
        OmniError::bad_query(QueryRefusal::Syntax, line, column, message)
    })?;
    let checker = Checker {
        catalog,
        types: catalog
            .types()
            .iter()
            .map(|def| (def.name(), def))
            .collect(),
        elements: 0,
        text: &blanked,
        parameters: BTreeSet::new(),
        seen: BTreeMap::new(),
        depth: 0,
        aggregated: false,
        pattern_relationships: BTreeSet::new(),
    };
    let mut checked = checker.statement(parsed.program)?;
    if checked.mode == Mode::Run {
        checked.mode = mode;
    }
    Ok(checked)
}

/// What is read off a query's tokens before it is parsed: the parser recurses on
/// brackets and on prefix operators and scans back over tokens, so the query's shape is
/// bounded first. `EXPLAIN` and `PROFILE` lead a query; the grammar has no rule for
/// them, so the word is read off and blanked (positions in the rest stay those of the
/// text).
fn prescan(text: &str) -> Result<(Mode, String)> {
    let lexed = open_cypher::lex(text);
    let mut depth = 0usize;
    let mut prefix_run = 0usize;
    let mut tokens = 0usize;
    let mut first = None;
    for token in lexed.tokens.iter().filter(|token| !token.kind.is_trivia()) {
        tokens += 1;
        first.get_or_insert(token);
        let refuse = |what: String| {
            let (line, column) = line_and_column(text, token.span.start);
            OmniError::bad_query(QueryRefusal::Unsupported, line, column, what)
        };
        if tokens > QUERY_TOKENS_MAX {
            return Err(refuse(format!(
                "a query of more than {QUERY_TOKENS_MAX} tokens"
            )));
        }
        match token.kind {
            TokenKind::LeftParen | TokenKind::LeftBracket | TokenKind::LeftBrace => depth += 1,
            TokenKind::RightParen | TokenKind::RightBracket | TokenKind::RightBrace => {
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        let prefix = matches!(
            token.kind,
            TokenKind::Keyword(Keyword::Not) | TokenKind::Minus | TokenKind::Plus
        );
        prefix_run = if prefix { prefix_run + 1 } else { 0 };
        if depth > NESTING_MAX || prefix_run > NESTING_MAX {
            return Err(refuse(format!("nesting deeper than {NESTING_MAX}")));
        }
    }
    let leading = first
        .filter(|token| token.kind == TokenKind::Identifier)
        .and_then(|token| {
            let word = text.get(token.span.start..token.span.end)?;
            let mode = if word.eq_ignore_ascii_case("EXPLAIN") {
                Mode::Explain
            } else if word.eq_ignore_ascii_case("PROFILE") {
                Mode::Profile
            } else {
                return None;
            };
            Some((mode, token.span))
        });
    Ok(match leading {
        Some((mode, span)) => {
            let mut blanked = text.to_string();
            blanked.replace_range(span.start..span.end, &" ".repeat(span.end - span.start));
            (mode, blanked)
        }
        None => (Mode::Run, text.to_string()),
    })
}

/// A scope: the variables visible at a point of the query.
type Scope = BTreeMap<String, Binding>;

struct Checker<'a> {
    catalog: &'a Catalog,
    /// The catalog's types by name: a property check looks each candidate up.
    types: HashMap<&'a str, &'a TypeDef>,
    /// Node and relationship patterns checked so far, at most
    /// [`PATTERN_ELEMENTS_MAX`].
    elements: usize,
    text: &'a str,
    parameters: BTreeSet<String>,
    /// Every pattern variable bound anywhere, for the executor.
    seen: BTreeMap<String, Binding>,
    /// How deeply the check has recursed (expressions, subqueries), at most
    /// [`NESTING_MAX`].
    depth: usize,
    /// Whether the projection being checked aggregates.
    aggregated: bool,
    /// The relationship variables of the pattern being checked: one names one
    /// relationship.
    pattern_relationships: BTreeSet<String>,
}

impl<'a> Checker<'a> {
    fn refuse(&self, refusal: QueryRefusal, span: Span, message: impl Into<String>) -> OmniError {
        let (line, column) = line_and_column(self.text, span.start);
        OmniError::bad_query(refusal, line, column, message)
    }

    fn unsupported(&self, span: Span, what: &str) -> OmniError {
        self.refuse(
            QueryRefusal::Unsupported,
            span,
            format!("{what} is not supported (docs/query.md lists what is)"),
        )
    }

    fn statement(mut self, program: open_cypher::ast::Program) -> Result<CheckedQuery> {
        let span = program.span;
        let mut statements = program.statements.into_iter();
        let (Some(statement), None) = (statements.next(), statements.next()) else {
            return Err(self.refuse(QueryRefusal::Syntax, span, "expected one query"));
        };
        let StatementKind::Query(statement) = statement.kind else {
            return Err(self.refuse(QueryRefusal::Syntax, statement.span, "not a query"));
        };
        let mode = match statement.mode.as_ref().map(|mode| mode.kind) {
            None => Mode::Run,
            Some(ExecutionMode::Explain) => Mode::Explain,
            Some(ExecutionMode::Profile) => Mode::Profile,
            Some(_) => return Err(self.unsupported(statement.query.span, "this execution mode")),
        };
        let columns = self.query(&statement.query, Scope::new(), Ending::Return)?;
        Ok(CheckedQuery {
            mode,
            columns,
            parameters: self.parameters,
            bindings: self.seen,
            query: statement.query,
            text: self.text.to_string(),
        })
    }

    /// Checks a query (the whole one, or a subquery in `EXISTS { }` / `COUNT { }`)
    /// against the variables of `scope`, returning its result columns.
    fn query(&mut self, query: &Query, scope: Scope, ending: Ending) -> Result<Vec<String>> {
        self.enter(query.span)?;
        let checked = self.query_within(query, scope, ending);
        self.depth -= 1;
        checked
    }

    fn query_within(
        &mut self,
        query: &Query,
        mut scope: Scope,
        ending: Ending,
    ) -> Result<Vec<String>> {
        let QueryKind::Regular(regular) = &query.kind else {
            return Err(self.refuse(QueryRefusal::Syntax, query.span, "not a query"));
        };
        if let Some(union) = regular.unions.first() {
            return Err(self.unsupported(union.operator.span, "UNION"));
        }
        let clauses = &regular.head.kind.clauses;
        let mut columns = None;
        for clause in clauses {
            if columns.is_some() {
                return Err(self.refuse(
                    QueryRefusal::Syntax,
                    clause.span,
                    "nothing may follow RETURN",
                ));
            }
            match &clause.kind {
                ClauseKind::Match(clause) => self.match_clause(clause, &mut scope)?,
                ClauseKind::Unwind(unwind) => {
                    self.expression(&unwind.expression, &scope, Context::Row)?;
                    let name = self.user_name(&unwind.variable)?;
                    if scope.contains_key(&name) {
                        return Err(self.refuse(
                            QueryRefusal::Syntax,
                            unwind.variable.span,
                            format!("{name} is bound already; UNWIND binds a new name"),
                        ));
                    }
                    scope.insert(name, Binding::Value);
                }
                ClauseKind::With(with) => {
                    scope = self
                        .projection(&with.projection, &scope, Projecting::With)?
                        .1;
                    if let Some(predicate) = &with.where_clause {
                        self.expression(predicate, &scope, Context::Row)?;
                    }
                }
                ClauseKind::Return(ret) => {
                    columns = Some(
                        self.projection(&ret.projection, &scope, Projecting::Return)?
                            .0,
                    );
                }
                ClauseKind::Create(_) => return Err(self.writing(clause.span, "CREATE")),
                ClauseKind::Insert(_) => return Err(self.writing(clause.span, "INSERT")),
                ClauseKind::Merge(_) => return Err(self.writing(clause.span, "MERGE")),
                ClauseKind::Delete(_) => return Err(self.writing(clause.span, "DELETE")),
                ClauseKind::Set(_) => return Err(self.writing(clause.span, "SET")),
                ClauseKind::Remove(_) => return Err(self.writing(clause.span, "REMOVE")),
                ClauseKind::Foreach(_) => return Err(self.writing(clause.span, "FOREACH")),
                ClauseKind::Use(_) => return Err(self.unsupported(clause.span, "USE")),
                ClauseKind::Let(_) => return Err(self.unsupported(clause.span, "LET")),
                ClauseKind::LoadCsv(_) => return Err(self.unsupported(clause.span, "LOAD CSV")),
                ClauseKind::Call(call) => self.call(call, clause.span, &mut scope)?,
                ClauseKind::Select(_) => return Err(self.unsupported(clause.span, "SELECT")),
                ClauseKind::Next(_) => return Err(self.unsupported(clause.span, "NEXT")),
                ClauseKind::Filter(_) => return Err(self.unsupported(clause.span, "FILTER")),
                ClauseKind::Finish => return Err(self.unsupported(clause.span, "FINISH")),
                _ => return Err(self.unsupported(clause.span, "this clause")),
            }
        }
        match (columns, ending) {
            (Some(columns), _) => Ok(columns),
            (None, Ending::Any) => Ok(Vec::new()),
            (None, Ending::Return) => Err(self.refuse(
                QueryRefusal::Syntax,
                Span::new(query.span.end, query.span.end),
                "a query ends with RETURN",
            )),
        }
    }

    /// A procedure call (`procedures.rs`): its arguments against the schema and the
    /// scope, and what it yields bound in the scope.
    fn call(
        &mut self,
        call: &open_cypher::ast::CallClause,
        span: Span,
        scope: &mut Scope,
    ) -> Result<()> {
        let variable_types = |name: &str| match scope.get(name) {
            Some(Binding::Node(types)) => Some(types.clone()),
            _ => None,
        };
        let refuse = |refusal, span, message: String| self.refuse(refusal, span, message);
        let read = crate::procedures::read(call, span, self.catalog, &variable_types, &refuse)?;
        for leg in &read.legs {
            self.call_value(leg.query)?;
            self.integer_argument(leg.k, "a leg's k")?;
            for value in leg.options.values() {
                self.call_value(value)?;
            }
        }
        self.integer_argument(read.k, "k")?;
        if let Some(rrf_k) = read.rrf_k {
            self.call_value(rrf_k)?;
        }
        for (output, name, name_span) in &read.yields {
            let same_node = *output == crate::procedures::Output::Node
                && read.target == crate::procedures::Target::Variable(name.clone());
            if scope.contains_key(name) && !same_node {
                return Err(self.refuse(
                    QueryRefusal::Syntax,
                    *name_span,
                    format!(
                        "{name} is bound already; YIELD binds a new name (YIELD node AS other)"
                    ),
                ));
            }
            if is_hidden(name) {
                return Err(self.refuse(
                    QueryRefusal::Syntax,
                    *name_span,
                    format!("{name} is not a name a query may bind"),
                ));
            }
            let binding = match output {
                crate::procedures::Output::Node => Binding::Node(vec![read.type_name.clone()]),
                _ => Binding::Value,
            };
            self.bind(scope, name.clone(), binding);
        }
        if let Some(filter) = read.filter {
            self.expression(filter, scope, Context::Row)?;
        }
        Ok(())
    }

    fn writing(&self, span: Span, clause: &str) -> OmniError {
        self.refuse(
            QueryRefusal::WritingClause,
            span,
            format!("{clause} writes; queries only read (insert, load, update and delete write)"),
        )
    }

    fn match_clause(&mut self, clause: &MatchClause, scope: &mut Scope) -> Result<()> {
        if let Some(mode) = &clause.mode {
            return Err(self.unsupported(mode.span, "a path mode"));
        }
        if let Some(hint) = clause.hints.first() {
            return Err(self.unsupported(hint.span, "a planner hint"));
        }
        if !clause.optional {
            self.pattern(&clause.pattern, scope)?;
            if let Some(predicate) = &clause.where_clause {
                self.expression(predicate, scope, Context::Row)?;
            }
            return Ok(());
        }
        // An optional match narrows nothing bound before it: a row without a match keeps
        // its variables as they were. Only its new variables join the scope.
        let mut inner = scope.clone();
        let seen = self.seen.clone();
        self.pattern(&clause.pattern, &mut inner)?;
        if let Some(predicate) = &clause.where_clause {
            self.expression(predicate, &inner, Context::Row)?;
        }
        self.seen = seen;
        for (name, binding) in inner {
            if !scope.contains_key(&name) {
                self.bind(scope, name, binding);
            }
        }
        Ok(())
    }

    /// Binds the variables of `pattern` in `scope`, checking each label, edge type,
    /// property and endpoint against the schema.
    fn pattern(&mut self, pattern: &Pattern, scope: &mut Scope) -> Result<()> {
        self.pattern_relationships.clear();
        for part in &pattern.parts {
            if let Some(binding) = &part.kind.binding {
                return Err(self.unsupported(binding.span, "a path variable"));
            }
            if let Some(selector) = &part.kind.selector {
                return Err(self.unsupported(selector.span, "a path selector"));
            }
            let factors = &part.kind.path.kind.factors;
            let mut previous: Option<String> = None;
            let mut pending: Option<(&RelationshipPattern, Span)> = None;
            for factor in factors {
                match &factor.kind {
                    PathFactorKind::Node(node) => {
                        self.count_element(factor.span)?;
                        let name = self.node(node, factor.span, scope)?;
                        if let (Some((relationship, span)), Some(left)) =
                            (pending.take(), &previous)
                        {
                            self.relationship(relationship, span, left, &name, scope)?;
                        }
                        previous = Some(name);
                    }
                    PathFactorKind::Relationship(relationship) => {
                        self.count_element(factor.span)?;
                        pending = Some((relationship, factor.span));
                    }
                    PathFactorKind::QuantifiedNode { .. } => {
                        return Err(self.unsupported(factor.span, "a quantified node"));
                    }
                    PathFactorKind::Parenthesized { .. } | PathFactorKind::Subpath { .. } => {
                        return Err(self.unsupported(factor.span, "a parenthesized path"));
                    }
                    PathFactorKind::LegacyShortest { .. } => {
                        return Err(self.unsupported(factor.span, "shortestPath"));
                    }
                    _ => return Err(self.unsupported(factor.span, "this pattern")),
                }
            }
            if let Some((_, span)) = pending {
                return Err(self.refuse(
                    QueryRefusal::Syntax,
                    span,
                    "a relationship needs a node after it",
                ));
            }
        }
        Ok(())
    }

    /// Binds a node pattern; returns the variable it binds (a hidden one when it names
    /// none, so its relationships can still narrow it).
    fn node(&mut self, node: &NodePattern, span: Span, scope: &mut Scope) -> Result<String> {
        if let Some(predicate) = &node.where_clause {
            return Err(self.unsupported(predicate.span, "WHERE inside a node pattern"));
        }
        let mut types: Vec<String> = match &node.labels {
            None => self
                .node_types()
                .map(|def| def.name().to_string())
                .collect(),
            Some(labels) => {
                let name = self.single_label(labels)?;
                match self.type_def(&name.kind.text) {
                    Some(def) if def.is_node() => vec![def.name().to_string()],
                    Some(_) => {
                        return Err(self.refuse(
                            QueryRefusal::UnknownLabel,
                            name.span,
                            format!("{} is an edge type, not a node label", name.kind.text),
                        ));
                    }
                    None => {
                        return Err(self.refuse(
                            QueryRefusal::UnknownLabel,
                            name.span,
                            format!(
                                "no node label {}; the schema has {}",
                                name.kind.text,
                                self.node_types()
                                    .map(TypeDef::name)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        ));
                    }
                }
            }
        };
        let variable = match &node.variable {
            Some(variable) => self.user_name(variable)?,
            None => format!("{HIDDEN}node@{}", span.start),
        };
        match scope.get(&variable) {
            Some(Binding::Node(known)) => types.retain(|name| known.contains(name)),
            Some(_) => {
                return Err(self.refuse(
                    QueryRefusal::WrongType,
                    span,
                    format!("{variable} is bound to something other than a node"),
                ));
            }
            None => {}
        }
        if types.is_empty() {
            return Err(self.refuse(
                QueryRefusal::UnknownLabel,
                span,
                format!("{variable} cannot be a node of the labels it was given"),
            ));
        }
        if let Some(properties) = &node.properties {
            self.property_map(properties, &types, scope)?;
        }
        self.bind(scope, variable.clone(), Binding::Node(types));
        Ok(variable)
    }

    /// Binds a relationship between the nodes bound as `left` and `right`, narrowing
    /// both to the endpoints of the edge types that fit.
    fn relationship(
        &mut self,
        relationship: &RelationshipPattern,
        span: Span,
        left: &str,
        right: &str,
        scope: &mut Scope,
    ) -> Result<()> {
        if let Some(predicate) = &relationship.where_clause {
            return Err(self.unsupported(predicate.span, "WHERE inside a relationship pattern"));
        }
        let hops = self.hops(relationship)?;
        let named: Option<Vec<(String, Span)>> = match &relationship.labels {
            None => None,
            Some(labels) => Some(self.label_alternatives(labels)?),
        };
        let candidates: Vec<&TypeDef> = match &named {
            None => self
                .catalog
                .types()
                .iter()
                .filter(|def| !def.is_node())
                .collect(),
            Some(names) => {
                let mut defs = Vec::new();
                for (name, at) in names {
                    match self.type_def(name) {
                        Some(def) if !def.is_node() => defs.push(def),
                        _ => {
                            return Err(self.refuse(
                                QueryRefusal::UnknownRelationshipType,
                                *at,
                                format!("no edge type {name}"),
                            ));
                        }
                    }
                }
                defs
            }
        };
        let node_types = |name: &str| match scope.get(name) {
            Some(Binding::Node(types)) => types.clone(),
            _ => Vec::new(),
        };
        let (left_types, right_types) = (node_types(left), node_types(right));
        let direction = relationship.direction.kind;
        let fits = |def: &TypeDef| -> Option<(String, String)> {
            let DeclKind::Edge { from, to } = def.kind() else {
                return None;
            };
            let forward = left_types.contains(from) && right_types.contains(to);
            let backward = left_types.contains(to) && right_types.contains(from);
            let fits = match direction {
                RelationshipDirection::Right => forward,
                RelationshipDirection::Left => backward,
                _ => forward || backward,
            };
            fits.then(|| (from.clone(), to.clone()))
        };
        // A variable-length pattern passes through nodes of any type between its ends;
        // only a single hop narrows them.
        let fitting: Vec<(&TypeDef, Option<(String, String)>)> = if hops.is_some() {
            candidates.iter().map(|def| (*def, None)).collect()
        } else {
            candidates
                .iter()
                .filter_map(|def| fits(def).map(|ends| (*def, Some(ends))))
                .collect()
        };
        if fitting.is_empty() {
            let types = match &named {
                Some(names) => names
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .collect::<Vec<_>>()
                    .join("|"),
                None => "any type".to_string(),
            };
            return Err(self.refuse(
                QueryRefusal::UnknownRelationshipType,
                span,
                format!(
                    "no edge of {types} goes between {} and {}",
                    left_types.join("|"),
                    right_types.join("|")
                ),
            ));
        }
        if hops.is_none() {
            let mut lefts = BTreeSet::new();
            let mut rights = BTreeSet::new();
            for (_, ends) in &fitting {
                let (from, to) = ends.clone().expect("a single hop keeps its ends");
                match direction {
                    RelationshipDirection::Right => {
                        lefts.insert(from);
                        rights.insert(to);
                    }
                    RelationshipDirection::Left => {
                        lefts.insert(to);
                        rights.insert(from);
                    }
                    _ => {
                        lefts.extend([from.clone(), to.clone()]);
                        rights.extend([from, to]);
                    }
                }
            }
            self.narrow(scope, left, &lefts);
            self.narrow(scope, right, &rights);
            let empty = |name: &str| matches!(scope.get(name), Some(Binding::Node(types)) if types.is_empty());
            if empty(left) || empty(right) {
                return Err(self.refuse(
                    QueryRefusal::UnknownRelationshipType,
                    span,
                    "no node can be at both ends the pattern gives this relationship",
                ));
            }
        } else {
            // A path starts with an edge that leaves the left node and ends with one
            // that reaches the right one (either way when undirected).
            let starts = candidates
                .iter()
                .any(|def| ends_fit(def, direction, &left_types, Side::Left));
            let ends = candidates
                .iter()
                .any(|def| ends_fit(def, direction, &right_types, Side::Right));
            if !starts || !ends {
                return Err(self.refuse(
                    QueryRefusal::UnknownRelationshipType,
                    span,
                    format!(
                        "no path of these edge types goes between {} and {}",
                        left_types.join("|"),
                        right_types.join("|")
                    ),
                ));
            }
        }
        let types: Vec<String> = fitting
            .iter()
            .map(|(def, _)| def.name().to_string())
            .collect();
        let defs: Vec<&TypeDef> = fitting.iter().map(|(def, _)| *def).collect();
        if let Some(properties) = &relationship.properties {
            self.property_map_of(properties, &defs, scope)?;
        }
        if let Some(variable) = &relationship.variable {
            let name = self.user_name(variable)?;
            let binding = if hops.is_some() {
                Binding::Value
            } else {
                Binding::Relationship(types)
            };
            if !self.pattern_relationships.insert(name.clone()) {
                return Err(self.refuse(
                    QueryRefusal::WrongType,
                    variable.span,
                    format!("{name} names two relationships of one pattern"),
                ));
            }
            // Bound by an earlier clause: the same relationship, so the types meet.
            let binding = match (scope.get(&name), binding) {
                (None, binding) => binding,
                (Some(Binding::Relationship(known)), Binding::Relationship(mut types)) => {
                    types.retain(|name| known.contains(name));
                    if types.is_empty() {
                        return Err(self.refuse(
                            QueryRefusal::UnknownRelationshipType,
                            variable.span,
                            format!("{name} cannot be a relationship of the types it was given"),
                        ));
                    }
                    Binding::Relationship(types)
                }
                (Some(_), _) => {
                    return Err(self.refuse(
                        QueryRefusal::WrongType,
                        variable.span,
                        format!("{name} is bound to something other than this relationship"),
                    ));
                }
            };
            self.bind(scope, name, binding);
        }
        Ok(())
    }

    /// The bounds of a variable-length relationship, or `None` for one hop.
    fn hops(&self, relationship: &RelationshipPattern) -> Result<Option<(u64, u64)>> {
        let unbounded = |quantifier: &Quantifier| {
            self.refuse(
                QueryRefusal::UnboundedLength,
                quantifier.span,
                format!(
                    "a variable-length pattern needs an upper bound of at most {VAR_LENGTH_HOPS_MAX} hops (as in *1..3)"
                ),
            )
        };
        match length(relationship) {
            Length::One => Ok(None),
            Length::Unsupported(quantifier, what) => Err(self.unsupported(quantifier.span, what)),
            Length::NotACount(quantifier, text) => Err(self.refuse(
                QueryRefusal::Syntax,
                quantifier.span,
                format!("{text} is not a hop count"),
            )),
            Length::Unbounded(quantifier) => Err(unbounded(quantifier)),
            Length::Hops {
                lower,
                upper,
                quantifier,
            } => {
                if upper > VAR_LENGTH_HOPS_MAX {
                    return Err(unbounded(quantifier));
                }
                if lower > upper {
                    return Err(self.refuse(
                        QueryRefusal::Syntax,
                        quantifier.span,
                        format!("{lower} hops at least but {upper} at most"),
                    ));
                }
                Ok(Some((lower, upper)))
            }
        }
    }

    fn narrow(&mut self, scope: &mut Scope, variable: &str, to: &BTreeSet<String>) {
        if let Some(Binding::Node(types)) = scope.get_mut(variable) {
            types.retain(|name| to.contains(name));
            let narrowed = Binding::Node(types.clone());
            if !is_hidden(variable) {
                self.seen.insert(variable.to_string(), narrowed);
            }
        }
    }

    fn bind(&mut self, scope: &mut Scope, name: String, mut binding: Binding) {
        if let Binding::Node(types) | Binding::Relationship(types) = &mut binding {
            types.sort_unstable();
        }
        if !is_hidden(&name) {
            self.seen.insert(name.clone(), binding.clone());
        }
        scope.insert(name, binding);
    }

    /// The name a query gives a variable, refused if it could be a hidden one.
    fn user_name(&self, name: &open_cypher::ast::Name) -> Result<String> {
        if is_hidden(&name.kind.text) {
            return Err(self.refuse(
                QueryRefusal::Syntax,
                name.span,
                "a variable may not start with a NUL character",
            ));
        }
        Ok(name.kind.text.clone())
    }

    fn type_def(&self, name: &str) -> Option<&'a TypeDef> {
        self.types.get(name).copied()
    }

    /// One more node or relationship pattern, refused past [`PATTERN_ELEMENTS_MAX`]:
    /// each holds the types it may be, and the executor joins once per element.
    fn count_element(&mut self, span: Span) -> Result<()> {
        self.elements += 1;
        if self.elements > PATTERN_ELEMENTS_MAX {
            return Err(self.unsupported(
                span,
                &format!("a query of more than {PATTERN_ELEMENTS_MAX} nodes and relationships"),
            ));
        }
        Ok(())
    }

    fn node_types(&self) -> impl Iterator<Item = &TypeDef> {
        self.catalog.types().iter().filter(|def| def.is_node())
    }

    /// A node's one label: `(:A)`. Label expressions (`:A&B`, `:!A`, `:A|B` on a node)
    /// are not supported: a node has one type.
    fn single_label<'l>(&self, labels: &'l LabelExpression) -> Result<&'l open_cypher::ast::Name> {
        match &labels.kind {
            LabelExpressionKind::Name(name) => Ok(name),
            LabelExpressionKind::Parenthesized(inner) => self.single_label(inner),
            _ => Err(self.unsupported(
                labels.span,
                "a label expression on a node (a node has one label)",
            )),
        }
    }

    /// A relationship's types: `[:A]` or `[:A|B]`.
    fn label_alternatives(&self, labels: &LabelExpression) -> Result<Vec<(String, Span)>> {
        match &labels.kind {
            LabelExpressionKind::Name(name) => Ok(vec![(name.kind.text.clone(), name.span)]),
            LabelExpressionKind::Parenthesized(inner) => self.label_alternatives(inner),
            LabelExpressionKind::Or(alternatives) => {
                let mut names = Vec::new();
                for alternative in alternatives {
                    names.extend(self.label_alternatives(alternative)?);
                }
                Ok(names)
            }
            _ => Err(self.unsupported(labels.span, "this type expression (only A|B)")),
        }
    }

    fn property_map(&mut self, map: &Expr, types: &[String], scope: &Scope) -> Result<()> {
        let defs: Vec<&TypeDef> = types
            .iter()
            .filter_map(|name| self.type_def(name))
            .collect();
        self.property_map_of(map, &defs, scope)
    }

    /// `{property: value, ...}` of a node or relationship that may be any of `defs`.
    fn property_map_of(&mut self, map: &Expr, defs: &[&TypeDef], scope: &Scope) -> Result<()> {
        let ExprKind::Map(entries) = &map.kind else {
            return Err(self.unsupported(map.span, "a property map that is not a literal map"));
        };
        for entry in entries {
            let property = &entry.key.kind.text;
            let declared: Vec<PropertyType> = defs
                .iter()
                .filter_map(|def| column_type(def, property))
                .collect();
            if declared.is_empty() {
                return Err(self.no_property(entry.key.span, defs, property));
            }
            self.expression(&entry.value, scope, Context::Row)?;
            let fits = match literal_of(&entry.value) {
                Some(literal) => declared
                    .iter()
                    .any(|data_type| literal_fits(literal, data_type)),
                // No property holds a list a literal could equal (a vector is searched,
                // not compared).
                None => !matches!(entry.value.kind, ExprKind::List(_)),
            };
            if !fits {
                return Err(self.refuse(
                    QueryRefusal::WrongType,
                    entry.value.span,
                    format!(
                        "{property} is {}; this value is not",
                        declared
                            .iter()
                            .map(type_name)
                            .collect::<Vec<_>>()
                            .join(" or ")
                    ),
                ));
            }
        }
        Ok(())
    }

    fn no_property(&self, span: Span, defs: &[&TypeDef], property: &str) -> OmniError {
        let names: Vec<&str> = defs.iter().map(|def| def.name()).collect();
        self.refuse(
            QueryRefusal::UnknownProperty,
            span,
            format!("{} has no property {property}", names.join("|")),
        )
    }

    /// Checks `WITH` or `RETURN`: returns its column names and the scope after it.
    fn projection(
        &mut self,
        projection: &ProjectionClause,
        scope: &Scope,
        projecting: Projecting,
    ) -> Result<(Vec<String>, Scope)> {
        let mut columns = Vec::new();
        let mut after = Scope::new();
        self.aggregated = false;
        for item in &projection.items {
            match &item.kind {
                ProjectionItemKind::Wildcard => {
                    for (name, binding) in scope.iter().filter(|(name, _)| !is_hidden(name)) {
                        columns.push(name.clone());
                        after.insert(name.clone(), binding.clone());
                    }
                }
                ProjectionItemKind::Expression { expression, alias } => {
                    self.expression(expression, scope, Context::Projection)?;
                    let name = match (alias, &expression.kind, projecting) {
                        (Some(alias), _, _) => self.user_name(alias)?,
                        (None, ExprKind::Variable(variable), _) => variable.kind.text.clone(),
                        // A WITH names what it passes on; RETURN's column is the text.
                        (None, _, Projecting::With) => {
                            return Err(self.refuse(
                                QueryRefusal::Syntax,
                                expression.span,
                                "an expression in WITH needs a name (AS name)",
                            ));
                        }
                        (None, _, Projecting::Return) => self
                            .text
                            .get(expression.span.start..expression.span.end)
                            .unwrap_or_default()
                            .to_string(),
                    };
                    let binding = match &expression.kind {
                        ExprKind::Variable(variable) => scope
                            .get(&variable.kind.text)
                            .cloned()
                            .unwrap_or(Binding::Value),
                        _ => Binding::Value,
                    };
                    if after.insert(name.clone(), binding).is_some() {
                        return Err(self.refuse(
                            QueryRefusal::Syntax,
                            item.span,
                            format!("the column {name} is projected twice"),
                        ));
                    }
                    columns.push(name);
                }
                _ => return Err(self.unsupported(item.span, "this projection")),
            }
        }
        // ORDER BY sees what was projected and what was in scope before, unless the
        // projection aggregates or is DISTINCT: then the rows it orders hold only what
        // was projected.
        let collapses = self.aggregated || projection.quantifier.is_some();
        let mut both = if collapses {
            Scope::new()
        } else {
            scope.clone()
        };
        both.extend(
            after
                .iter()
                .map(|(name, binding)| (name.clone(), binding.clone())),
        );
        if let Some(order) = &projection.order_by {
            for item in &order.items {
                // After a collapse, an expression the projection computes may be
                // ordered by as written (`RETURN a.x, count(*) ORDER BY count(*)`).
                let projected = collapses
                    && projected_expression(self.text, &projection.items, item.expression.span)
                        .is_some();
                if projected {
                    continue;
                }
                self.expression(&item.expression, &both, Context::Projection)?;
                if let Some(nulls) = &item.nulls {
                    return Err(self.unsupported(nulls.span, "NULLS FIRST/LAST"));
                }
            }
        }
        for bound in [&projection.skip, &projection.offset, &projection.limit]
            .into_iter()
            .flatten()
        {
            self.count(bound)?;
        }
        Ok((columns, after))
    }

    /// `SKIP` or `LIMIT`: a non-negative integer or a parameter.
    fn count(&mut self, expression: &Expr) -> Result<()> {
        match &expression.kind {
            ExprKind::Literal(literal) if matches!(literal.kind, LiteralKind::Integer(_)) => Ok(()),
            ExprKind::Parameter(parameter) => {
                self.parameter(&parameter.name, expression.span)?;
                Ok(())
            }
            _ => Err(self.refuse(
                QueryRefusal::WrongType,
                expression.span,
                "SKIP and LIMIT take an integer or a parameter",
            )),
        }
    }

    /// A value a call holds in its plan: a literal (a negated number, a list of them)
    /// or a parameter. The checker's depth bound holds: a list is one level.
    fn call_value(&mut self, expression: &Expr) -> Result<()> {
        let literal = |e: &Expr| match &e.kind {
            ExprKind::Literal(_) => true,
            ExprKind::Unary { operator, operand } => {
                operator.kind == open_cypher::ast::UnaryOperator::Minus
                    && matches!(operand.kind, ExprKind::Literal(_))
            }
            _ => false,
        };
        match &expression.kind {
            ExprKind::Parameter(parameter) => self.parameter(&parameter.name, expression.span),
            ExprKind::List(items)
                if items
                    .iter()
                    .all(|item| literal(item) || matches!(item.kind, ExprKind::Parameter(_))) =>
            {
                for item in items {
                    if let ExprKind::Parameter(parameter) = &item.kind {
                        self.parameter(&parameter.name, item.span)?;
                    }
                }
                Ok(())
            }
            _ if literal(expression) => Ok(()),
            _ => Err(self.refuse(
                QueryRefusal::WrongType,
                expression.span,
                "a call's arguments are literals or parameters",
            )),
        }
    }

    /// An argument the plan reads as an integer: a literal (negated too: the planner
    /// says which range it takes) or a parameter.
    fn integer_argument(&mut self, expression: &Expr, what: &str) -> Result<()> {
        let integer = |e: &Expr| matches!(&e.kind, ExprKind::Literal(literal) if matches!(literal.kind, LiteralKind::Integer(_)));
        match &expression.kind {
            _ if integer(expression) => Ok(()),
            ExprKind::Unary { operator, operand }
                if operator.kind == open_cypher::ast::UnaryOperator::Minus && integer(operand) =>
            {
                Ok(())
            }
            ExprKind::Parameter(parameter) => self.parameter(&parameter.name, expression.span),
            _ => Err(self.refuse(
                QueryRefusal::WrongType,
                expression.span,
                format!("{what} is an integer or a parameter"),
            )),
        }
    }

    fn parameter(&mut self, name: &ParameterName, span: Span) -> Result<()> {
        match name {
            ParameterName::Named(name) => {
                self.parameters.insert(name.clone());
                Ok(())
            }
            _ => Err(self.unsupported(span, "a positional parameter (name it: $name)")),
        }
    }

    /// Checks an expression: every variable is in scope, every property exists on what
    /// its variable may be, every function is supported, aggregates only in projections.
    fn expression(&mut self, expression: &Expr, scope: &Scope, context: Context) -> Result<()> {
        self.enter(expression.span)?;
        let checked = self.expression_within(expression, scope, context);
        self.depth -= 1;
        checked
    }

    /// One level deeper: refused past [`NESTING_MAX`], so the checker's recursion (an
    /// expression in an expression, a query in `EXISTS { }`) has a bound.
    fn enter(&mut self, span: Span) -> Result<()> {
        if self.depth >= NESTING_MAX {
            return Err(self.unsupported(span, &format!("nesting deeper than {NESTING_MAX}")));
        }
        self.depth += 1;
        Ok(())
    }

    fn expression_within(
        &mut self,
        expression: &Expr,
        scope: &Scope,
        context: Context,
    ) -> Result<()> {
        let span = expression.span;
        match &expression.kind {
            ExprKind::Literal(_) => Ok(()),
            ExprKind::Parameter(parameter) => self.parameter(&parameter.name, span),
            ExprKind::Variable(variable) => {
                let name = &variable.kind.text;
                if scope.contains_key(name) {
                    Ok(())
                } else {
                    Err(self.refuse(
                        QueryRefusal::UnknownVariable,
                        variable.span,
                        format!("{name} is not bound by an earlier clause"),
                    ))
                }
            }
            ExprKind::List(items) => {
                for item in items {
                    self.expression(item, scope, context)?;
                }
                Ok(())
            }
            ExprKind::Map(entries) => {
                for entry in entries {
                    self.expression(&entry.value, scope, context)?;
                }
                Ok(())
            }
            ExprKind::Unary { operand, .. } => self.expression(operand, scope, context),
            ExprKind::Binary { .. } => {
                // `a OR b OR c ...` is a chain down its left side: walked in a loop, so a
                // long chain is not deep nesting.
                let mut operands = Vec::new();
                let mut left = expression;
                while let ExprKind::Binary {
                    left: next,
                    operator,
                    right,
                } = &left.kind
                {
                    if operator.kind == BinaryOperator::RegexMatch {
                        return Err(self.unsupported(operator.span, "=~"));
                    }
                    operands.push(&**right);
                    left = next;
                }
                operands.push(left);
                for operand in operands.into_iter().rev() {
                    self.expression(operand, scope, context)?;
                }
                Ok(())
            }
            ExprKind::Is {
                expression,
                predicate,
                ..
            } => {
                if !matches!(predicate, IsPredicate::Null) {
                    return Err(self.unsupported(span, "IS other than IS [NOT] NULL"));
                }
                self.expression(expression, scope, context)
            }
            ExprKind::Property { expression, key } => {
                let target = unparenthesized(expression);
                if let ExprKind::Property { .. } = &target.kind {
                    return Err(self.refuse(
                        QueryRefusal::WrongType,
                        key.span,
                        format!("{} is a property of a value, which has none", key.kind.text),
                    ));
                }
                if let ExprKind::Variable(variable) = &target.kind {
                    let defs: Vec<&TypeDef> = match scope.get(&variable.kind.text) {
                        Some(Binding::Node(types) | Binding::Relationship(types)) => types
                            .iter()
                            .filter_map(|name| self.type_def(name))
                            .collect(),
                        Some(Binding::Value) => return Ok(()),
                        None => {
                            return self.expression(target, scope, context);
                        }
                    };
                    if !defs
                        .iter()
                        .any(|def| column_type(def, &key.kind.text).is_some())
                    {
                        return Err(self.no_property(key.span, &defs, &key.kind.text));
                    }
                    return Ok(());
                }
                self.expression(expression, scope, context)
            }
            ExprKind::Index { expression, .. }
                if matches!(
                    &unparenthesized(expression).kind,
                    ExprKind::Variable(variable)
                        if matches!(scope.get(&variable.kind.text), Some(Binding::Node(_) | Binding::Relationship(_)))
                ) =>
            {
                Err(self.unsupported(span, "a dynamic property (write p.name)"))
            }
            ExprKind::Index { expression, index } => {
                self.expression(expression, scope, context)?;
                self.expression(index, scope, context)
            }
            ExprKind::Slice {
                expression,
                lower,
                upper,
            } => {
                self.expression(expression, scope, context)?;
                for bound in [lower, upper].into_iter().flatten() {
                    self.expression(bound, scope, context)?;
                }
                Ok(())
            }
            ExprKind::Function(call) => self.function(call, span, scope, context),
            ExprKind::Case(case) => {
                for part in case.operand.iter().chain(case.else_expression.iter()) {
                    self.expression(part, scope, context)?;
                }
                for alternative in &case.alternatives {
                    for when in &alternative.when {
                        self.expression(when, scope, context)?;
                    }
                    self.expression(&alternative.then, scope, context)?;
                }
                Ok(())
            }
            ExprKind::Subquery(subquery) => {
                let ending = match subquery.kind.kind {
                    SubqueryExpressionKind::Exists | SubqueryExpressionKind::Count => Ending::Any,
                    _ => return Err(self.unsupported(subquery.kind.span, "COLLECT { }")),
                };
                // What the subquery narrows stays in it: a row it does not match is
                // still a row of the outer query.
                let seen = self.seen.clone();
                self.query(&subquery.query, scope.clone(), ending)?;
                self.seen = seen;
                Ok(())
            }
            ExprKind::Pattern(pattern) => {
                // A pattern predicate: `WHERE (a)-[:T]->(b)`, as EXISTS { }, with only
                // the variables bound before it.
                let mut inner = scope.clone();
                let seen = self.seen.clone();
                self.pattern(pattern, &mut inner)?;
                self.seen = seen;
                if let Some(new) = inner
                    .keys()
                    .find(|name| !is_hidden(name) && !scope.contains_key(*name))
                {
                    return Err(self.refuse(
                        QueryRefusal::UnknownVariable,
                        span,
                        format!("a pattern predicate binds no new variable ({new}); use EXISTS {{ MATCH ... }}"),
                    ));
                }
                Ok(())
            }
            ExprKind::Parenthesized(inner) => self.expression(inner, scope, context),
            ExprKind::Wildcard => Err(self.unsupported(span, "* outside count(*)")),
            ExprKind::ListComprehension(_) => Err(self.unsupported(span, "a list comprehension")),
            ExprKind::PatternComprehension(_) => {
                Err(self.unsupported(span, "a pattern comprehension"))
            }
            ExprKind::Reduce(_) => Err(self.unsupported(span, "reduce()")),
            ExprKind::QuantifiedPredicate(_) => {
                Err(self.unsupported(span, "all()/any()/none()/single()"))
            }
            ExprKind::MapProjection(_) => Err(self.unsupported(span, "a map projection")),
            ExprKind::DynamicProperty { .. } => Err(self.unsupported(span, "a dynamic property")),
            _ => Err(self.unsupported(span, "this expression")),
        }
    }

    fn function(
        &mut self,
        call: &open_cypher::ast::FunctionInvocation,
        span: Span,
        scope: &Scope,
        context: Context,
    ) -> Result<()> {
        let name = call
            .name
            .parts
            .iter()
            .map(|part| part.kind.text.as_str())
            .collect::<Vec<_>>()
            .join(".");
        let Some(function) = functions::lookup(&name) else {
            return Err(self.unsupported(span, &format!("the function {name}")));
        };
        if function.aggregate && context == Context::Projection {
            self.aggregated = true;
        }
        if function.aggregate && context != Context::Projection {
            return Err(self.refuse(
                QueryRefusal::Unsupported,
                span,
                format!("{name}() aggregates: it is allowed in WITH and RETURN only"),
            ));
        }
        let star =
            matches!(call.arguments.as_slice(), [argument] if argument.kind == ExprKind::Wildcard);
        if star {
            return if function.star {
                Ok(())
            } else {
                Err(self.unsupported(span, &format!("{name}(*)")))
            };
        }
        let given = call.arguments.len();
        if given < function.arguments_min || given > function.arguments_max {
            return Err(self.refuse(
                QueryRefusal::WrongType,
                span,
                format!("{name}() takes {} arguments, not {given}", arity(function)),
            ));
        }
        // An aggregate's argument is read per row.
        let inner = if function.aggregate {
            Context::Row
        } else {
            context
        };
        for argument in &call.arguments {
            self.expression(argument, scope, inner)?;
        }
        Ok(())
    }
}

/// A relationship's length as written: one hop, or its quantifier's bounds (the
/// checker bounds them; the planner reads them).
pub(crate) enum Length<'r> {
    One,
    Hops {
        lower: u64,
        upper: u64,
        quantifier: &'r Quantifier,
    },
    Unbounded(&'r Quantifier),
    NotACount(&'r Quantifier, String),
    Unsupported(&'r Quantifier, &'static str),
}

pub(crate) fn length(relationship: &RelationshipPattern) -> Length<'_> {
    let quantifier = match (
        &relationship.legacy_quantifier,
        &relationship.graph_quantifier,
    ) {
        (None, None) => return Length::One,
        (Some(quantifier), None) | (None, Some(quantifier)) => quantifier,
        (Some(_), Some(second)) => {
            return Length::Unsupported(second, "two quantifiers on one relationship");
        }
    };
    let number = |text: &str| text.parse::<u64>().map_err(|_| text.to_string());
    let bounds = match &quantifier.kind {
        QuantifierKind::Fixed(count) => number(count).map(|count| (count, count)),
        QuantifierKind::Range {
            lower,
            upper: Some(upper),
        } => {
            // Cypher's `*..n` starts at one hop; GQL's `{,n}` at none.
            let least = if relationship.legacy_quantifier.is_some() {
                1
            } else {
                0
            };
            lower
                .as_deref()
                .map_or(Ok(least), number)
                .and_then(|lower| Ok((lower, number(upper)?)))
        }
        QuantifierKind::Optional => Ok((0, 1)),
        QuantifierKind::Range { upper: None, .. }
        | QuantifierKind::ZeroOrMore
        | QuantifierKind::OneOrMore => return Length::Unbounded(quantifier),
        _ => return Length::Unsupported(quantifier, "this quantifier"),
    };
    match bounds {
        Ok((lower, upper)) => Length::Hops {
            lower,
            upper,
            quantifier,
        },
        Err(text) => Length::NotACount(quantifier, text),
    }
}

/// The index of the item of `items` whose expression is the one at `span`, token for
/// token (spaces and comments aside), if one is.
pub(crate) fn projected_expression(
    text: &str,
    items: &[open_cypher::ast::ProjectionItem],
    span: Span,
) -> Option<usize> {
    let tokens = |span: Span| -> Option<Vec<(TokenKind, String)>> {
        let source = text.get(span.start..span.end)?;
        Some(
            open_cypher::lex(source)
                .tokens
                .iter()
                .filter(|token| !token.kind.is_trivia())
                .map(|token| {
                    let word = source
                        .get(token.span.start..token.span.end)
                        .unwrap_or_default();
                    (token.kind, word.to_string())
                })
                .collect(),
        )
    };
    let wanted = tokens(span)?;
    items.iter().position(|item| match &item.kind {
        ProjectionItemKind::Expression { expression, .. } => {
            tokens(expression.span).is_some_and(|found| found == wanted)
        }
        _ => false,
    })
}

/// The prefix of the name given to a node pattern without a variable. A user's variable
/// that starts with it (possible only escaped) is refused, so the two never meet.
const HIDDEN: &str = "\u{0}";

fn is_hidden(name: &str) -> bool {
    name.starts_with(HIDDEN)
}

/// Which clause projects: `WITH` must name each expression it passes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Projecting {
    With,
    Return,
}

/// Whether a query must end with `RETURN` (a whole query) or may end anywhere (the
/// body of `EXISTS { }` and `COUNT { }`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Return,
    Any,
}

/// Where an expression is: aggregates are allowed only in a projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Context {
    Row,
    Projection,
}

pub(crate) fn arity(function: &functions::Function) -> String {
    match (function.arguments_min, function.arguments_max) {
        (min, max) if min == max => min.to_string(),
        (min, usize::MAX) => format!("{min} or more"),
        (min, max) => format!("{min} to {max}"),
    }
}

/// The type of `property` on `def` (a declared property, or an edge's `src`/`dst`).
fn column_type(def: &TypeDef, property: &str) -> Option<PropertyType> {
    def.columns()
        .iter()
        .find(|column| column.name == property)
        .map(|column| column.data_type)
}

/// An expression without the parentheses around it.
fn unparenthesized(expression: &Expr) -> &Expr {
    match &expression.kind {
        ExprKind::Parenthesized(inner) => unparenthesized(inner),
        _ => expression,
    }
}

/// Which end of a relationship a node pattern is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Left,
    Right,
}

/// Whether an edge of `def` can touch a node of `types` at the `side` end of a
/// relationship written with `direction`.
fn ends_fit(def: &TypeDef, direction: RelationshipDirection, types: &[String], side: Side) -> bool {
    let DeclKind::Edge { from, to } = def.kind() else {
        return false;
    };
    let (leaves, reaches) = (types.contains(from), types.contains(to));
    match (direction, side) {
        (RelationshipDirection::Right, Side::Left) | (RelationshipDirection::Left, Side::Right) => {
            leaves
        }
        (RelationshipDirection::Right, Side::Right) | (RelationshipDirection::Left, Side::Left) => {
            reaches
        }
        _ => leaves || reaches,
    }
}

/// The literal an expression is, a signed number included (`-3` parses as a minus on
/// `3`).
fn literal_of(expression: &Expr) -> Option<&LiteralKind> {
    match &expression.kind {
        ExprKind::Literal(literal) => Some(&literal.kind),
        ExprKind::Unary { operand, .. } => match &operand.kind {
            ExprKind::Literal(literal)
                if matches!(
                    literal.kind,
                    LiteralKind::Integer(_) | LiteralKind::Float(_)
                ) =>
            {
                Some(&literal.kind)
            }
            _ => None,
        },
        ExprKind::Parenthesized(inner) => literal_of(inner),
        _ => None,
    }
}

/// Whether a literal can be a value of a property of `data_type`.
fn literal_fits(literal: &LiteralKind, data_type: &PropertyType) -> bool {
    matches!(
        (literal, data_type),
        (LiteralKind::Null, _)
            | (LiteralKind::Boolean(_), PropertyType::Bool)
            | (
                LiteralKind::Integer(_),
                PropertyType::Int32
                    | PropertyType::Int64
                    | PropertyType::Float32
                    | PropertyType::Float64
            )
            | (
                LiteralKind::Float(_),
                PropertyType::Float32 | PropertyType::Float64
            )
            | (
                LiteralKind::String(_),
                PropertyType::String | PropertyType::Timestamp
            )
    )
}

fn type_name(data_type: &PropertyType) -> String {
    format!("{data_type:?}")
}
