//! The server's life: open every graph and bind, serve, and shut down gracefully (stop
//! accepting, let requests in flight and their publications finish, cancel maintenance
//! at its next cancel point, wait for the runs to end).

use crate::auth::Authenticator;
use crate::config::{AuthConfig, ServerConfig};
use crate::graphs::ServedGraph;
use crate::routes::{self, Shared};
use crate::runs::Runs;
use omnigraph_core::{InputLocation, OmniError, Result};
use omnigraph_maintenance::MaintenanceBudget;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_layer::Layer;

/// The pause after an accept failed for want of resources (file descriptors).
const ACCEPT_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// A server bound to its address with every graph open, not yet serving.
pub struct Server {
    listener: tokio::net::TcpListener,
    local_addr: SocketAddr,
    state: Arc<Shared>,
}

impl Server {
    /// Opens every graph of `config` (a root without a graph fails here) and the tokens
    /// file, and binds the listener.
    pub async fn bind(config: ServerConfig) -> Result<Server> {
        let Some(auth) = &config.auth else {
            return Err(OmniError::bad_input(
                InputLocation::in_source("--tokens"),
                "a server needs a tokens file (--tokens FILE), or --insecure-no-auth",
            ));
        };
        if config.limits.header_read_time.is_zero() {
            return Err(OmniError::bad_input(
                InputLocation::in_source("--header-read-time"),
                "the header-read time is more than zero",
            ));
        }
        if config.limits.query_result_bytes == 0 {
            return Err(OmniError::bad_input(
                InputLocation::in_source("--query-result-bytes-max"),
                "a query's answer may take more than zero bytes",
            ));
        }
        if config.graphs.is_empty() {
            return Err(OmniError::bad_input(
                InputLocation::in_source("--graph"),
                "a server serves at least one graph",
            ));
        }
        let authenticator = Authenticator::new(
            auth,
            config.limits.token_concurrent_requests,
            config.limits.token_requests_per_second,
        );
        authenticator.load()?;
        let mut graphs = BTreeMap::new();
        for (name, source) in &config.graphs {
            let graph = ServedGraph::open(source, &config.storage_options).await?;
            graphs.insert(name.clone(), Arc::new(graph));
        }
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|error| {
                OmniError::bad_input(
                    InputLocation::in_source("--listen").field(config.listen.to_string()),
                    format!("cannot listen: {error}"),
                )
            })?;
        let local_addr = listener
            .local_addr()
            .map_err(|error| OmniError::internal(format!("no local address: {error}")))?;
        let state = Arc::new(Shared {
            graphs,
            auth: authenticator,
            runs: Runs::new(MaintenanceBudget::from_env()?),
            writes: Arc::new(crate::idempotency::Writes::new()),
            limits: config.limits.clone(),
            shutting_down: AtomicBool::new(false),
        });
        debug_assert!(matches!(auth, AuthConfig::InsecureNoAuth) == state.auth.is_insecure());
        // The router and the document come from the same handlers.
        debug_assert_eq!(crate::openapi::operations().len(), routes::ROUTES.len());
        Ok(Server {
            listener,
            local_addr,
            state,
        })
    }

    /// Where the server listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Whether requests are let in without a token (`--insecure-no-auth`).
    pub fn is_insecure(&self) -> bool {
        self.state.auth.is_insecure()
    }

    /// The names of the served graphs.
    pub fn graphs(&self) -> Vec<String> {
        self.state.graphs.keys().cloned().collect()
    }

    /// Serves until `shutdown` completes, then shuts down gracefully.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let state = self.state.clone();
        let graceful = {
            let state = state.clone();
            async move {
                shutdown.await;
                state.shutting_down.store(true, Ordering::SeqCst);
                for run in state.runs.running() {
                    run.cancel();
                }
            }
        };
        let router = routes::router(self.state);
        // A client that takes longer than the request time between chunks of its body
        // gets 408.
        let app = RequestBodyTimeoutLayer::new(state.limits.request_time).layer(router);
        connections(self.listener, app, state.limits.header_read_time, graceful).await;
        // Writes whose clients hung up end as they would have.
        state.writes.drained().await;
        // Runs started before the signal end at their next cancel point.
        for run in state.runs.running() {
            run.cancel();
            run.finished().await;
        }
        Ok(())
    }
}

/// Serves HTTP/1 connections from `listener` with `app` until `shutdown` completes,
/// then lets every open connection finish the request it serves and waits for them.
/// A client that takes longer than `header_read_time` to send a request's headers has
/// its connection closed (hyper's header-read timeout, which `axum::serve` does not
/// set), so a client that trickles headers holds no connection for long.
async fn connections<S>(
    listener: tokio::net::TcpListener,
    app: S,
    header_read_time: std::time::Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    S: tower::Service<
            axum::http::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read_time);
    // Every connection holds a receiver: the sender's `closed` is when all ended.
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                tokio::select! {
                    () = accept_failed(error) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        // A response goes out as written: small responses do not wait for an ack.
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let connection = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        let mut stopping = stopping.clone();
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            // The watch's borrow is not held across an await (it is not `Send`).
            let stopped = async { stopping.wait_for(|stop| *stop).await.is_ok() };
            tokio::select! {
                _ = connection.as_mut() => {}
                true = stopped => {
                    // The request in flight finishes; no other is read.
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(stopping);
        });
    }
    drop(listener);
    drop(stopping);
    let _ = stop.send(true);
    stop.closed().await;
}

/// After a failed accept: a connection that failed on its way in is the client's
/// problem; anything else (out of file descriptors) waits a moment before the next
/// accept, as `axum::serve` does, instead of spinning.
async fn accept_failed(error: std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    ) {
        return;
    }
    eprintln!("omnigraph serve: accept failed: {error}");
    tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
}
