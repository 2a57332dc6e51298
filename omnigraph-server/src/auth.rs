//! Who sends a request and what it may do: the bearer token checked against the tokens
//! file (re-read when it changes, so a revoked token stops working without a restart),
//! the role it has on the graph, and a slot among the token's requests in flight.

use crate::config::AuthConfig;
use crate::error::ApiError;
use crate::limits::{ANONYMOUS_CONCURRENT_REQUESTS_MAX, TOKEN_REQUESTS_PER_SECOND_MAX, TOKENS_MAX};
use crate::tokens::{Role, TokenFile};
use axum::http::{HeaderMap, header};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A request let in: who it is (the actor its commits record) and its slot.
#[derive(Debug)]
pub(crate) struct Admitted {
    /// `token:<id>`, or `anonymous` without auth.
    pub(crate) actor: String,
    _slot: OwnedSemaphorePermit,
}

/// The tokens file as last read, and what identified that read.
struct Loaded {
    stamp: Option<Stamp>,
    file: Option<Arc<TokenFile>>,
}

enum Mode {
    Tokens {
        path: PathBuf,
        loaded: Mutex<Loaded>,
    },
    InsecureNoAuth,
}

/// A token's request budget: a bucket refilled at the rate, holding a second's worth.
struct Bucket {
    requests: f64,
    at: Instant,
}

/// Checks each request's token, role, rate and slot.
pub(crate) struct Authenticator {
    mode: Mode,
    slots_per_token: usize,
    slots: Mutex<HashMap<String, Arc<Semaphore>>>,
    per_second: Option<u32>,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl Authenticator {
    pub(crate) fn new(
        auth: &AuthConfig,
        slots_per_token: usize,
        per_second: Option<u32>,
    ) -> Authenticator {
        let mode = match auth {
            AuthConfig::Tokens(path) => Mode::Tokens {
                path: path.clone(),
                loaded: Mutex::new(Loaded {
                    stamp: None,
                    file: None,
                }),
            },
            AuthConfig::InsecureNoAuth => Mode::InsecureNoAuth,
        };
        Authenticator {
            mode,
            slots_per_token: slots_per_token.max(1),
            slots: Mutex::new(HashMap::new()),
            per_second: per_second.map(|rate| rate.clamp(1, TOKEN_REQUESTS_PER_SECOND_MAX)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Reads the tokens file now, so a server does not start on a file it cannot use.
    pub(crate) fn load(&self) -> omnigraph_core::Result<()> {
        if let Mode::Tokens { path, loaded } = &self.mode {
            let file = TokenFile::read(path)?;
            let mut loaded = loaded.lock();
            loaded.stamp = stamp(path);
            loaded.file = Some(Arc::new(file));
        }
        Ok(())
    }

    /// The tokens file, re-read when its modification time or size changed. A file
    /// that cannot be read lets nobody in: a revocation must never be missed.
    fn tokens(&self, path: &PathBuf, loaded: &Mutex<Loaded>) -> Option<Arc<TokenFile>> {
        let now = stamp(path);
        let mut loaded = loaded.lock();
        if now != loaded.stamp || loaded.file.is_none() {
            loaded.stamp = now;
            loaded.file = match TokenFile::read(path) {
                Ok(file) => Some(Arc::new(file)),
                Err(error) => {
                    eprintln!("omnigraph serve: the tokens file cannot be used: {error}");
                    None
                }
            };
        }
        loaded.file.clone()
    }

    /// Lets a request in when its token has at least `needed` on `graph` and a free
    /// slot: 401 without a known token, 403 without the role, 429 without a slot.
    pub(crate) fn admit(
        &self,
        headers: &HeaderMap,
        graph: &str,
        needed: Role,
    ) -> Result<Admitted, ApiError> {
        let (key, limit) = match &self.mode {
            Mode::InsecureNoAuth => ("anonymous".to_owned(), ANONYMOUS_CONCURRENT_REQUESTS_MAX),
            Mode::Tokens { path, loaded } => {
                let presented = bearer(headers)?;
                let Some(file) = self.tokens(path, loaded) else {
                    return Err(ApiError::Unauthorized(
                        "the server cannot read its tokens file; nobody is let in (see its log)",
                    ));
                };
                let Some(entry) = file.verify(presented) else {
                    return Err(ApiError::Unauthorized("the bearer token is not known"));
                };
                let held = entry.role_on(graph);
                if held.is_none_or(|held| held < needed) {
                    return Err(ApiError::Forbidden {
                        graph: graph.to_owned(),
                        needed,
                        held,
                    });
                }
                (format!("token:{}", entry.id), self.slots_per_token)
            }
        };
        self.spend(&key)?;
        let semaphore = {
            let mut slots = self.slots.lock();
            if !slots.contains_key(&key) && slots.len() > TOKENS_MAX {
                // Revoked tokens' entries go once idle: a permit out holds its Arc.
                slots.retain(|_, semaphore| Arc::strong_count(semaphore) > 1);
            }
            slots
                .entry(key.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(limit)))
                .clone()
        };
        let slot = semaphore
            .try_acquire_owned()
            .map_err(|_| ApiError::TooManyRequests { limit })?;
        Ok(Admitted {
            actor: key,
            _slot: slot,
        })
    }

    /// Takes one request from the key's bucket, when a rate is set: 429 when it is
    /// empty (it refills within a second, so `Retry-After: 1` holds).
    fn spend(&self, key: &str) -> Result<(), ApiError> {
        let Some(rate) = self.per_second else {
            return Ok(());
        };
        let rate = f64::from(rate);
        let now = Instant::now();
        let mut buckets = self.buckets.lock();
        if !buckets.contains_key(key) && buckets.len() > TOKENS_MAX {
            // Full buckets are the same as none.
            buckets.retain(|_, bucket| {
                bucket.requests + now.duration_since(bucket.at).as_secs_f64() * rate < rate
            });
        }
        let bucket = buckets.entry(key.to_owned()).or_insert(Bucket {
            requests: rate,
            at: now,
        });
        bucket.requests =
            (bucket.requests + now.duration_since(bucket.at).as_secs_f64() * rate).min(rate);
        bucket.at = now;
        if bucket.requests < 1.0 {
            return Err(ApiError::RateExceeded {
                per_second: rate as u32,
            });
        }
        bucket.requests -= 1.0;
        Ok(())
    }

    /// Whether requests are let in without a token.
    pub(crate) fn is_insecure(&self) -> bool {
        matches!(self.mode, Mode::InsecureNoAuth)
    }
}

/// What identifies one version of the file: its modification time, size and (on
/// Unix) inode and change time, so a rename into place or a same-size rewrite is seen.
fn stamp(path: &PathBuf) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let identity = {
        use std::os::unix::fs::MetadataExt;
        (meta.ino(), meta.ctime(), meta.ctime_nsec())
    };
    #[cfg(not(unix))]
    let identity = (0, 0, 0);
    Some((meta.modified().ok()?, meta.len(), identity))
}

/// A tokens file's version: modification time, size, and (inode, ctime s, ctime ns).
type Stamp = (SystemTime, u64, (u64, i64, i64));

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(headers: &HeaderMap) -> Result<&str, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(ApiError::Unauthorized(
            "the request has no Authorization: Bearer header",
        ));
    };
    let text = value
        .to_str()
        .map_err(|_| ApiError::Unauthorized("the Authorization header is not text"))?;
    match text.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(token.trim())
        }
        _ => Err(ApiError::Unauthorized(
            "the Authorization header is not Bearer <token>",
        )),
    }
}
