//! The checker against a schema of people, cities and companies: what it accepts, with
//! the bindings and columns it finds, and each refusal at its line and column.

use crate::{Binding, Mode, check};
use omnigraph_core::schema::Catalog;
use omnigraph_core::{ErrorKind, Evidence, OmniError, QueryRefusal};

const SCHEMA: &str = "
node Person { name: String @key, age: Int32?, born: Timestamp? }
node City { name: String @key, population: Int64? }
node Company { name: String @key }
edge Knows: Person -> Person { since: Int32? }
edge LivesIn: Person -> City
edge WorksAt: Person -> Company { role: String? }
";

fn catalog() -> Catalog {
    omnigraph_core::schema::parse("social.pg", SCHEMA).unwrap()
}

fn refused(text: &str) -> (QueryRefusal, u64, u64, String) {
    match check(&catalog(), text) {
        Err(
            error @ OmniError::BadQuery {
                refusal,
                line,
                column,
                ..
            },
        ) => {
            assert_eq!(error.kind(), ErrorKind::BadQuery);
            assert_eq!(*error.evidence(), Evidence::BeforeEffect);
            (refusal, line, column, error.to_string())
        }
        other => panic!("{text:?} was not refused: {other:?}"),
    }
}

fn node(types: &[&str]) -> Binding {
    Binding::Node(types.iter().map(|name| name.to_string()).collect())
}

#[test]
fn every_supported_clause_is_accepted() {
    let catalog = catalog();
    for text in [
        "MATCH (p:Person) RETURN p.name",
        "MATCH (p:Person {name: 'ada', age: 36}) RETURN p",
        "MATCH (a:Person)-[:Knows]->(b:Person) RETURN a.name, b.name",
        "MATCH (a:Person)<-[:Knows]-(b) RETURN b.age",
        "MATCH (a:Person)-[:Knows]-(b) RETURN count(*)",
        "MATCH (a:Person)-[r:Knows|WorksAt]->(x) RETURN r",
        "MATCH (a:Person)-[]->(c:City) RETURN c.population",
        "MATCH (a:Person)-[:Knows*1..3]->(b:Person) RETURN count(DISTINCT b)",
        "MATCH (a:Person)-[*..2]->(b) RETURN b",
        "MATCH (a:Person), (c:City) WHERE a.name = c.name RETURN a, c",
        "MATCH (a:Person)-[:LivesIn]->(c:City), (b:Person)-[:LivesIn]->(c) RETURN a, b",
        "MATCH (a:Person) OPTIONAL MATCH (a)-[:WorksAt]->(w) RETURN a.name, w.name",
        "MATCH (p:Person) WHERE p.age > 30 AND NOT p.name STARTS WITH 'x' OR p.age IS NULL XOR p.name IN ['a', 'b'] RETURN p",
        "MATCH (p:Person) WHERE p.name ENDS WITH 'a' AND p.name CONTAINS 'd' RETURN lower(p.name) AS n, abs(p.age - 40) * 2",
        "MATCH (p:Person) WHERE EXISTS { MATCH (p)-[:Knows]->(:Person) } RETURN p",
        "MATCH (p:Person) WHERE NOT EXISTS { (p)-[:WorksAt]->() } RETURN p",
        "MATCH (p:Person) WHERE COUNT { (p)-[:Knows]->() } > 2 RETURN p",
        "MATCH (p:Person)-[:LivesIn]->(c:City) WITH c, avg(p.age) AS age WHERE age < 40 RETURN c.name, age ORDER BY age DESC SKIP 1 LIMIT 5",
        "MATCH (p:Person) WITH p ORDER BY p.age LIMIT 10 MATCH (p)-[:Knows]->(f) RETURN f.name",
        "UNWIND [1, 2, 3] AS x RETURN x, x * 2 AS y",
        "MATCH (p:Person) RETURN DISTINCT p.age, collect(p.name), sum(p.age), min(p.age), max(p.age)",
        "MATCH (p:Person) WHERE p.age >= $age RETURN coalesce(p.age, 0), size(p.name) LIMIT $limit",
        "MATCH (p:Person) RETURN *",
        "MATCH (a:Person)-[k:Knows]->(b) RETURN k.src, k.dst, k.since",
        "MATCH (p:Person) RETURN CASE WHEN p.age < 18 THEN 'minor' ELSE 'adult' END AS group",
    ] {
        if let Err(error) = check(&catalog, text) {
            panic!("{text:?}: {error}");
        }
    }
}

#[test]
fn a_checked_query_names_its_columns_parameters_and_bindings() {
    let checked = check(
        &catalog(),
        "MATCH (a:Person)-[k:Knows]->(b)-[:LivesIn]->(c) WHERE a.age > $min RETURN b.name, count(*) AS n LIMIT $top",
    )
    .unwrap();
    assert_eq!(checked.mode(), Mode::Run);
    assert_eq!(checked.columns(), ["b.name", "n"]);
    assert_eq!(
        checked.parameters().iter().collect::<Vec<_>>(),
        ["min", "top"]
    );
    let bindings = checked.bindings();
    assert_eq!(bindings["a"], node(&["Person"]));
    // b is narrowed by both of its edges; c by LivesIn's target.
    assert_eq!(bindings["b"], node(&["Person"]));
    assert_eq!(bindings["c"], node(&["City"]));
    assert_eq!(bindings["k"], Binding::Relationship(vec!["Knows".into()]));
    // An edge of any type takes every type whose endpoints fit.
    let any = check(&catalog(), "MATCH (a:Person)-[r]->(x) RETURN r").unwrap();
    assert_eq!(
        any.bindings()["r"],
        Binding::Relationship(vec!["Knows".into(), "LivesIn".into(), "WorksAt".into()])
    );
    assert_eq!(any.bindings()["x"], node(&["City", "Company", "Person"]));
    let explain = check(&catalog(), "EXPLAIN MATCH (p:Person) RETURN p").unwrap();
    assert_eq!(explain.mode(), Mode::Explain);
    let profile = check(&catalog(), "PROFILE MATCH (p:Person) RETURN p").unwrap();
    assert_eq!(profile.mode(), Mode::Profile);
}

#[test]
fn each_refusal_names_its_kind_line_and_column() {
    use QueryRefusal::*;
    let cases: &[(&str, QueryRefusal, u64, u64)] = &[
        ("MATCH (p:Person RETURN p", Syntax, 1, 7),
        ("MATCH (p:Persn) RETURN p", UnknownLabel, 1, 10),
        ("MATCH (p:Knows) RETURN p", UnknownLabel, 1, 10),
        (
            "MATCH (p:Person)-[:Likes]->(q) RETURN q",
            UnknownRelationshipType,
            1,
            20,
        ),
        (
            "MATCH (c:City)-[:Knows]->(q) RETURN q",
            UnknownRelationshipType,
            1,
            15,
        ),
        (
            "MATCH (p:Person)<-[:LivesIn]-(c:City) RETURN p",
            UnknownRelationshipType,
            1,
            17,
        ),
        ("MATCH (p:Person)\nRETURN p.agee", UnknownProperty, 2, 10),
        (
            "MATCH (p:Person {agee: 3}) RETURN p",
            UnknownProperty,
            1,
            18,
        ),
        (
            "MATCH (p:Person)-[k:Knows {role: 'x'}]->(q) RETURN k",
            UnknownProperty,
            1,
            28,
        ),
        ("MATCH (p:Person) RETURN q.name", UnknownVariable, 1, 25),
        (
            "MATCH (p:Person) WITH p.name AS n RETURN p",
            UnknownVariable,
            1,
            42,
        ),
        ("MATCH (p:Person {age: 'old'}) RETURN p", WrongType, 1, 23),
        ("MATCH (p:Person) RETURN p LIMIT 'ten'", WrongType, 1, 33),
        ("MATCH (p:Person) RETURN lower(p.name, 2)", WrongType, 1, 25),
        (
            "MATCH (p:Person)-[:Knows*]->(q) RETURN q",
            UnboundedLength,
            1,
            25,
        ),
        (
            "MATCH (p:Person)-[:Knows*2..]->(q) RETURN q",
            UnboundedLength,
            1,
            25,
        ),
        (
            "MATCH (p:Person)-[:Knows*1..50]->(q) RETURN q",
            UnboundedLength,
            1,
            25,
        ),
        ("CREATE (p:Person {name: 'x'})", WritingClause, 1, 1),
        ("MATCH (p:Person)\n  SET p.age = 3", WritingClause, 2, 3),
        ("MATCH (p:Person) DETACH DELETE p", WritingClause, 1, 18),
        ("MERGE (p:Person {name: 'x'}) RETURN p", WritingClause, 1, 1),
        (
            "MATCH (p:Person) RETURN p UNION MATCH (q:Person) RETURN q",
            Unsupported,
            1,
            27,
        ),
        (
            "CALL db.labels() YIELD label RETURN label",
            Unsupported,
            1,
            6,
        ),
        (
            "MATCH (p:Person) RETURN apoc.text.clean(p.name)",
            Unsupported,
            1,
            25,
        ),
        (
            "MATCH (p:Person) WHERE count(*) > 1 RETURN p",
            Unsupported,
            1,
            24,
        ),
        (
            "MATCH path = (p:Person)-[:Knows]->(q) RETURN path",
            Unsupported,
            1,
            7,
        ),
        (
            "MATCH (p:Person) WHERE p.name =~ 'a.*' RETURN p",
            Unsupported,
            1,
            31,
        ),
        ("MATCH (p:Person)", Syntax, 1, 17),
    ];
    for (text, refusal, line, column) in cases {
        let (got, got_line, got_column, message) = refused(text);
        assert_eq!(
            (got, got_line, got_column),
            (*refusal, *line, *column),
            "{text:?}: {message}"
        );
    }
}

#[test]
fn a_refusal_says_what_it_refuses() {
    let (_, _, _, message) = refused("MATCH (p:Persn) RETURN p");
    assert!(
        message.contains("Persn") && message.contains("Person"),
        "{message}"
    );
    let (_, _, _, message) = refused("MATCH (p:Person) SET p.age = 1");
    assert!(message.contains("SET"), "{message}");
    let (_, _, _, message) = refused("MATCH (p:Person)-[:Knows*]->(q) RETURN q");
    assert!(
        message.contains(&crate::limits::VAR_LENGTH_HOPS_MAX.to_string()),
        "{message}"
    );
}

#[test]
fn a_query_past_the_size_limit_is_refused_before_it_is_parsed() {
    let long = format!(
        "MATCH (p:Person) WHERE p.name = '{}' RETURN p",
        "x".repeat(crate::limits::QUERY_BYTES_MAX)
    );
    let (refusal, line, column, _) = refused(&long);
    assert_eq!((refusal, line, column), (QueryRefusal::Unsupported, 1, 1));
}

#[test]
fn nesting_past_the_limit_is_refused_not_a_stack_overflow() {
    let depth = crate::limits::NESTING_MAX + 5;
    let text = format!(
        "MATCH (p:Person) RETURN {}p.age{}",
        "(".repeat(depth),
        ")".repeat(depth)
    );
    let (refusal, _, _, message) = refused(&text);
    assert_eq!(refusal, QueryRefusal::Unsupported, "{message}");
}

#[test]
fn the_functions_in_the_docs_are_the_functions_checked() {
    // Cargo sets CARGO_MANIFEST_DIR when it runs the test: this checkout's docs.
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let docs =
        std::fs::read_to_string(std::path::Path::new(&crate_dir).join("../docs/query.md")).unwrap();
    let begin = docs
        .find("<!-- functions: begin -->")
        .expect("the functions table");
    let end = docs.find("<!-- functions: end -->").expect("its end");
    let documented: Vec<(String, String, bool)> = docs[begin..end]
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((name.to_string(), cells[2].to_string(), cells[3] == "yes"))
        })
        .collect();
    let checked: Vec<(String, String, bool)> = crate::functions::FUNCTIONS
        .iter()
        .map(|function| {
            let mut arguments = crate::check::arity(function);
            if function.star {
                arguments.push_str(" (or `*`)");
            }
            (function.name.to_string(), arguments, function.aggregate)
        })
        .collect();
    assert_eq!(documented, checked, "docs/query.md's functions table");
}

#[test]
fn what_the_review_found_is_refused_or_accepted_as_cypher_says() {
    use QueryRefusal::*;
    let refused_cases: &[(&str, QueryRefusal)] = &[
        // A node that no type can be.
        (
            "MATCH (a)-[:LivesIn]->(a) RETURN a.bogus",
            UnknownRelationshipType,
        ),
        // Properties reached through other forms.
        ("MATCH (p:Person) RETURN (p).agee", UnknownProperty),
        ("MATCH (p:Person) RETURN p.name.agee", WrongType),
        ("MATCH (p:Person) RETURN p['agee']", Unsupported),
        // ORDER BY after an aggregating or DISTINCT projection sees only its columns.
        (
            "MATCH (p:Person) RETURN count(*) AS n ORDER BY p.age",
            UnknownVariable,
        ),
        (
            "MATCH (p:Person) RETURN DISTINCT p.name ORDER BY p.age",
            UnknownVariable,
        ),
        // WITH names what it passes on.
        ("MATCH (p:Person) WITH p.name RETURN 1", Syntax),
        ("MATCH (p:Person) UNWIND [1] AS p RETURN p", Syntax),
        // A pattern predicate binds nothing new.
        (
            "MATCH (a:Person) WHERE (a)-[:Knows]->(z:Person) RETURN a",
            UnknownVariable,
        ),
        // A variable-length path must be able to leave and reach its ends.
        (
            "MATCH (c:City)-[:LivesIn*1..2]->(p) RETURN p",
            UnknownRelationshipType,
        ),
        // Property-map values: a signed number, a list.
        ("MATCH (p:Person {name: -3}) RETURN p", WrongType),
        ("MATCH (p:Person {age: [1]}) RETURN p", WrongType),
        // One relationship variable names one relationship of a pattern.
        (
            "MATCH (a)-[r:Knows]->(b)-[r:Knows]->(c) RETURN r",
            WrongType,
        ),
    ];
    for (text, refusal) in refused_cases {
        let (got, _, _, message) = refused(text);
        assert_eq!(got, *refusal, "{text:?}: {message}");
    }
    let catalog = catalog();
    for text in [
        // An optional match narrows nothing bound before it.
        "MATCH (x) OPTIONAL MATCH (x)-[:LivesIn]->(c) RETURN x.population",
        // A relationship bound by an earlier clause is the same one.
        "MATCH (a)-[r:Knows]->(b) MATCH (a)-[r]->(b) RETURN r.since",
        // A long chain of one operator is not deep nesting.
        &format!(
            "MATCH (p:Person) WHERE {} RETURN p",
            (0..500)
                .map(|at| format!("p.age = {at}"))
                .collect::<Vec<_>>()
                .join(" OR ")
        ),
        // EXPLAIN after a comment, and before a comment.
        "/* why */ EXPLAIN MATCH (p:Person) RETURN p",
        "EXPLAIN/**/MATCH (p:Person) RETURN p",
    ] {
        if let Err(error) = check(&catalog, text) {
            panic!("{text:?}: {error}");
        }
    }
    let explained = check(&catalog, "/* why */ explain MATCH (p:Person) RETURN p").unwrap();
    assert_eq!(explained.mode(), Mode::Explain);
    // What EXISTS narrows stays in it: x may still be a city.
    let checked = check(
        &catalog,
        "MATCH (x) WHERE NOT EXISTS { (x)-[:LivesIn]->() } RETURN x",
    )
    .unwrap();
    assert_eq!(
        checked.bindings()["x"],
        node(&["City", "Company", "Person"])
    );
}

#[test]
fn a_query_too_deep_or_too_long_is_refused_before_the_parser_recurses() {
    let depth = crate::limits::NESTING_MAX + 1;
    let brackets = format!(
        "MATCH (p:Person) RETURN {}1{}",
        "(".repeat(depth),
        ")".repeat(depth)
    );
    let nots = format!(
        "MATCH (p:Person) WHERE {}true RETURN p",
        "NOT ".repeat(depth)
    );
    let tokens = format!(
        "MATCH {} RETURN 1",
        vec!["()"; crate::limits::QUERY_TOKENS_MAX].join(",")
    );
    let nested = format!(
        "MATCH (p:Person) WHERE {}true{} RETURN p",
        "EXISTS { MATCH (p) WHERE ".repeat(depth),
        " }".repeat(depth)
    );
    let elements = format!(
        "MATCH {} RETURN 1",
        (0..=crate::limits::PATTERN_ELEMENTS_MAX)
            .map(|at| format!("(n{at})"))
            .collect::<Vec<_>>()
            .join(",")
    );
    for text in [brackets, nots, tokens, nested, elements] {
        let (refusal, _, _, message) = refused(&text);
        assert_eq!(refusal, QueryRefusal::Unsupported, "{message}");
    }
}

#[test]
fn every_refusal_example_in_the_docs_is_refused_as_it_says() {
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let docs =
        std::fs::read_to_string(std::path::Path::new(&crate_dir).join("../docs/query.md")).unwrap();
    let mut examples = 0;
    for line in docs.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Some(name) = cells
            .get(1)
            .and_then(|cell| cell.strip_prefix('`')?.strip_suffix('`'))
        else {
            continue;
        };
        // A row is `| refusal | meaning | example |`: the example is the last cell.
        let Some(example) = cells
            .len()
            .checked_sub(2)
            .and_then(|at| cells[at].strip_prefix('`')?.strip_suffix('`'))
        else {
            continue;
        };
        if !QueryRefusal::ALL
            .iter()
            .any(|refusal| refusal.name() == name)
        {
            continue;
        }
        let (refusal, _, _, message) = refused(example);
        assert_eq!(refusal.name(), name, "{example:?}: {message}");
        examples += 1;
    }
    assert_eq!(examples, 9, "one example per refusal");
}
