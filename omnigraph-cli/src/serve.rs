//! `omnigraph serve` and `omnigraph token`: a server on the terminal until Ctrl-C, and
//! its tokens file.

use crate::output::Output;
use omnigraph_core::storage::StorageOptions;
use omnigraph_core::{InputLocation, OmniError, Result};
use omnigraph_server::tokens::{Role, TokenFile};
use omnigraph_server::{Limits, Server, ServerConfig};
use serde_json::json;
use std::path::{Path, PathBuf};

/// What `omnigraph serve` was asked for.
pub struct ServeRequest {
    pub root: Option<String>,
    pub graphs: Vec<String>,
    pub listen: std::net::SocketAddr,
    pub tokens: Option<PathBuf>,
    pub insecure_no_auth: bool,
    pub limits: Limits,
}

/// A root's default name: its last path segment.
fn name_of_root(root: &str) -> Result<String> {
    let trimmed = root.trim_end_matches('/');
    let name = trimmed.rsplit('/').next().unwrap_or(trimmed);
    omnigraph_server::tokens::check_graph_name(name).map_err(|_| {
        OmniError::bad_input(
            InputLocation::in_source("ROOT").field(root),
            format!(
                "the root's last segment {name:?} is not a graph name (letters, digits, '-', '_', '.'): serve it with --graph NAME=ROOT"
            ),
        )
    })?;
    Ok(name.to_owned())
}

/// Serves until Ctrl-C, then shuts down gracefully.
pub async fn serve(out: &Output, request: ServeRequest, options: StorageOptions) -> Result<()> {
    let mut config = ServerConfig::new(request.listen)
        .storage_options(options)
        .limits(request.limits);
    if let Some(root) = &request.root {
        config = config.graph(&name_of_root(root)?, root)?;
    }
    for pair in &request.graphs {
        let Some((name, root)) = pair.split_once('=') else {
            return Err(OmniError::bad_input(
                InputLocation::in_source("--graph").field(pair.clone()),
                "a served graph is NAME=ROOT",
            ));
        };
        config = config.graph(name, root)?;
    }
    config = match (request.tokens, request.insecure_no_auth) {
        (Some(_), true) => {
            return Err(OmniError::bad_input(
                InputLocation::in_source("--insecure-no-auth"),
                "give --tokens FILE or --insecure-no-auth, not both",
            ));
        }
        (Some(file), false) => config.tokens(file),
        (None, true) => config.insecure_no_auth(),
        (None, false) => config,
    };
    let server = Server::bind(config).await?;
    let address = server.local_addr();
    if server.is_insecure() {
        eprintln!(
            "WARNING: --insecure-no-auth: every request is admitted with every role, without a token"
        );
    }
    out.emit(
        json!({
            "listening": format!("http://{address}"),
            "graphs": server.graphs(),
            "insecure_no_auth": server.is_insecure(),
        }),
        |_| {
            println!(
                "serving {} on http://{address} (Ctrl-C stops)",
                server.graphs().join(", ")
            );
        },
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let stop = std::sync::Mutex::new(Some(stop));
    let presses = std::sync::atomic::AtomicU32::new(0);
    let installed = ctrlc::set_handler(move || {
        if presses.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            eprintln!(
                "shutting down: requests in flight finish, maintenance stops at its next cancel point (Ctrl-C again exits at once)"
            );
            if let Some(stop) = stop.lock().ok().and_then(|mut stop| stop.take()) {
                let _ = stop.send(());
            }
        } else {
            std::process::exit(130);
        }
    });
    if let Err(error) = installed {
        eprintln!("warning: Ctrl-C will not shut down gracefully: {error}");
    }
    server
        .run(async move {
            let _ = stopped.await;
        })
        .await
}

/// Adds a token and prints it once.
pub fn token_add(out: &Output, file: &Path, role: &str, graph: Option<&str>) -> Result<()> {
    let role = Role::parse(role)?;
    let mut tokens = TokenFile::read_or_empty(file)?;
    let (entry, token) = tokens.add(role, graph)?;
    tokens.write()?;
    out.emit(
        json!({"id": entry.id, "role": entry.role, "graph": entry.graph, "token": token}),
        |_| {
            println!("{token}");
            eprintln!(
                "token {} with role {} on {}: shown once, stored only as its hash in {}",
                entry.id,
                entry.role,
                entry.graph.as_deref().unwrap_or("every graph"),
                file.display()
            );
        },
    );
    Ok(())
}

/// Lists the tokens' ids, roles and graphs.
pub fn token_list(out: &Output, file: &Path) -> Result<()> {
    let tokens = TokenFile::read(file)?;
    let entries: Vec<serde_json::Value> = tokens
        .entries()
        .iter()
        .map(|entry| {
            json!({
                "id": entry.id,
                "role": entry.role,
                "graph": entry.graph,
                "created_at": entry.created_at,
                "created_at_text": omnigraph_server::view::rfc3339_micros(entry.created_at),
            })
        })
        .collect();
    out.emit(json!({"tokens": entries}), |_| {
        for entry in tokens.entries() {
            println!(
                "{}  {:<8} {:<20} {}",
                entry.id,
                entry.role,
                entry.graph.as_deref().unwrap_or("*"),
                omnigraph_server::view::rfc3339_micros(entry.created_at)
            );
        }
    });
    Ok(())
}

/// Removes a token.
pub fn token_revoke(out: &Output, file: &Path, id: &str) -> Result<()> {
    let mut tokens = TokenFile::read(file)?;
    let entry = tokens.revoke(id)?;
    tokens.write()?;
    out.emit(json!({"revoked": entry.id}), |_| {
        println!("revoked {}", entry.id)
    });
    Ok(())
}
