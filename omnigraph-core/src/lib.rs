//! OmniGraph core: what every layer above needs and nothing that publishes.
//!
//! - [`error`]: [`OmniError`], the [`Evidence`] every error carries, and the table from
//!   each error to its stable code, CLI exit code and HTTP status.
//! - `classify`: storage failures from `object_store` and Lance, classified by type.
//! - [`schema`]: the `.pg` schema language and the checked [`schema::Catalog`].
//! - [`storage`]: a root (local folder, `memory://`, `s3://`) and the counting,
//!   fault-injecting wrapper every request in it passes through.
//! - [`adapter`]: the only module that calls Lance write APIs; it stages detached links.
//! - `keys`: a row's key rendered as text, and an Arrow cell as JSON, as every layer
//!   renders them.
//! - [`failpoints`]: the registry of failpoint names.
//! - [`seams`]: the clock and id seams for deterministic simulation.
//!
//! **Supported API.** A crate that builds its own layer on Lance tables takes
//! [`storage::StorageRoot`], the [`adapter`] entry points (each is listed in
//! `adapter::registry::ENTRY_POINTS`) and [`OmniError`]. `seams` and `failpoints` are
//! test seams: stable, but meant for tests and simulations.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use omnigraph_core::storage::{PutOutcome, StorageRoot};
//! // Put-if-absent is the one fence the layers above build on.
//! let root = StorageRoot::open("memory://core-tour").await.unwrap();
//! let first = root.put_if_absent("a/object", "one".into()).await.unwrap();
//! let second = root.put_if_absent("a/object", "two".into()).await.unwrap();
//! assert_eq!((first, second), (PutOutcome::Created, PutOutcome::AlreadyExists));
//! // A schema is checked whole before anything uses it.
//! let catalog = omnigraph_core::schema::parse("people.pg", "node Person { id: String @key }");
//! assert_eq!(catalog.unwrap().types().len(), 1);
//! # });
//! ```
#![warn(missing_docs)]
#![warn(unreachable_pub)]
// Built without `internal-api` (as `cargo xtask ci` checks each library crate), the
// supported API must not name a type it does not export.
#![cfg_attr(
    not(feature = "internal-api"),
    deny(private_interfaces, private_bounds, unnameable_types)
)]
// Without `internal-api`, what only the crates above use is dead here.
#![cfg_attr(not(feature = "internal-api"), allow(dead_code, unreachable_pub))]

pub mod adapter;
pub mod error;
pub mod failpoints;
pub mod limits;
pub mod schema;
pub mod seams;
pub mod storage;

// Outside the supported API: public with `internal-api` (ARCHITECTURE.md).
#[cfg(feature = "internal-api")]
pub mod classify;
#[cfg(not(feature = "internal-api"))]
mod classify;
#[cfg(feature = "internal-api")]
pub mod filter;
#[cfg(not(feature = "internal-api"))]
mod filter;
#[cfg(feature = "internal-api")]
pub mod fragments;
#[cfg(not(feature = "internal-api"))]
mod fragments;
#[cfg(feature = "internal-api")]
pub mod keys;
#[cfg(not(feature = "internal-api"))]
mod keys;

/// Arrow arrays, re-exported so the layers above use Lance's exact arrow version.
pub use arrow_array;
/// Arrow schemas, re-exported for the same reason.
pub use arrow_schema;
/// Lance, re-exported for reads in the layers above; writes go through [`adapter`].
pub use lance;
/// Lance's index types (queries, parameters), re-exported for the read side.
pub use lance_index;
/// Lance's distance types (a vector search's metric), re-exported for the read side.
pub use lance_linalg;
/// Lance's tokenizers (a full-text index's own), re-exported for the read side.
pub use lance_tokenizer;

pub use error::{
    EXIT_CONFLICT, EXIT_FAILURE, EXIT_SUCCESS, EXIT_TEMPORARY, EXIT_USAGE, ErrorCode, ErrorKind,
    Evidence, InputLocation, MergeConflict, MergeConflictKind, OmniError, QueryFailure,
    QueryRefusal, ReadSetMember, Result, StorageKind,
};
