//! What a server serves, where, and within which bounds.

use crate::limits::{GRAPH_NAME_BYTES_MAX, Limits};
use omnigraph_core::storage::{StorageOptions, StorageRoot};
use omnigraph_core::{InputLocation, OmniError, Result};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// How requests prove who sends them.
#[derive(Clone, Debug)]
pub(crate) enum AuthConfig {
    /// Bearer tokens from a file of hashed tokens.
    Tokens(PathBuf),
    /// Every request is admitted with every role; announced on every start.
    InsecureNoAuth,
}

/// Where a served graph is.
#[derive(Clone, Debug)]
pub(crate) enum GraphSource {
    /// A folder or URI, opened with the server's storage options.
    Uri(String),
    /// A root the embedder opened (its options, counters and faults its own).
    Root(Arc<StorageRoot>),
}

/// What to serve, where, and within which bounds.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub(crate) listen: SocketAddr,
    pub(crate) graphs: Vec<(String, GraphSource)>,
    pub(crate) storage_options: StorageOptions,
    pub(crate) auth: Option<AuthConfig>,
    pub(crate) limits: Limits,
}

impl ServerConfig {
    /// A server on `listen` (port 0: any free port) with no graph yet and no way to
    /// authenticate: [`ServerConfig::tokens`] or [`ServerConfig::insecure_no_auth`] is
    /// required before [`crate::Server::bind`].
    pub fn new(listen: SocketAddr) -> ServerConfig {
        ServerConfig {
            listen,
            graphs: Vec::new(),
            storage_options: StorageOptions::default(),
            auth: None,
            limits: Limits::default(),
        }
    }

    /// Serves the graph at `root` (a folder or a URI) under `name` (letters, digits,
    /// `-`, `_` and `.`, starting with a letter or digit, at most
    /// [`GRAPH_NAME_BYTES_MAX`] bytes; once per server).
    pub fn graph(self, name: &str, root: &str) -> Result<ServerConfig> {
        self.source(name, GraphSource::Uri(root.to_owned()))
    }

    /// Serves the graph in a root already open under `name`.
    pub fn graph_in_root(self, name: &str, root: Arc<StorageRoot>) -> Result<ServerConfig> {
        self.source(name, GraphSource::Root(root))
    }

    fn source(mut self, name: &str, source: GraphSource) -> Result<ServerConfig> {
        check_graph_name(name)?;
        if self.graphs.iter().any(|(served, _)| served == name) {
            return Err(OmniError::bad_input(
                InputLocation::in_source("--graph").field(name),
                format!("graph {name:?} is named twice"),
            ));
        }
        self.graphs.push((name.to_owned(), source));
        Ok(self)
    }

    /// Settings for every graph's store (an `s3://` root's endpoint, region, ...).
    pub fn storage_options(mut self, options: StorageOptions) -> ServerConfig {
        self.storage_options = options;
        self
    }

    /// Requests authenticate with bearer tokens from the hashed tokens in `file`
    /// (`omnigraph token add`), re-read when the file changes.
    pub fn tokens(mut self, file: PathBuf) -> ServerConfig {
        self.auth = Some(AuthConfig::Tokens(file));
        self
    }

    /// Every request is admitted with every role. The server says so on every start.
    pub fn insecure_no_auth(mut self) -> ServerConfig {
        self.auth = Some(AuthConfig::InsecureNoAuth);
        self
    }

    /// The bounds the server enforces.
    pub fn limits(mut self, limits: Limits) -> ServerConfig {
        self.limits = limits;
        self
    }
}

/// A graph's name as it appears in routes: letters, digits, `-`, `_` and `.`, starting
/// with a letter or digit, so it never names a path (`..`, `.hidden`) and is never empty.
pub(crate) fn check_graph_name(name: &str) -> Result<()> {
    let valid = name.len() <= GRAPH_NAME_BYTES_MAX
        && name
            .bytes()
            .next()
            .is_some_and(|first| first.is_ascii_alphanumeric())
        && name.bytes().all(|byte| {
            byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' || byte == b'.'
        });
    if valid {
        return Ok(());
    }
    Err(OmniError::bad_input(
        InputLocation::in_source("graph name").field(name),
        format!(
            "a graph name is 1 to {GRAPH_NAME_BYTES_MAX} letters, digits, '-', '_' or '.', starting with a letter or digit"
        ),
    ))
}
