//! The procedures a query may `CALL`: retrieval legs (`omni.vector`, `omni.text`) and
//! their fusion by reciprocal rank (`omni.fuse`). A call's shape (its target, legs,
//! options and what it yields) is read here once, for the checker and the planner
//! alike; the values in it (a query vector, `k`) are read by the planner.
//!
//! ```text
//! CALL omni.vector(target, 'property', vector, k [, {nprobes, refine, metric}])
//!   YIELD node, rank, distance
//! CALL omni.text(target, 'property', text, k [, {match, fuzziness, slop}])
//!   YIELD node, rank, score
//! CALL omni.fuse(target, [{vector: 'property', query: v, k: n, weight: w, ...},
//!                         {text: 'property', query: t, k: n, ...}, ...], k
//!                        [, {method, rrf_k}])
//!   YIELD node, score, ranks
//! ```
//!
//! The target is a node type's name (the leg searches the whole type) or a node
//! variable bound before the call (the leg ranks only the nodes it holds).

use crate::limits::FUSION_LEGS_MAX;
use omnigraph_core::schema::{Catalog, IndexKind, PropertyType, TypeDef};
use omnigraph_core::{OmniError, QueryRefusal, Result};
use open_cypher::Span;
use open_cypher::ast::{CallClause, CallTarget, Expr, ExprKind, LiteralKind, ProjectionItemKind};
use std::collections::BTreeMap;

/// The fusion's constant `k` of reciprocal rank fusion when a call sets none.
pub(crate) const RRF_K_DEFAULT: f64 = 60.0;

/// A procedure a query may call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Procedure {
    Vector,
    Text,
    Fuse,
}

impl Procedure {
    /// The procedures by name (lowercase, as Cypher names are compared).
    const ALL: [(&'static str, Procedure); 3] = [
        ("omni.vector", Procedure::Vector),
        ("omni.text", Procedure::Text),
        ("omni.fuse", Procedure::Fuse),
    ];

    fn named(parts: &[String]) -> Option<Procedure> {
        let name = parts.join(".").to_lowercase();
        Self::ALL
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, procedure)| *procedure)
    }

    /// What it yields.
    fn outputs(self) -> &'static [(&'static str, Output)] {
        match self {
            Procedure::Vector => &[
                ("node", Output::Node),
                ("rank", Output::Rank),
                ("distance", Output::Score),
            ],
            Procedure::Text => &[
                ("node", Output::Node),
                ("rank", Output::Rank),
                ("score", Output::Score),
            ],
            Procedure::Fuse => &[
                ("node", Output::Node),
                ("score", Output::Score),
                ("ranks", Output::Ranks),
            ],
        }
    }
}

/// One column a procedure yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    /// The node found.
    Node,
    /// Its rank in the leg (1 is best; equal scores share a rank).
    Rank,
    /// A leg's distance or score; a fusion's fused score.
    Score,
    /// A fusion's rank of the node in each leg, in the legs' order (null where a leg
    /// did not find it).
    Ranks,
}

/// What a call searches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// Every node of the type.
    Type,
    /// The nodes this variable holds.
    Variable(String),
}

/// A leg's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LegKind {
    Vector,
    Text,
}

/// A leg's option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LegOption {
    /// The fewest IVF partitions a vector leg probes.
    Nprobes,
    /// A vector leg re-ranks `k × refine` candidates by exact distance.
    Refine,
    /// A vector leg's metric: `'l2'`, `'cosine'` or `'dot'`.
    Metric,
    /// How a text leg matches its words: `'any'` (the default), `'all'`, `'phrase'` or
    /// `'prefix'`.
    Match,
    /// The edits a text leg's term may be from a word it matches (0 to 2).
    Fuzziness,
    /// The most words between two consecutive words of a phrase (0: adjacent).
    Slop,
    /// A leg's weight in a fusion (default 1).
    Weight,
}

impl LegOption {
    /// An option of a leg called alone (`omni.vector`, `omni.text`).
    fn of_call(name: &str, kind: LegKind) -> Option<LegOption> {
        let option = match name {
            "nprobes" => LegOption::Nprobes,
            "refine" => LegOption::Refine,
            "metric" => LegOption::Metric,
            "match" => LegOption::Match,
            "fuzziness" => LegOption::Fuzziness,
            "slop" => LegOption::Slop,
            _ => return None,
        };
        let fits = match option {
            LegOption::Nprobes | LegOption::Refine | LegOption::Metric => kind == LegKind::Vector,
            LegOption::Match | LegOption::Fuzziness | LegOption::Slop => kind == LegKind::Text,
            LegOption::Weight => false,
        };
        fits.then_some(option)
    }

    /// An option of a fusion's leg: a leg's own, and its weight.
    fn of_fused(name: &str, kind: LegKind) -> Option<LegOption> {
        match name {
            "weight" => Some(LegOption::Weight),
            _ => Self::of_call(name, kind),
        }
    }
}

/// One leg of a call.
#[derive(Clone, Debug)]
pub(crate) struct LegCall<'q> {
    pub(crate) kind: LegKind,
    pub(crate) property: String,
    pub(crate) query: &'q Expr,
    pub(crate) k: &'q Expr,
    pub(crate) options: BTreeMap<LegOption, &'q Expr>,
}

/// A call read off the syntax tree and checked against the schema.
#[derive(Clone, Debug)]
pub(crate) struct Call<'q> {
    pub(crate) procedure: Procedure,
    pub(crate) target: Target,
    /// The node type searched.
    pub(crate) type_name: String,
    pub(crate) legs: Vec<LegCall<'q>>,
    /// How many hits the call returns.
    pub(crate) k: &'q Expr,
    /// A fusion's constant `k` (`{rrf_k: 60}`).
    pub(crate) rrf_k: Option<&'q Expr>,
    /// A fusion's method (`{method: 'rrf'}` or `'score'`).
    pub(crate) method: Option<&'q Expr>,
    /// What it yields, under the names the query binds.
    pub(crate) yields: Vec<(Output, String, Span)>,
    /// `YIELD ... WHERE`.
    pub(crate) filter: Option<&'q Expr>,
}

/// A refusal at a span: the checker's and the planner's own, so positions are the
/// query's.
pub(crate) type Refuse<'r> = &'r dyn Fn(QueryRefusal, Span, String) -> OmniError;

/// Reads `call` (at `span`): `variable_types` says which node types a variable bound
/// before it may be.
pub(crate) fn read<'q>(
    call: &'q CallClause,
    span: Span,
    catalog: &Catalog,
    variable_types: &dyn Fn(&str) -> Option<Vec<String>>,
    refuse: Refuse<'_>,
) -> Result<Call<'q>> {
    let unsupported = |span: Span, what: &str| {
        refuse(
            QueryRefusal::Unsupported,
            span,
            format!("{what} is not supported (docs/query.md lists what is)"),
        )
    };
    if call.optional {
        return Err(unsupported(span, "OPTIONAL CALL"));
    }
    let CallTarget::Procedure { name, arguments } = &call.target else {
        return Err(unsupported(span, "CALL { }"));
    };
    let parts: Vec<String> = name.parts.iter().map(|p| p.kind.text.clone()).collect();
    let Some(procedure) = Procedure::named(&parts) else {
        return Err(unsupported(
            name.span,
            &format!(
                "the procedure {} (omni.vector, omni.text and omni.fuse are)",
                parts.join(".")
            ),
        ));
    };
    let arguments = arguments.as_deref().unwrap_or_default();
    // A fusion's legs are one argument: target, legs, k [, options].
    let (required, most) = match procedure {
        Procedure::Fuse => (3, 4),
        Procedure::Vector | Procedure::Text => (4, 5),
    };
    if arguments.len() < required || arguments.len() > most {
        return Err(refuse(
            QueryRefusal::WrongType,
            name.span,
            format!(
                "{} takes {required} or {most} arguments, not {}",
                parts.join("."),
                arguments.len()
            ),
        ));
    }
    let (target, type_name) = target(&arguments[0], variable_types, refuse)?;
    let def = catalog.get(&type_name).ok_or_else(|| {
        refuse(
            QueryRefusal::UnknownLabel,
            arguments[0].span,
            format!("{type_name} is no node type of the schema"),
        )
    })?;
    if !def.is_node() {
        return Err(refuse(
            QueryRefusal::UnknownLabel,
            arguments[0].span,
            format!("{type_name} is an edge type; a leg searches nodes"),
        ));
    }
    let options = arguments.get(required);
    let mut rrf_k = None;
    let mut method = None;
    let legs = match procedure {
        Procedure::Vector | Procedure::Text => {
            let kind = if procedure == Procedure::Vector {
                LegKind::Vector
            } else {
                LegKind::Text
            };
            let property = string(&arguments[1], "the property", refuse)?;
            check_property(def, kind, &property, arguments[1].span, refuse)?;
            let mut leg = LegCall {
                kind,
                property,
                query: &arguments[2],
                k: &arguments[3],
                options: BTreeMap::new(),
            };
            if let Some(options) = options {
                for (key, value, span) in map(options, refuse)? {
                    let option = LegOption::of_call(&key, kind)
                        .ok_or_else(|| no_option(&key, span, refuse))?;
                    leg.options.insert(option, value);
                }
            }
            vec![leg]
        }
        Procedure::Fuse => {
            let ExprKind::List(items) = &arguments[1].kind else {
                return Err(refuse(
                    QueryRefusal::WrongType,
                    arguments[1].span,
                    "omni.fuse takes its legs as a list of maps".into(),
                ));
            };
            if items.is_empty() || items.len() > FUSION_LEGS_MAX {
                return Err(refuse(
                    QueryRefusal::WrongType,
                    arguments[1].span,
                    format!("a fusion has 1 to {FUSION_LEGS_MAX} legs"),
                ));
            }
            let mut legs = Vec::with_capacity(items.len());
            for item in items {
                legs.push(fused_leg(def, item, refuse)?);
            }
            if let Some(options) = options {
                for (key, value, span) in map(options, refuse)? {
                    match key.as_str() {
                        "rrf_k" => rrf_k = Some(value),
                        "method" => method = Some(value),
                        _ => return Err(no_option(&key, span, refuse)),
                    }
                }
            }
            legs
        }
    };
    let Some(yielded) = &call.yield_clause else {
        return Err(refuse(
            QueryRefusal::Syntax,
            span,
            format!(
                "CALL {} needs YIELD: it yields {}",
                parts.join("."),
                outputs_named(procedure)
            ),
        ));
    };
    if yielded.all {
        return Err(unsupported(yielded.span, "YIELD *"));
    }
    let mut yields: Vec<(Output, String, Span)> = Vec::new();
    for item in &yielded.items {
        let ProjectionItemKind::Expression { expression, alias } = &item.kind else {
            return Err(unsupported(item.span, "YIELD *"));
        };
        let ExprKind::Variable(output) = &expression.kind else {
            return Err(refuse(
                QueryRefusal::Syntax,
                item.span,
                format!(
                    "YIELD names what the call yields: {}",
                    outputs_named(procedure)
                ),
            ));
        };
        let Some((_, kind)) = procedure
            .outputs()
            .iter()
            .find(|(name, _)| *name == output.kind.text)
        else {
            return Err(refuse(
                QueryRefusal::UnknownVariable,
                item.span,
                format!(
                    "{} yields {}, not {}",
                    parts.join("."),
                    outputs_named(procedure),
                    output.kind.text
                ),
            ));
        };
        let bound = alias.as_ref().unwrap_or(output);
        if yields.iter().any(|(_, name, _)| *name == bound.kind.text) {
            return Err(refuse(
                QueryRefusal::Syntax,
                item.span,
                format!("{} is yielded twice", bound.kind.text),
            ));
        }
        yields.push((*kind, bound.kind.text.clone(), bound.span));
    }
    Ok(Call {
        procedure,
        target,
        type_name,
        legs,
        k: &arguments[if procedure == Procedure::Fuse { 2 } else { 3 }],
        rrf_k,
        method,
        yields,
        filter: yielded.where_clause.as_ref(),
    })
}

fn outputs_named(procedure: Procedure) -> String {
    procedure
        .outputs()
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The first argument: a type's name, or a node variable bound before the call.
fn target(
    argument: &Expr,
    variable_types: &dyn Fn(&str) -> Option<Vec<String>>,
    refuse: Refuse<'_>,
) -> Result<(Target, String)> {
    match &argument.kind {
        ExprKind::Literal(literal) => match &literal.kind {
            LiteralKind::String(name) => Ok((Target::Type, name.value.clone())),
            _ => Err(target_refused(argument.span, refuse)),
        },
        ExprKind::Variable(name) => match variable_types(&name.kind.text).as_deref() {
            Some([only]) => Ok((Target::Variable(name.kind.text.clone()), only.clone())),
            Some(_) => Err(refuse(
                QueryRefusal::WrongType,
                argument.span,
                format!(
                    "{} may be a node of several types; a leg searches one (give it a label)",
                    name.kind.text
                ),
            )),
            None => Err(refuse(
                QueryRefusal::UnknownVariable,
                argument.span,
                format!("{} is not a node bound before the call", name.kind.text),
            )),
        },
        _ => Err(target_refused(argument.span, refuse)),
    }
}

fn target_refused(span: Span, refuse: Refuse<'_>) -> OmniError {
    refuse(
        QueryRefusal::WrongType,
        span,
        "a leg searches a node type (its name as a string) or a node variable bound before it"
            .into(),
    )
}

fn string(argument: &Expr, what: &str, refuse: Refuse<'_>) -> Result<String> {
    match &argument.kind {
        ExprKind::Literal(literal) => match &literal.kind {
            LiteralKind::String(value) => Ok(value.value.clone()),
            _ => Err(refuse(
                QueryRefusal::WrongType,
                argument.span,
                format!("{what} is a string literal"),
            )),
        },
        _ => Err(refuse(
            QueryRefusal::WrongType,
            argument.span,
            format!("{what} is a string literal"),
        )),
    }
}

/// A map literal's entries: key, value, span.
fn map<'q>(argument: &'q Expr, refuse: Refuse<'_>) -> Result<Vec<(String, &'q Expr, Span)>> {
    let ExprKind::Map(entries) = &argument.kind else {
        return Err(refuse(
            QueryRefusal::WrongType,
            argument.span,
            "options are a map literal ({name: value, ...})".into(),
        ));
    };
    Ok(entries
        .iter()
        .map(|entry| (entry.key.kind.text.clone(), &entry.value, entry.span))
        .collect())
}

fn no_option(key: &str, span: Span, refuse: Refuse<'_>) -> OmniError {
    refuse(
        QueryRefusal::Unsupported,
        span,
        format!("{key} is no option here (docs/query.md lists each procedure's)"),
    )
}

/// One map of a fusion's legs: `{vector: 'p', query: v, k: n, ...}` or
/// `{text: 'p', query: t, k: n, ...}`.
fn fused_leg<'q>(def: &TypeDef, item: &'q Expr, refuse: Refuse<'_>) -> Result<LegCall<'q>> {
    let entries = map(item, refuse)?;
    let mut kind_property: Option<(LegKind, String, Span)> = None;
    let mut query = None;
    let mut k = None;
    let mut options = BTreeMap::new();
    for (key, value, span) in &entries {
        match key.as_str() {
            "vector" | "text" => {
                if kind_property.is_some() {
                    return Err(refuse(
                        QueryRefusal::WrongType,
                        *span,
                        "a leg is `vector` or `text`, once".into(),
                    ));
                }
                let kind = if key == "vector" {
                    LegKind::Vector
                } else {
                    LegKind::Text
                };
                let property = string(value, "a leg's property", refuse)?;
                kind_property = Some((kind, property, value.span));
            }
            "query" => query = Some(*value),
            "k" => k = Some(*value),
            _ => {}
        }
    }
    let Some((kind, property, property_span)) = kind_property else {
        return Err(refuse(
            QueryRefusal::WrongType,
            item.span,
            "a leg names its property as `vector: 'p'` or `text: 'p'`".into(),
        ));
    };
    check_property(def, kind, &property, property_span, refuse)?;
    for (key, value, span) in entries {
        if matches!(key.as_str(), "vector" | "text" | "query" | "k") {
            continue;
        }
        let option =
            LegOption::of_fused(&key, kind).ok_or_else(|| no_option(&key, span, refuse))?;
        options.insert(option, value);
    }
    let (Some(query), Some(k)) = (query, k) else {
        return Err(refuse(
            QueryRefusal::WrongType,
            item.span,
            "a leg gives its `query` and its `k`".into(),
        ));
    };
    Ok(LegCall {
        kind,
        property,
        query,
        k,
        options,
    })
}

/// The property a leg searches: a vector, or text with a declared full-text index.
fn check_property(
    def: &TypeDef,
    kind: LegKind,
    property: &str,
    span: Span,
    refuse: Refuse<'_>,
) -> Result<()> {
    let Some(column) = def.columns().iter().find(|c| c.name == property) else {
        return Err(refuse(
            QueryRefusal::UnknownProperty,
            span,
            format!("{} has no property {property}", def.name()),
        ));
    };
    match kind {
        LegKind::Vector => match column.data_type {
            PropertyType::Vector(_) => Ok(()),
            other => Err(refuse(
                QueryRefusal::WrongType,
                span,
                format!("{property} is {}, not a vector", other.to_pg()),
            )),
        },
        LegKind::Text => {
            let declared = def
                .declared_indexes()
                .iter()
                .any(|index| index.kind == IndexKind::FullText && index.column == property);
            if declared {
                Ok(())
            } else {
                Err(refuse(
                    QueryRefusal::WrongType,
                    span,
                    format!(
                        "{}.{property} declares no full-text index: add @index(fts) and apply the schema",
                        def.name()
                    ),
                ))
            }
        }
    }
}
