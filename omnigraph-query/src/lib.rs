//! OmniGraph queries: an openCypher read language over the graph (`docs/query.md`).
//!
//! This crate's layer is above `omnigraph-graph`: [`query`] runs a query on an
//! `Omnigraph` handle's branch, at its head or a commit, and streams the rows as Arrow
//! record batches. A query is parsed with the `open-cypher` crate (the openCypher
//! 2024.3 grammar), then checked against the schema in force at the commit it reads:
//! every label, edge type, property, variable and function it names, each clause
//! (writing clauses and the ones the engine does not run are refused by name), and the
//! bound of every variable-length pattern. A refusal is
//! [`omnigraph_core::OmniError::BadQuery`], naming its line, column and
//! [`omnigraph_core::QueryRefusal`]. A checked query is compiled to one DataFusion plan
//! over the tables the commit pins (`plan/`) and run with a memory budget (`run.rs`);
//! a query that stops while it runs is [`omnigraph_core::OmniError::QueryFailed`].
//!
//! **Supported API.** [`query`] with [`QueryOptions`] and the [`QueryRows`] it returns;
//! [`check`] and the [`CheckedQuery`] it returns, with [`Mode`] and [`Binding`];
//! [`limits`].
//!
//! ```
//! use omnigraph_core::QueryRefusal;
//! let catalog = omnigraph_core::schema::parse(
//!     "social.pg",
//!     "node Person { name: String @key, age: Int32? }\nedge Knows: Person -> Person",
//! )
//! .unwrap();
//! let checked = omnigraph_query::check(
//!     &catalog,
//!     "MATCH (a:Person)-[:Knows]->(b) WHERE a.age < $age RETURN b.name, count(*) AS n",
//! )
//! .unwrap();
//! assert_eq!(checked.columns(), ["b.name", "n"]);
//! // A misspelt property is refused where it is written.
//! let error = omnigraph_query::check(&catalog, "MATCH (a:Person)\nRETURN a.agee").unwrap_err();
//! assert!(matches!(
//!     error,
//!     omnigraph_core::OmniError::BadQuery { refusal: QueryRefusal::UnknownProperty, line: 2, column: 10, .. }
//! ));
//! ```
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![cfg_attr(
    not(feature = "internal-api"),
    deny(private_interfaces, private_bounds, unnameable_types)
)]
// Without `internal-api`, what only the crates above use is dead here.
#![cfg_attr(not(feature = "internal-api"), allow(dead_code, unreachable_pub))]

pub mod limits;

mod check;
mod exec;
mod functions;
mod plan;
mod position;
mod procedures;
mod run;

pub use check::{Binding, CheckedQuery, Mode, check};
pub use run::{QueryOptions, QueryRows, query};

#[cfg(test)]
mod tests;
