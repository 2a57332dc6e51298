//! OmniGraph over HTTP: one process serves graphs to applications, with bearer tokens
//! and roles, named limits, and maintenance behind routes.
//!
//! The supported API:
//! - [`ServerConfig`] and [`Limits`]: what to serve, where, and within which bounds;
//! - [`Server`]: [`Server::bind`] opens every graph and binds the listener, then
//!   [`Server::run`] serves until a shutdown future completes;
//! - [`tokens`]: the file of hashed tokens (`omnigraph token add|list|revoke`);
//! - [`view`]: the JSON views of engine types, shared with the CLI's `--json`;
//! - [`openapi`]: the OpenAPI document of the routes.
//!
//! `docs/server.md` is the operator's guide: routes, statuses, tokens and limits.
//!
//! ```no_run
//! # async fn run() -> omnigraph_core::Result<()> {
//! use omnigraph_server::{Server, ServerConfig};
//! let config = ServerConfig::new("127.0.0.1:8080".parse().unwrap())
//!     .graph("people", "/data/people")?
//!     .insecure_no_auth();
//! let server = Server::bind(config).await?;
//! println!("listening on {}", server.local_addr());
//! server.run(std::future::pending()).await
//! # }
//! ```

// Handlers await deep futures (a write -> ingest -> staging -> publisher -> Lance).
#![recursion_limit = "256"]
#![warn(unreachable_pub)]

mod auth;
mod config;
mod error;
mod graphs;
mod group;
mod idempotency;
pub mod limits;
pub mod openapi;
mod routes;
mod runs;
mod serve;
pub mod tokens;
pub mod view;

pub use config::ServerConfig;
pub use limits::Limits;
pub use serve::Server;
