//! How often each variable is named in a query, read off its syntax tree (decoded
//! names, every scope): a node variable named once is bound and never read, so its
//! table need not be joined. A `*` projection reads every variable. Beside the count,
//! the properties read through `name.property` and how often the name is named any
//! other way: a node named once otherwise and read only for its key needs no table
//! either (the edge that reached it holds the key).

use open_cypher::ast::{
    ClauseKind, Expr, ExprKind, PathFactorKind, Pattern, ProjectionClause, ProjectionItemKind,
    Query, QueryKind,
};
use std::collections::{BTreeSet, HashMap};

/// The names a query mentions, with how often, and whether it projects `*`.
pub(crate) struct Mentions {
    pub(crate) counts: HashMap<String, usize>,
    /// Per name, the properties read as `name.property` and how often the name is
    /// named otherwise (bound in a pattern, passed whole, compared).
    pub(crate) uses: HashMap<String, Uses>,
    pub(crate) wildcard: bool,
    /// The edge types its relationships name; `None` once one names none (it may walk
    /// any edge type).
    pub(crate) edge_types: Option<BTreeSet<String>>,
    /// The node types its node patterns name: with [`Mentions::any_node`] false, the
    /// query binds nodes of these types and of the ends of [`Mentions::named_edges`]
    /// only.
    pub(crate) node_labels: BTreeSet<String>,
    /// Every edge type a relationship names.
    pub(crate) named_edges: BTreeSet<String>,
    /// Whether it may bind a node of any type: a node pattern without a label, or a
    /// variable-length relationship of no named type (its nodes between are of any
    /// type).
    pub(crate) any_node: bool,
}

/// How a query names one variable besides counting it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Uses {
    /// The properties read as `name.property`.
    pub(crate) properties: BTreeSet<String>,
    /// How often it is named other than as `name.property`.
    pub(crate) whole: usize,
}

impl Mentions {
    pub(crate) fn of(query: &Query) -> Mentions {
        let mut mentions = Mentions {
            counts: HashMap::new(),
            uses: HashMap::new(),
            wildcard: false,
            edge_types: Some(BTreeSet::new()),
            node_labels: BTreeSet::new(),
            named_edges: BTreeSet::new(),
            any_node: false,
        };
        mentions.query(query);
        mentions
    }

    fn name(&mut self, name: &str) {
        *self.counts.entry(name.to_string()).or_default() += 1;
        self.uses.entry(name.to_string()).or_default().whole += 1;
    }

    fn property(&mut self, name: &str, property: &str) {
        *self.counts.entry(name.to_string()).or_default() += 1;
        self.uses
            .entry(name.to_string())
            .or_default()
            .properties
            .insert(property.to_string());
    }

    /// Recursion only into subqueries, whose depth the checker bounds (`NESTING_MAX`).
    fn query(&mut self, query: &Query) {
        let QueryKind::Regular(regular) = &query.kind else {
            return;
        };
        for clause in &regular.head.kind.clauses {
            match &clause.kind {
                ClauseKind::Match(matching) => {
                    self.pattern(&matching.pattern);
                    if let Some(predicate) = &matching.where_clause {
                        self.expression(predicate);
                    }
                }
                ClauseKind::Unwind(unwind) => {
                    self.expression(&unwind.expression);
                    self.name(&unwind.variable.kind.text);
                }
                ClauseKind::With(with) => {
                    self.projection(&with.projection);
                    if let Some(predicate) = &with.where_clause {
                        self.expression(predicate);
                    }
                }
                ClauseKind::Return(ret) => self.projection(&ret.projection),
                ClauseKind::Call(call) => self.call(call),
                _ => {}
            }
        }
    }

    /// A procedure call: its arguments are read; what it yields is bound (named once).
    /// The type it searches may be bound, so its key type counts.
    fn call(&mut self, call: &open_cypher::ast::CallClause) {
        let open_cypher::ast::CallTarget::Procedure {
            arguments: Some(arguments),
            ..
        } = &call.target
        else {
            return;
        };
        for (place, argument) in arguments.iter().enumerate() {
            match &argument.kind {
                ExprKind::Literal(literal) if place == 0 => {
                    if let open_cypher::ast::LiteralKind::String(name) = &literal.kind {
                        self.node_labels.insert(name.value.clone());
                    }
                }
                _ => self.expression(argument),
            }
        }
        if let Some(yielded) = &call.yield_clause {
            for item in &yielded.items {
                match &item.kind {
                    ProjectionItemKind::Expression {
                        expression:
                            Expr {
                                kind: ExprKind::Variable(output),
                                ..
                            },
                        alias,
                    } => self.name(&alias.as_ref().unwrap_or(output).kind.text),
                    _ => self.wildcard = true,
                }
            }
            if let Some(predicate) = &yielded.where_clause {
                self.expression(predicate);
            }
        }
    }

    fn projection(&mut self, projection: &ProjectionClause) {
        for item in &projection.items {
            match &item.kind {
                ProjectionItemKind::Wildcard => self.wildcard = true,
                ProjectionItemKind::Expression { expression, .. } => self.expression(expression),
                _ => self.wildcard = true,
            }
        }
        for item in projection.order_by.iter().flat_map(|order| &order.items) {
            self.expression(&item.expression);
        }
        for bound in [&projection.skip, &projection.offset, &projection.limit]
            .into_iter()
            .flatten()
        {
            self.expression(bound);
        }
    }

    fn pattern(&mut self, pattern: &Pattern) {
        for part in &pattern.parts {
            for factor in &part.kind.path.kind.factors {
                match &factor.kind {
                    PathFactorKind::Node(node) => {
                        let labels = node
                            .labels
                            .as_ref()
                            .map(super::pattern::label_names)
                            .unwrap_or_default();
                        // Without a label, the planner scans (or unions) every node type.
                        if labels.is_empty() {
                            self.any_node = true;
                        }
                        self.node_labels.extend(labels);
                        if let Some(variable) = &node.variable {
                            self.name(&variable.kind.text);
                        }
                        if let Some(properties) = &node.properties {
                            self.expression(properties);
                        }
                    }
                    PathFactorKind::Relationship(relationship) => {
                        let named = relationship
                            .labels
                            .as_ref()
                            .map(super::pattern::label_names)
                            .unwrap_or_default();
                        if named.is_empty() && super::pattern::hops(relationship).is_some() {
                            self.any_node = true;
                        }
                        self.named_edges.extend(named.iter().cloned());
                        match &mut self.edge_types {
                            Some(types) if !named.is_empty() => types.extend(named),
                            _ => self.edge_types = None,
                        }
                        if let Some(variable) = &relationship.variable {
                            self.name(&variable.kind.text);
                        }
                        if let Some(properties) = &relationship.properties {
                            self.expression(properties);
                        }
                    }
                    // Refused by the checker; counted as read, to be safe.
                    _ => {
                        self.wildcard = true;
                        self.any_node = true;
                    }
                }
            }
        }
    }

    /// A loop over a stack, entering subqueries and pattern predicates.
    fn expression(&mut self, expression: &Expr) {
        let mut pending = vec![expression];
        while let Some(next) = pending.pop() {
            match &next.kind {
                ExprKind::Variable(name) => self.name(&name.kind.text),
                ExprKind::Property {
                    expression: target,
                    key,
                } => match &target.kind {
                    ExprKind::Variable(name) => self.property(&name.kind.text, &key.kind.text),
                    _ => pending.push(target),
                },
                ExprKind::Subquery(subquery) => self.query(&subquery.query),
                ExprKind::Pattern(pattern) => self.pattern(pattern),
                _ => {
                    if !super::expr::children(next, &mut pending) {
                        // A form the checker refused: counted as reading everything.
                        self.wildcard = true;
                    }
                }
            }
        }
    }
}
