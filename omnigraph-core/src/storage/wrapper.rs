//! The request-counting, fault-injecting object-store wrapper. For a local folder it also
//! hands each write to the store in pieces (see [`LOCAL_WRITE_BYTES_MAX`]), and makes
//! short reads on the thread that asks, from files it keeps open (`local_reads.rs`).
//!
//! It implements Lance's `WrappingObjectStore`, so every request Lance makes for a table
//! in the root passes through it, and the engine's own requests (the commit log) use the
//! same wrapped store. Counting is scoped: a [`RequestProbe`] records the requests made
//! while it lives, so a test asserts exact counts for exactly the calls it makes. Faults
//! are scoped the same way: a [`FaultHandle`] removes its rule when dropped.
//!
//! Paths are matched and recorded relative to the graph root (`_graph/FORMAT`,
//! `tables/<id>/_versions/d….manifest`), whatever the store's own prefix is.
//!
//! One request is saved on every table open: Lance learns a manifest's size with a HEAD
//! and then reads its last block. The wrapper answers such a HEAD with a GET of the
//! manifest's last block instead (one request that returns the size too), and hands
//! that block to the read that follows (see [`ManifestTail`]).

use super::local_reads::{OpenFiles, in_one_chunk, read_short_local_range};
use crate::error::StorageKind;
use crate::limits::{LOCAL_WRITE_BYTES_MAX, MANIFEST_TAIL_AGE_MICROS_MAX, MANIFEST_TAILS_MAX};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use lance::io::WrappingObjectStore;
use object_store::list::PaginatedListStore;
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload,
    PutResult, RenameOptions, UploadPart,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// The kind of an object-store request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// A whole-object GET.
    Get,
    /// A GET of one or more byte ranges.
    RangedGet,
    /// A HEAD (metadata only).
    Head,
    /// A PUT that overwrites, or a multipart upload.
    Put,
    /// A PUT that succeeds only if the object does not exist.
    PutIfAbsent,
    /// A LIST (recursive or one level).
    List,
    /// A DELETE of one object.
    Delete,
    /// A COPY or RENAME.
    CopyOrRename,
}

impl RequestKind {
    /// Every kind, in report order.
    pub const ALL: [RequestKind; 8] = [
        RequestKind::Get,
        RequestKind::RangedGet,
        RequestKind::Head,
        RequestKind::Put,
        RequestKind::PutIfAbsent,
        RequestKind::List,
        RequestKind::Delete,
        RequestKind::CopyOrRename,
    ];
}

/// One request as a probe saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Its kind.
    pub kind: RequestKind,
    /// The path relative to the graph root (a LIST names its prefix).
    pub path: String,
    /// The name of the thread that made the request (`None` for an unnamed thread):
    /// tells which runtime did the work.
    pub thread: Option<String>,
}

/// Request counts by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RequestCounts {
    /// Count per kind; kinds with no requests are absent.
    pub by_kind: BTreeMap<RequestKind, u64>,
}

impl RequestCounts {
    /// The count of one kind.
    pub fn get(&self, kind: RequestKind) -> u64 {
        self.by_kind.get(&kind).copied().unwrap_or(0)
    }

    /// All requests.
    pub fn total(&self) -> u64 {
        self.by_kind.values().sum()
    }
}

impl fmt::Display for RequestCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .by_kind
            .iter()
            .map(|(kind, count)| format!("{kind:?}={count}"))
            .collect();
        write!(f, "total={} [{}]", self.total(), parts.join(", "))
    }
}

#[derive(Debug, Default)]
struct ProbeLog {
    requests: Mutex<Vec<Request>>,
}

/// Records every request through its root's wrapper while it lives.
#[derive(Debug)]
pub struct RequestProbe {
    log: Arc<ProbeLog>,
}

impl RequestProbe {
    /// Counts by kind since the probe started (or was last reset).
    pub fn counts(&self) -> RequestCounts {
        let mut counts = RequestCounts::default();
        for request in self.log.requests.lock().iter() {
            *counts.by_kind.entry(request.kind).or_default() += 1;
        }
        counts
    }

    /// How many requests were recorded (cheaper than [`RequestProbe::counts`]).
    pub fn total(&self) -> u64 {
        self.log.requests.lock().len() as u64
    }

    /// The requests in the order they were made.
    pub fn requests(&self) -> Vec<Request> {
        self.log.requests.lock().clone()
    }

    /// Forgets what was recorded so far.
    pub fn reset(&self) {
        self.log.requests.lock().clear();
    }
}

/// What an injected fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Fail before the request reaches the store, with an error of this kind.
    FailBefore(StorageKind),
    /// Make the request, then report a transient error: the effect happened, the
    /// acknowledgement was lost.
    LostAck,
    /// Make the request, then report `AlreadyExists`: what an S3 client sees when it
    /// retries a conditional PUT whose first attempt landed (the retry gets 412). Meant
    /// for put-if-absent; on other requests it reports the same error.
    DuplicatedAck,
    /// Report a timeout at once and make the request later, after this delay: a PUT
    /// still in flight when the caller gave up on it. Requests other than a
    /// single-request PUT (a multipart upload included) fail before they are made,
    /// like a transient fault.
    AppliedLater(std::time::Duration),
    /// Hold the request for this long, then make it (async requests only; a LIST
    /// stream is not held).
    Delay(std::time::Duration),
}

/// Which requests a fault applies to.
#[derive(Clone, Debug)]
pub struct FaultRule {
    /// A glob over the root-relative path: `*` matches any run of characters, `/`
    /// included.
    pub path_pattern: String,
    /// The kinds it applies to; empty means every kind.
    pub kinds: Vec<RequestKind>,
    /// What it does.
    pub action: FaultAction,
    /// How many matching requests it fires on before it goes quiet; `None` is forever.
    pub times: Option<u64>,
}

impl FaultRule {
    /// A rule for requests of `kinds` under a path glob, firing forever.
    pub fn new(
        path_pattern: impl Into<String>,
        kinds: &[RequestKind],
        action: FaultAction,
    ) -> Self {
        FaultRule {
            path_pattern: path_pattern.into(),
            kinds: kinds.to_vec(),
            action,
            times: None,
        }
    }

    /// Fires on the first `times` matching requests only.
    pub fn times(mut self, times: u64) -> Self {
        self.times = Some(times);
        self
    }
}

#[derive(Debug)]
struct ActiveFault {
    rule: FaultRule,
    fired: AtomicU64,
}

/// An injected fault; dropping it removes the rule.
#[derive(Debug)]
pub struct FaultHandle {
    fault: Arc<ActiveFault>,
    state: Weak<WrapperState>,
}

impl FaultHandle {
    /// How many requests the fault has fired on.
    pub fn fired(&self) -> u64 {
        self.fault.fired.load(Ordering::SeqCst)
    }
}

impl Drop for FaultHandle {
    fn drop(&mut self) {
        if let Some(state) = self.state.upgrade() {
            state
                .faults
                .lock()
                .retain(|fault| !Arc::ptr_eq(fault, &self.fault));
        }
    }
}

#[derive(Debug)]
struct WrapperState {
    /// The root's path inside the store, stripped from every recorded path.
    base: String,
    /// The most bytes the inner store is handed as one piece of a write
    /// ([`LOCAL_WRITE_BYTES_MAX`] for a local folder). Other stores take a payload
    /// whole: S3 sends it as it is, and the memory store would copy a payload of many
    /// pieces into one buffer.
    piece_bytes_max: usize,
    probes: Mutex<Vec<Weak<ProbeLog>>>,
    faults: Mutex<Vec<Arc<ActiveFault>>>,
    /// Manifest tails read in place of a HEAD, newest last, for the read that follows.
    tails: Mutex<VecDeque<ManifestTail>>,
    /// A local folder's files kept open after a short read (`local_reads.rs`).
    open_files: OpenFiles,
}

/// The last block of a table manifest, read in place of the HEAD that asked its size.
///
/// A manifest (`tables/<id>/_versions/<version>.manifest`) is written once, by a
/// put-if-absent, and never changed: bytes read at the HEAD are the bytes the read after
/// it would get. So a read of a range inside the block is answered from it, once, and
/// costs no request. It is as if the read had been made at the time of the HEAD.
#[derive(Debug)]
struct ManifestTail {
    path: Path,
    /// When it was read (clock seam).
    read_at_micros: i64,
    meta: ObjectMeta,
    attributes: Attributes,
    /// The range of the object `bytes` hold.
    range: Range<u64>,
    bytes: Bytes,
}

/// Whether `relative` (a root-relative path) names a table manifest.
fn is_table_manifest(relative: &str) -> bool {
    matches!(
        relative.split('/').collect::<Vec<_>>().as_slice(),
        ["tables", table, "_versions", name]
            if !table.is_empty() && name.len() > ".manifest".len() && name.ends_with(".manifest")
    )
}

/// Whether a GET asks for the object as it is, whatever its version or tag.
fn unconditional(options: &GetOptions) -> bool {
    options.if_match.is_none()
        && options.if_none_match.is_none()
        && options.if_modified_since.is_none()
        && options.if_unmodified_since.is_none()
        && options.version.is_none()
}

impl WrapperState {
    /// Keeps `tail` for the read that follows its HEAD.
    fn keep_tail(&self, tail: ManifestTail) {
        let mut tails = self.tails.lock();
        if tails.len() >= MANIFEST_TAILS_MAX {
            tails.pop_front();
        }
        tails.push_back(tail);
        assert!(tails.len() <= MANIFEST_TAILS_MAX);
    }

    /// The kept tail of `path` that holds `range`, taken out: it answers one read.
    fn take_tail(&self, path: &Path, range: &Range<u64>) -> Option<ManifestTail> {
        let oldest = crate::seams::now_micros().saturating_sub(MANIFEST_TAIL_AGE_MICROS_MAX);
        let mut tails = self.tails.lock();
        tails.retain(|tail| tail.read_at_micros >= oldest);
        let at = tails.iter().position(|tail| {
            tail.path == *path && tail.range.start <= range.start && range.end <= tail.range.end
        })?;
        tails.remove(at)
    }

    /// Forgets the kept tail of `path`: the object is being deleted.
    fn drop_tails(&self, path: &Path) {
        self.tails.lock().retain(|tail| tail.path != *path);
    }

    fn relative(&self, path: &Path) -> String {
        let full = path.as_ref();
        if self.base.is_empty() {
            return full.to_string();
        }
        match full.strip_prefix(self.base.as_str()) {
            Some(rest) => rest.trim_start_matches('/').to_string(),
            None => full.to_string(),
        }
    }

    /// Records the request and returns the fault to apply, if any.
    fn observe(&self, kind: RequestKind, path: &Path) -> Option<FaultAction> {
        let relative = self.relative(path);
        {
            let mut probes = self.probes.lock();
            probes.retain(|probe| probe.strong_count() > 0);
            for probe in probes.iter().filter_map(Weak::upgrade) {
                probe.requests.lock().push(Request {
                    kind,
                    path: relative.clone(),
                    thread: std::thread::current().name().map(str::to_string),
                });
            }
        }
        let faults = self.faults.lock();
        for fault in faults.iter() {
            let rule = &fault.rule;
            let kind_matches = rule.kinds.is_empty() || rule.kinds.contains(&kind);
            if !kind_matches || !glob_matches(&rule.path_pattern, &relative) {
                continue;
            }
            let fired = fault.fired.fetch_add(1, Ordering::SeqCst);
            if rule.times.is_none_or(|times| fired < times) {
                return Some(rule.action);
            }
            fault.fired.fetch_sub(1, Ordering::SeqCst);
        }
        None
    }
}

/// The wrapper a root installs in Lance's store parameters and uses for its own store.
#[derive(Debug, Clone)]
pub(crate) struct StoreWrapper {
    state: Arc<WrapperState>,
}

impl StoreWrapper {
    /// A wrapper for a root whose objects live under `base` inside a store that takes
    /// each write whole (S3, memory); a local folder's root takes
    /// [`StoreWrapper::for_local_folder`].
    pub(crate) fn new(base: &str) -> StoreWrapper {
        StoreWrapper::handing_pieces_of(base, usize::MAX)
    }

    /// A wrapper for a root in a local folder whose path inside the store is `base`:
    /// the store is handed writes in pieces of at most [`LOCAL_WRITE_BYTES_MAX`].
    pub(crate) fn for_local_folder(base: &str) -> StoreWrapper {
        StoreWrapper::handing_pieces_of(base, LOCAL_WRITE_BYTES_MAX)
    }

    fn handing_pieces_of(base: &str, piece_bytes_max: usize) -> StoreWrapper {
        assert!(
            piece_bytes_max > 0,
            "a write is handed over in pieces of some bytes"
        );
        StoreWrapper {
            state: Arc::new(WrapperState {
                base: base.trim_matches('/').to_string(),
                piece_bytes_max,
                probes: Mutex::new(Vec::new()),
                faults: Mutex::new(Vec::new()),
                tails: Mutex::new(VecDeque::new()),
                open_files: OpenFiles::default(),
            }),
        }
    }

    /// Starts recording requests.
    pub(crate) fn probe(&self) -> RequestProbe {
        let log = Arc::new(ProbeLog::default());
        self.state.probes.lock().push(Arc::downgrade(&log));
        RequestProbe { log }
    }

    /// Injects a fault until the handle drops.
    pub(crate) fn inject(&self, rule: FaultRule) -> FaultHandle {
        let fault = Arc::new(ActiveFault {
            rule,
            fired: AtomicU64::new(0),
        });
        self.state.faults.lock().push(fault.clone());
        FaultHandle {
            fault,
            state: Arc::downgrade(&self.state),
        }
    }

    /// Wraps a store directly (for stores Lance did not build).
    pub(crate) fn wrap_store(&self, inner: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        Arc::new(WrappedStore {
            inner,
            state: self.state.clone(),
        })
    }
}

impl WrappingObjectStore for StoreWrapper {
    fn wrap(&self, _store_prefix: &str, original: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        self.wrap_store(original)
    }

    /// No pushdown: a pushed-down listing would walk past the counter and the faults.
    fn wrap_paginated(
        &self,
        _store_prefix: &str,
        _original: Arc<dyn PaginatedListStore>,
    ) -> Option<Arc<dyn PaginatedListStore>> {
        None
    }
}

/// `*` matches any run of characters (including `/`); everything else matches itself.
pub(crate) fn glob_matches(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

fn injected(kind: StorageKind, path: &str) -> object_store::Error {
    let path = path.to_string();
    let source: Box<dyn std::error::Error + Send + Sync> =
        format!("injected fault on {path}").into();
    match kind {
        StorageKind::NotFound => object_store::Error::NotFound { path, source },
        StorageKind::Precondition => object_store::Error::Precondition { path, source },
        StorageKind::Configuration => object_store::Error::PermissionDenied { path, source },
        StorageKind::Permanent => object_store::Error::NotSupported { source },
        StorageKind::Transient => object_store::Error::Generic {
            store: "omnigraph-fault",
            source: Box::new(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                format!("injected transient fault on {path}"),
            )),
        },
        StorageKind::Unknown => object_store::Error::Generic {
            store: "omnigraph-fault",
            source,
        },
    }
}

fn lost_ack(path: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "omnigraph-fault",
        source: Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            format!("injected lost acknowledgement on {path} (the request took effect)"),
        )),
    }
}

/// `payload` as pieces of at most `bytes_max` bytes, sharing its buffers (a store that
/// writes a file writes each piece with one call).
fn in_pieces(payload: PutPayload, bytes_max: usize) -> PutPayload {
    assert!(bytes_max > 0, "pieces hold some bytes");
    if payload.iter().all(|piece| piece.len() <= bytes_max) {
        return payload;
    }
    let length = payload.content_length();
    let pieces: PutPayload = payload
        .iter()
        .flat_map(|chunk| {
            (0..chunk.len())
                .step_by(bytes_max)
                .map(move |at| chunk.slice(at..chunk.len().min(at + bytes_max)))
        })
        .collect();
    assert_eq!(pieces.content_length(), length, "pieces hold the payload");
    pieces
}

/// The error a fault reports instead of making the request (a PUT that lands later is
/// made by the caller of this, which knows how).
fn failure_before(action: Option<FaultAction>, path: &Path) -> Option<object_store::Error> {
    match action? {
        FaultAction::FailBefore(kind) => Some(injected(kind, path.as_ref())),
        FaultAction::AppliedLater(_) => Some(injected(StorageKind::Transient, path.as_ref())),
        FaultAction::LostAck | FaultAction::DuplicatedAck | FaultAction::Delay(_) => None,
    }
}

/// The error a fault reports after the request was made.
fn failure_after(action: Option<FaultAction>, path: &Path) -> Option<object_store::Error> {
    match action? {
        FaultAction::LostAck => Some(lost_ack(path.as_ref())),
        FaultAction::DuplicatedAck => Some(duplicated_ack(path.as_ref())),
        FaultAction::FailBefore(_) | FaultAction::AppliedLater(_) | FaultAction::Delay(_) => None,
    }
}

fn duplicated_ack(path: &str) -> object_store::Error {
    object_store::Error::AlreadyExists {
        path: path.to_string(),
        source: format!("injected duplicated acknowledgement on {path} (the request took effect)")
            .into(),
    }
}

fn timed_out(path: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "omnigraph-fault",
        source: Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("injected timeout on {path} (the request is still in flight)"),
        )),
    }
}

#[derive(Debug)]
struct WrappedStore {
    inner: Arc<dyn ObjectStore>,
    state: Arc<WrapperState>,
}

impl fmt::Display for WrappedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OmniGraphWrapped({})", self.inner)
    }
}

impl WrappedStore {
    /// The HEAD of a table manifest, made as a GET of its last block (one request, kept
    /// for the read that follows: see [`ManifestTail`]). A fault on it is a fault on a
    /// ranged GET.
    async fn head_by_tail(&self, location: &Path) -> object_store::Result<GetResult> {
        let block = super::root::LANCE_BLOCK_BYTES as u64;
        let options = GetOptions {
            range: Some(GetRange::Suffix(block)),
            ..Default::default()
        };
        let (meta, attributes, range, bytes) = self
            .request(RequestKind::RangedGet, location, || async {
                let got = read_short_local_range(self.inner.get_opts(location, options).await?)?;
                let (meta, attributes, range) =
                    (got.meta.clone(), got.attributes.clone(), got.range.clone());
                Ok((meta, attributes, range, got.bytes().await?))
            })
            .await?;
        // What the store returned is checked before it answers anything: the last
        // bytes of the object, as many as the range says.
        // Compared before subtracting: a store's reply is untrusted, and a range that
        // starts past its end would underflow.
        let whole =
            range.start <= range.end && range.end == meta.size && range.end - range.start <= block;
        if !whole || bytes.len() as u64 != range.end - range.start {
            return Err(object_store::Error::Generic {
                store: "omnigraph-wrapper",
                source: format!(
                    "the last block of {location} came back as bytes {range:?} ({} of them) of an object of {} bytes",
                    bytes.len(),
                    meta.size
                )
                .into(),
            });
        }
        let head = GetResult {
            payload: GetResultPayload::Stream(futures::stream::empty().boxed()),
            meta: meta.clone(),
            range: 0..0,
            attributes: attributes.clone(),
            extensions: Default::default(),
        };
        assert!(range.end == meta.size && bytes.len() as u64 == range.end - range.start);
        self.state.keep_tail(ManifestTail {
            path: location.clone(),
            read_at_micros: crate::seams::now_micros(),
            meta,
            attributes,
            range,
            bytes,
        });
        Ok(head)
    }

    /// Makes one request through the faults that apply to it.
    async fn request<T, F, Fut>(
        &self,
        kind: RequestKind,
        path: &Path,
        make: F,
    ) -> object_store::Result<T>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = object_store::Result<T>>,
    {
        Self::apply(self.state.observe(kind, path), path, make).await
    }

    /// Makes a request that `action` (if any) applies to.
    async fn apply<T, F, Fut>(
        action: Option<FaultAction>,
        path: &Path,
        make: F,
    ) -> object_store::Result<T>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = object_store::Result<T>>,
    {
        if let Some(failure) = failure_before(action, path) {
            return Err(failure);
        }
        if let Some(FaultAction::Delay(delay)) = action {
            tokio::time::sleep(delay).await;
        }
        let made = make().await?;
        match failure_after(action, path) {
            Some(failure) => Err(failure),
            None => Ok(made),
        }
    }

    /// A LIST: counted, failed and held like any request (a hold delays its first page).
    fn list_request(
        &self,
        at: &Path,
        make: impl FnOnce() -> BoxStream<'static, object_store::Result<ObjectMeta>>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let action = self.state.observe(RequestKind::List, at);
        if let Some(FaultAction::Delay(delay)) = action {
            let held = futures::stream::once(tokio::time::sleep(delay))
                .filter_map(|()| futures::future::ready(None));
            return held.chain(make()).boxed();
        }
        let Some(failure) = failure_before(action, at).or_else(|| failure_after(action, at)) else {
            return make();
        };
        futures::stream::once(futures::future::ready(Err(failure))).boxed()
    }
}

#[async_trait]
impl ObjectStore for WrappedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let kind = match opts.mode {
            PutMode::Create => RequestKind::PutIfAbsent,
            _ => RequestKind::Put,
        };
        let action = self.state.observe(kind, location);
        let payload = in_pieces(payload, self.state.piece_bytes_max);
        if let Some(FaultAction::AppliedLater(delay)) = action {
            // The write lands after the caller has given up on it (a file it replaces
            // then fails the kept file's check of its path).
            self.state.open_files.forget(location);
            let (inner, later) = (self.inner.clone(), location.clone());
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = inner.put_opts(&later, payload, opts).await;
            });
            return Err(timed_out(location.as_ref()));
        }
        let put = Self::apply(action, location, || {
            self.inner.put_opts(location, payload, opts)
        });
        self.state.open_files.changing(&[location], put).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let action = self.state.observe(RequestKind::Put, location);
        self.state.open_files.forget(location);
        if let Some(failure) = failure_before(action, location) {
            return Err(failure);
        }
        if let Some(FaultAction::Delay(delay)) = action {
            tokio::time::sleep(delay).await;
        }
        let upload = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(WrappedUpload {
            inner: upload,
            action,
            path: location.clone(),
            piece_bytes_max: self.state.piece_bytes_max,
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if unconditional(&options) {
            if options.head && is_table_manifest(&self.state.relative(location)) {
                return self.head_by_tail(location).await;
            }
            if let Some(GetRange::Bounded(range)) = &options.range
                && !options.head
                && let Some(tail) = self.state.take_tail(location, range)
            {
                return Ok(answered_from(tail, range.clone()));
            }
        }
        let kind = if options.head {
            RequestKind::Head
        } else if options.range.is_some() {
            RequestKind::RangedGet
        } else {
            RequestKind::Get
        };
        // A HEAD's answer is its metadata: its file is never read.
        if options.head {
            return self
                .request(kind, location, || self.inner.get_opts(location, options))
                .await;
        }
        // Counted and faulted like any GET, whoever answers it.
        self.request(kind, location, || async {
            let open_files = &self.state.open_files;
            if unconditional(&options)
                && let Some(answer) = open_files.answer(location, &options)
            {
                return Ok(answer);
            }
            let got = self.inner.get_opts(location, options).await?;
            open_files.read_and_keep(location, got)
        })
        .await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.request(RequestKind::RangedGet, location, || {
            self.inner.get_ranges(location, ranges)
        })
        .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let state = self.state.clone();
        let inner = self.inner.clone();
        // One request per path, so faults and counts apply per object.
        locations
            .then(move |location| {
                let store = WrappedStore {
                    inner: inner.clone(),
                    state: state.clone(),
                };
                async move {
                    let location = location?;
                    store.state.drop_tails(&location);
                    let deleted = store.request(RequestKind::Delete, &location, || async {
                        let single =
                            futures::stream::once(futures::future::ready(Ok(location.clone())))
                                .boxed();
                        let mut results = store.inner.delete_stream(single);
                        match results.next().await {
                            Some(result) => result,
                            None => Ok(location.clone()),
                        }
                    });
                    store.state.open_files.changing(&[&location], deleted).await
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let at = prefix.cloned().unwrap_or_default();
        self.list_request(&at, || self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let at = prefix.cloned().unwrap_or_default();
        self.list_request(&at, || self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let at = prefix.cloned().unwrap_or_default();
        self.request(RequestKind::List, &at, || {
            self.inner.list_with_delimiter(prefix)
        })
        .await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        let copied = self.request(RequestKind::CopyOrRename, to, || {
            self.inner.copy_opts(from, to, options)
        });
        self.state.open_files.changing(&[to], copied).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        let renamed = self.request(RequestKind::CopyOrRename, to, || {
            self.inner.rename_opts(from, to, options)
        });
        self.state.open_files.changing(&[from, to], renamed).await
    }
}

/// The read of `range` answered from `tail`, which holds it.
fn answered_from(tail: ManifestTail, range: Range<u64>) -> GetResult {
    assert!(
        tail.range.start <= range.start && range.end <= tail.range.end,
        "a kept tail answers only reads inside it"
    );
    let from = (range.start - tail.range.start) as usize;
    let to = (range.end - tail.range.start) as usize;
    let bytes = tail.bytes.slice(from..to);
    GetResult {
        payload: in_one_chunk(bytes),
        meta: tail.meta,
        range,
        attributes: tail.attributes,
        extensions: Default::default(),
    }
}

/// A multipart upload whose completion can lose its acknowledgement.
#[derive(Debug)]
struct WrappedUpload {
    inner: Box<dyn MultipartUpload>,
    /// The fault that applies to the upload's completion.
    action: Option<FaultAction>,
    path: Path,
    /// See [`WrapperState::piece_bytes_max`].
    piece_bytes_max: usize,
}

#[async_trait]
impl MultipartUpload for WrappedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.inner.put_part(in_pieces(data, self.piece_bytes_max))
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let result = self.inner.complete().await?;
        match failure_after(self.action, &self.path) {
            Some(failure) => Err(failure),
            None => Ok(result),
        }
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{
        LOCAL_INLINE_READ_BYTES_MAX, LOCAL_OPEN_FILE_AGE_MICROS_MAX, LOCAL_OPEN_FILES_KEPT_MAX,
    };

    #[test]
    fn globs() {
        assert!(glob_matches("_graph/FORMAT", "_graph/FORMAT"));
        assert!(glob_matches(
            "tables/*/_versions/d*.manifest",
            "tables/t1/_versions/d123.manifest"
        ));
        assert!(!glob_matches(
            "tables/*/_versions/d*.manifest",
            "tables/t1/_versions/1.manifest"
        ));
        assert!(glob_matches("*", "anything/at/all"));
        assert!(glob_matches(
            "*commits*",
            "_graph/branches/main/commits/00000000000000000001.json"
        ));
        assert!(!glob_matches("_graph/*", "tables/t1"));
    }

    #[test]
    fn docs_cli_states_the_local_write_piece() {
        // The checkout the test runs in, not the one a shared build cache compiled it in.
        let crate_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
        let doc = std::fs::read_to_string(std::path::Path::new(&crate_dir).join("../docs/cli.md"))
            .expect("docs/cli.md");
        let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
        let stated = format!(
            "pieces of at most {} KiB (`LOCAL_WRITE_BYTES_MAX`)",
            LOCAL_WRITE_BYTES_MAX >> 10
        );
        assert!(doc.contains(&stated), "docs/cli.md does not say: {stated}");
    }

    #[test]
    fn a_write_is_handed_over_in_pieces_that_hold_it_all() {
        let bytes: Vec<u8> = (0..5 * LOCAL_WRITE_BYTES_MAX + 7)
            .map(|at| (at % 251) as u8)
            .collect();
        let whole = Bytes::from(bytes.clone());
        // A part as Lance hands it over; one of uneven chunks, one of them empty and one
        // exactly at the bound.
        let cases = [
            (PutPayload::from_bytes(whole.clone()), 6),
            (
                PutPayload::from_iter([
                    whole.slice(..3),
                    whole.slice(3..3),
                    whole.slice(3..3 + LOCAL_WRITE_BYTES_MAX),
                    whole.slice(3 + LOCAL_WRITE_BYTES_MAX..),
                ]),
                7,
            ),
        ];
        for (payload, expected) in cases {
            let pieces = in_pieces(payload, LOCAL_WRITE_BYTES_MAX);
            let lengths: Vec<usize> = pieces.iter().map(Bytes::len).collect();
            assert_eq!(lengths.len(), expected, "{lengths:?}");
            assert!(
                lengths
                    .iter()
                    .all(|length| *length <= LOCAL_WRITE_BYTES_MAX),
                "{lengths:?}"
            );
            assert_eq!(Bytes::from(pieces).as_ref(), bytes.as_slice());
        }
        // A store that takes a payload whole is handed the very buffer it was given.
        let handed = in_pieces(PutPayload::from_bytes(whole.clone()), usize::MAX);
        assert_eq!(handed.as_ref().len(), 1);
        assert_eq!(handed.as_ref()[0].as_ptr(), whole.as_ptr());
    }

    /// A real in-memory store that notes the length of every piece of every write it is
    /// handed, as a local folder's store writes each with one call.
    #[derive(Debug)]
    struct NotingPieces {
        inner: Arc<dyn ObjectStore>,
        pieces: Arc<Mutex<Vec<usize>>>,
    }

    impl fmt::Display for NotingPieces {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "NotingPieces({})", self.inner)
        }
    }

    #[derive(Debug)]
    struct NotingUpload {
        inner: Box<dyn MultipartUpload>,
        pieces: Arc<Mutex<Vec<usize>>>,
    }

    #[async_trait]
    impl MultipartUpload for NotingUpload {
        fn put_part(&mut self, data: PutPayload) -> UploadPart {
            self.pieces.lock().extend(data.iter().map(Bytes::len));
            self.inner.put_part(data)
        }

        async fn complete(&mut self) -> object_store::Result<PutResult> {
            self.inner.complete().await
        }

        async fn abort(&mut self) -> object_store::Result<()> {
            self.inner.abort().await
        }
    }

    #[async_trait]
    impl ObjectStore for NotingPieces {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            opts: PutOptions,
        ) -> object_store::Result<PutResult> {
            self.pieces.lock().extend(payload.iter().map(Bytes::len));
            self.inner.put_opts(location, payload, opts).await
        }

        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            Ok(Box::new(NotingUpload {
                inner: self.inner.put_multipart_opts(location, opts).await?,
                pieces: self.pieces.clone(),
            }))
        }

        async fn get_opts(
            &self,
            location: &Path,
            options: GetOptions,
        ) -> object_store::Result<GetResult> {
            self.inner.get_opts(location, options).await
        }

        fn delete_stream(
            &self,
            locations: BoxStream<'static, object_store::Result<Path>>,
        ) -> BoxStream<'static, object_store::Result<Path>> {
            self.inner.delete_stream(locations)
        }

        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.inner.list(prefix)
        }

        async fn list_with_delimiter(
            &self,
            prefix: Option<&Path>,
        ) -> object_store::Result<ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }

        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    #[tokio::test]
    async fn only_a_local_folders_store_is_handed_writes_in_pieces() {
        let whole = Bytes::from(vec![7u8; 3 * LOCAL_WRITE_BYTES_MAX + 1]);
        let wrappers = [
            (StoreWrapper::for_local_folder(""), 4, LOCAL_WRITE_BYTES_MAX),
            (StoreWrapper::new(""), 1, whole.len()),
        ];
        for (wrapper, pieces_per_write, piece_bytes_max) in wrappers {
            let pieces = Arc::new(Mutex::new(Vec::new()));
            let store = wrapper.wrap_store(Arc::new(NotingPieces {
                inner: Arc::new(object_store::memory::InMemory::new()),
                pieces: pieces.clone(),
            }));
            let (put, uploaded) = (Path::from("put"), Path::from("uploaded"));
            store
                .put_opts(
                    &put,
                    PutPayload::from_bytes(whole.clone()),
                    PutOptions::default(),
                )
                .await
                .unwrap();
            let mut upload = store
                .put_multipart_opts(&uploaded, PutMultipartOptions::default())
                .await
                .unwrap();
            upload
                .put_part(PutPayload::from_bytes(whole.clone()))
                .await
                .unwrap();
            upload.complete().await.unwrap();
            for path in [&put, &uploaded] {
                let read = store.get_opts(path, GetOptions::default()).await.unwrap();
                assert_eq!(read.bytes().await.unwrap(), whole, "{path}");
            }
            let lengths = pieces.lock().clone();
            assert_eq!(lengths.len(), 2 * pieces_per_write, "{lengths:?}");
            assert_eq!(lengths.iter().sum::<usize>(), 2 * whole.len());
            assert!(
                lengths.iter().all(|length| *length <= piece_bytes_max),
                "{lengths:?}"
            );
        }
    }

    /// A wrapped local folder and its wrapper.
    fn local_store(folder: &std::path::Path) -> (StoreWrapper, Arc<dyn ObjectStore>) {
        let wrapper = StoreWrapper::for_local_folder("");
        let store = wrapper.wrap_store(Arc::new(
            object_store::local::LocalFileSystem::new_with_prefix(folder).unwrap(),
        ));
        (wrapper, store)
    }

    /// The bytes of `range` of `path` (the whole object without one).
    async fn read(
        store: &Arc<dyn ObjectStore>,
        path: &Path,
        range: Option<Range<u64>>,
    ) -> object_store::Result<Bytes> {
        let options = GetOptions {
            range: range.map(GetRange::Bounded),
            ..GetOptions::default()
        };
        store.get_opts(path, options).await?.bytes().await
    }

    #[tokio::test]
    async fn a_short_reads_file_answers_the_next_until_it_changes_at_its_path() {
        let folder = tempfile::tempdir().unwrap();
        let on_disk = folder.path().join("data");
        let first: Vec<u8> = (0..1_000u32).map(|at| (at % 251) as u8).collect();
        std::fs::write(&on_disk, &first).unwrap();
        let (wrapper, store) = local_store(folder.path());
        let files = &wrapper.state.open_files;
        let path = Path::from("data");
        let probe = wrapper.probe();

        // The first read opens the file through object_store and keeps it; the next
        // ones are answered from it, whole or in part, and are counted all the same.
        assert_eq!(
            read(&store, &path, Some(0..100)).await.unwrap(),
            first[..100]
        );
        assert_eq!((files.kept_count(), files.answered()), (1, 0));
        assert_eq!(
            read(&store, &path, Some(900..1_000)).await.unwrap(),
            first[900..]
        );
        assert_eq!(read(&store, &path, None).await.unwrap(), first);
        let got = store.get_opts(&path, GetOptions::default()).await.unwrap();
        assert_eq!((got.meta.size, got.range.clone()), (1_000, 0..1_000));
        assert_eq!(files.answered(), 3);
        assert_eq!(probe.counts().get(RequestKind::RangedGet), 2);
        assert_eq!(probe.counts().get(RequestKind::Get), 2);
        // An invalid range is object_store's to refuse, kept file or not.
        assert!(read(&store, &path, Some(1_001..1_002)).await.is_err());
        assert_eq!(files.answered(), 3);
        // A range from the end is answered, with what object_store itself gives.
        let plain = object_store::local::LocalFileSystem::new_with_prefix(folder.path()).unwrap();
        let suffix = GetOptions {
            range: Some(GetRange::Suffix(10)),
            ..GetOptions::default()
        };
        let kept = store.get_opts(&path, suffix.clone()).await.unwrap();
        let direct = plain.get_opts(&path, suffix).await.unwrap();
        assert_eq!(files.answered(), 4);
        assert_eq!((&kept.meta, &kept.range), (&direct.meta, &direct.range));
        assert_eq!(kept.attributes, direct.attributes);
        assert_eq!(kept.bytes().await.unwrap(), direct.bytes().await.unwrap());
        // A conditional read is object_store's to decide.
        let unchanged = GetOptions {
            if_none_match: got.meta.e_tag.clone(),
            ..GetOptions::default()
        };
        let refused = store.get_opts(&path, unchanged).await.unwrap_err();
        assert!(
            matches!(refused, object_store::Error::NotModified { .. }),
            "{refused:?}"
        );
        assert_eq!(files.answered(), 4);

        // Replaced by a rename over its path (as a put does), from outside the store:
        // the read is of the new file.
        let second: Vec<u8> = (0..700u32).map(|at| (at % 13) as u8).collect();
        std::fs::write(folder.path().join("staged"), &second).unwrap();
        std::fs::rename(folder.path().join("staged"), &on_disk).unwrap();
        assert_eq!(
            read(&store, &path, Some(0..100)).await.unwrap(),
            second[..100]
        );
        assert_eq!(files.answered(), 4);
        assert_eq!(read(&store, &path, None).await.unwrap(), second);
        assert_eq!(files.answered(), 5);

        // Changed in place, the same size: its modification time is the metadata's, so
        // the read is object_store's, with the file's new time.
        {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .open(&on_disk)
                .unwrap();
            file.write_all(&[7; 50]).unwrap();
            let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
            file.set_modified(when).unwrap();
        }
        let changed = store.get_opts(&path, GetOptions::default()).await.unwrap();
        assert_eq!(changed.meta.last_modified.timestamp(), 1_000_000_000);
        let changed = changed.bytes().await.unwrap();
        assert_eq!(
            (&changed[..50], &changed[50..]),
            (&[7u8; 50][..], &second[50..])
        );
        assert_eq!(files.answered(), 5);
        // Its mode changed (its change time): read again by object_store too.
        read(&store, &path, None).await.unwrap();
        assert_eq!(files.answered(), 6);
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::Permissions::from_mode(0o600);
            std::fs::set_permissions(&on_disk, mode).unwrap();
        }
        read(&store, &path, None).await.unwrap();
        assert_eq!(files.answered(), 6);
        read(&store, &path, None).await.unwrap();
        assert_eq!(files.answered(), 7);

        // Deleted from outside the store: not found, as without a kept file.
        std::fs::remove_file(&on_disk).unwrap();
        let gone = read(&store, &path, Some(0..10)).await.unwrap_err();
        assert!(
            matches!(gone, object_store::Error::NotFound { .. }),
            "{gone:?}"
        );
        assert_eq!((files.kept_count(), files.answered()), (0, 7));

        // Renamed away, or deleted at its path while another link to it stays: its
        // inode, size and contents are unchanged, and the object is gone all the same.
        let elsewhere = folder.path().join("elsewhere");
        fn rename_away(on_disk: &std::path::Path, elsewhere: &std::path::Path) {
            std::fs::rename(on_disk, elsewhere).unwrap();
        }
        fn unlink_one_of_two(on_disk: &std::path::Path, elsewhere: &std::path::Path) {
            std::fs::hard_link(on_disk, elsewhere).unwrap();
            std::fs::remove_file(on_disk).unwrap();
        }
        let leaving: [fn(&std::path::Path, &std::path::Path); 2] = [rename_away, unlink_one_of_two];
        for leave in leaving {
            std::fs::write(&on_disk, &first).unwrap();
            read(&store, &path, None).await.unwrap();
            assert_eq!(read(&store, &path, None).await.unwrap(), first);
            let answered = files.answered();
            leave(&on_disk, &elsewhere);
            let gone = read(&store, &path, None).await.unwrap_err();
            assert!(
                matches!(gone, object_store::Error::NotFound { .. }),
                "{gone:?}"
            );
            assert_eq!((files.kept_count(), files.answered()), (0, answered));
            std::fs::remove_file(&elsewhere).unwrap();
        }

        // A read longer than the bound is object_store's, kept file or not.
        let long: Vec<u8> = (0..LOCAL_INLINE_READ_BYTES_MAX + 1)
            .map(|at| (at % 7) as u8)
            .collect();
        std::fs::write(&on_disk, &long).unwrap();
        read(&store, &path, Some(0..10)).await.unwrap();
        let answered = files.answered();
        let whole = store.get_opts(&path, GetOptions::default()).await.unwrap();
        assert!(matches!(whole.payload, GetResultPayload::File(..)));
        assert_eq!(whole.bytes().await.unwrap(), long);
        assert_eq!((files.kept_count(), files.answered()), (1, answered));

        // A fault on the read applies to a read a kept file would answer: a failure,
        // and a hold.
        let fault = wrapper.inject(FaultRule::new(
            "data",
            &[RequestKind::RangedGet],
            FaultAction::FailBefore(StorageKind::Transient),
        ));
        assert!(read(&store, &path, Some(0..10)).await.is_err());
        assert_eq!(fault.fired(), 1);
        drop(fault);
        let hold = std::time::Duration::from_millis(50);
        let held = wrapper.inject(FaultRule::new(
            "data",
            &[RequestKind::RangedGet],
            FaultAction::Delay(hold),
        ));
        let started = std::time::Instant::now();
        assert_eq!(read(&store, &path, Some(0..10)).await.unwrap(), long[..10]);
        assert!(started.elapsed() >= hold);
        assert_eq!((held.fired(), files.answered()), (1, answered + 1));
    }

    /// How many of this process's descriptors are open on `path` (deleted or not), a
    /// path without symbolic links.
    #[cfg(target_os = "linux")]
    fn descriptors_on(path: &std::path::Path) -> usize {
        let deleted = format!("{} (deleted)", path.display());
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
            .filter(|target| *target == path || target.as_os_str() == deleted.as_str())
            .count()
    }

    #[tokio::test]
    async fn the_stores_own_writes_and_deletes_close_a_kept_file_and_at_most_so_many_are_kept() {
        use object_store::ObjectStoreExt;
        let folder = tempfile::tempdir().unwrap();
        let (wrapper, store) = local_store(folder.path());
        let files = &wrapper.state.open_files;
        let path = Path::from("data");
        store
            .put(&path, PutPayload::from(vec![1u8; 64]))
            .await
            .unwrap();
        read(&store, &path, None).await.unwrap();
        assert_eq!(files.kept_count(), 1);
        // A put over it closes it, and the read after is of the new bytes.
        store
            .put(&path, PutPayload::from(vec![2u8; 32]))
            .await
            .unwrap();
        assert_eq!(files.kept_count(), 0);
        assert_eq!(read(&store, &path, None).await.unwrap(), vec![2u8; 32]);
        // A delete closes it at once: its space is not held.
        // As /proc shows it: object_store resolves the folder's links.
        let on_disk = std::fs::canonicalize(folder.path()).unwrap().join("data");
        #[cfg(target_os = "linux")]
        assert_eq!(descriptors_on(&on_disk), 1);
        store.delete(&path).await.unwrap();
        assert_eq!(files.kept_count(), 0);
        #[cfg(target_os = "linux")]
        assert_eq!(descriptors_on(&on_disk), 0);
        assert!(matches!(
            read(&store, &path, None).await.unwrap_err(),
            object_store::Error::NotFound { .. }
        ));
        // So does a rename, of either end, and a copy over it.
        let other = Path::from("other");
        store
            .put(&path, PutPayload::from(vec![3u8; 16]))
            .await
            .unwrap();
        store
            .put(&other, PutPayload::from(vec![4u8; 16]))
            .await
            .unwrap();
        read(&store, &path, None).await.unwrap();
        read(&store, &other, None).await.unwrap();
        assert_eq!(files.kept_count(), 2);
        store.copy(&other, &path).await.unwrap();
        assert_eq!(files.kept_count(), 1);
        assert_eq!(read(&store, &path, None).await.unwrap(), vec![4u8; 16]);
        store.rename(&path, &other).await.unwrap();
        assert_eq!(files.kept_count(), 0);

        // The oldest kept file is closed first, past the bound.
        let paths: Vec<Path> = (0..LOCAL_OPEN_FILES_KEPT_MAX + 3)
            .map(|at| Path::from(format!("many/{at}")))
            .collect();
        for (at, path) in paths.iter().enumerate() {
            store
                .put(path, PutPayload::from(vec![at as u8; 8]))
                .await
                .unwrap();
            read(&store, path, None).await.unwrap();
            assert!(files.kept_count() <= LOCAL_OPEN_FILES_KEPT_MAX);
        }
        assert_eq!(files.kept_count(), LOCAL_OPEN_FILES_KEPT_MAX);
        let answered = files.answered();
        read(&store, &paths[paths.len() - 1], None).await.unwrap();
        assert_eq!(files.answered(), answered + 1, "the newest is kept");
        read(&store, &paths[0], None).await.unwrap();
        assert_eq!(files.answered(), answered + 1, "the oldest was closed");
    }

    #[tokio::test]
    async fn a_kept_file_is_closed_at_its_age() {
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(folder.path().join("data"), [5u8; 10]).unwrap();
        let (wrapper, store) = local_store(folder.path());
        let files = &wrapper.state.open_files;
        let path = Path::from("data");
        let simulation = crate::seams::Simulation::new(1, 1_000_000, 0);
        crate::seams::simulate(simulation.clone(), async {
            read(&store, &path, None).await.unwrap();
            simulation.advance(LOCAL_OPEN_FILE_AGE_MICROS_MAX);
            read(&store, &path, None).await.unwrap();
            assert_eq!((files.kept_count(), files.answered()), (1, 1));
            simulation.advance(1);
            // Past its age: closed, then opened and kept again by the read.
            read(&store, &path, None).await.unwrap();
            assert_eq!((files.kept_count(), files.answered()), (1, 1));
            read(&store, &path, None).await.unwrap();
            assert_eq!(files.answered(), 2);
        })
        .await;
    }

    #[tokio::test]
    async fn a_local_files_short_range_is_read_in_place_and_a_long_one_by_object_store() {
        let folder = tempfile::tempdir().unwrap();
        let whole: Vec<u8> = (0..LOCAL_INLINE_READ_BYTES_MAX + 10)
            .map(|at| (at % 251) as u8)
            .collect();
        std::fs::write(folder.path().join("data"), &whole).unwrap();
        let (_, store) = local_store(folder.path());
        let path = Path::from("data");
        let short = 3..3 + LOCAL_INLINE_READ_BYTES_MAX;
        let long = 3..LOCAL_INLINE_READ_BYTES_MAX + 4;
        for (range, in_place) in [(short, true), (long, false), (7..8, true)] {
            let options = GetOptions {
                range: Some(GetRange::Bounded(range.clone())),
                ..GetOptions::default()
            };
            let read = store.get_opts(&path, options).await.unwrap();
            let read_in_place = matches!(read.payload, GetResultPayload::Stream(_));
            assert_eq!(read_in_place, in_place, "{range:?}");
            assert_eq!(read.range, range);
            assert_eq!(read.meta.size, whole.len() as u64);
            let bytes = read.bytes().await.unwrap();
            assert_eq!(bytes, whole[range.start as usize..range.end as usize]);
        }
        // A range given from the end, and a whole small object, are read in place.
        let small = Path::from("small");
        store
            .put_opts(
                &small,
                PutPayload::from(vec![9u8; 100]),
                PutOptions::default(),
            )
            .await
            .unwrap();
        for (at, range, expected) in [
            (
                &path,
                Some(GetRange::Suffix(10)),
                &whole[whole.len() - 10..],
            ),
            (&small, None, &[9u8; 100][..]),
        ] {
            let options = GetOptions {
                range,
                ..GetOptions::default()
            };
            let read = store.get_opts(at, options).await.unwrap();
            assert!(matches!(read.payload, GetResultPayload::Stream(_)), "{at}");
            assert_eq!(read.bytes().await.unwrap(), expected, "{at}");
        }
        // object_store still decides the range: one that runs past the end is cut at
        // the end, and one that starts past it is an error.
        let size = whole.len() as u64;
        let over = GetOptions {
            range: Some(GetRange::Bounded(size - 5..size + 100)),
            ..GetOptions::default()
        };
        let read = store.get_opts(&path, over).await.unwrap();
        assert!(matches!(read.payload, GetResultPayload::Stream(_)));
        assert_eq!(read.bytes().await.unwrap(), whole[whole.len() - 5..]);
        let past = GetOptions {
            range: Some(GetRange::Bounded(size + 1..size + 2)),
            ..GetOptions::default()
        };
        assert!(store.get_opts(&path, past).await.is_err());
        // A HEAD is answered with the file's metadata and never reads it.
        let head = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        let read = store.get_opts(&path, head).await.unwrap();
        assert!(!matches!(read.payload, GetResultPayload::Stream(_)));
        assert_eq!(read.meta.size, size);
    }

    #[tokio::test]
    async fn a_manifest_head_reads_the_last_block_once_for_the_read_after_it() {
        use object_store::ObjectStoreExt;
        let block = crate::storage::root::LANCE_BLOCK_BYTES as u64;
        let wrapper = StoreWrapper::new("");
        let store = wrapper.wrap_store(Arc::new(object_store::memory::InMemory::new()));
        let small = Path::from("tables/t1/_versions/d7.manifest");
        let large = Path::from("tables/t1/_versions/d8.manifest");
        let other = Path::from("tables/t1/data/x.lance");
        let bytes = |len: u64| Bytes::from((0..len).map(|i| (i % 251) as u8).collect::<Vec<_>>());
        for (path, len) in [(&small, 1_000), (&large, 3 * block + 5), (&other, 1_000)] {
            store
                .put(path, PutPayload::from_bytes(bytes(len)))
                .await
                .unwrap();
        }
        let probe = wrapper.probe();
        let kinds = |probe: &RequestProbe| -> Vec<RequestKind> {
            probe
                .requests()
                .iter()
                .map(|request| request.kind)
                .collect()
        };

        // A small manifest: its HEAD is one GET of the whole, and the read of its last
        // block (Lance's next request) is answered without a request, once.
        let meta = store.head(&small).await.unwrap();
        assert_eq!(meta.size, 1_000);
        let read = store.get_range(&small, 0..1_000).await.unwrap();
        assert_eq!(read, bytes(1_000));
        assert_eq!(kinds(&probe), [RequestKind::RangedGet]);
        store.get_range(&small, 0..1_000).await.unwrap();
        assert_eq!(
            kinds(&probe),
            [RequestKind::RangedGet, RequestKind::RangedGet]
        );

        // A large one: the kept block answers a read inside it; one past it goes to the
        // store.
        probe.reset();
        let meta = store.head(&large).await.unwrap();
        assert_eq!(meta.size, 3 * block + 5);
        let last = meta.size - block..meta.size;
        assert_eq!(
            store.get_range(&large, last.clone()).await.unwrap(),
            bytes(meta.size).slice(last.start as usize..last.end as usize)
        );
        assert_eq!(kinds(&probe), [RequestKind::RangedGet]);
        store.head(&large).await.unwrap();
        let before = 0..meta.size - block + 1;
        assert_eq!(
            store.get_range(&large, before.clone()).await.unwrap(),
            bytes(meta.size).slice(before.start as usize..before.end as usize)
        );
        assert_eq!(kinds(&probe), [RequestKind::RangedGet; 3]);

        // Any other object's HEAD stays a HEAD, and a missing manifest is not found.
        probe.reset();
        assert_eq!(store.head(&other).await.unwrap().size, 1_000);
        assert_eq!(kinds(&probe), [RequestKind::Head]);
        let missing = store
            .head(&Path::from("tables/t1/_versions/d9.manifest"))
            .await;
        assert!(matches!(missing, Err(object_store::Error::NotFound { .. })));
    }

    #[tokio::test]
    async fn the_kept_manifest_blocks_are_bounded() {
        use object_store::ObjectStoreExt;
        let wrapper = StoreWrapper::new("");
        let store = wrapper.wrap_store(Arc::new(object_store::memory::InMemory::new()));
        let paths: Vec<Path> = (0..MANIFEST_TAILS_MAX + 1)
            .map(|i| Path::from(format!("tables/t1/_versions/d{i}.manifest")))
            .collect();
        for path in &paths {
            store
                .put(path, PutPayload::from_static(b"manifest"))
                .await
                .unwrap();
            store.head(path).await.unwrap();
        }
        assert_eq!(wrapper.state.tails.lock().len(), MANIFEST_TAILS_MAX);
        let probe = wrapper.probe();
        // The oldest block was dropped: its read goes to the store; the newest is kept.
        store.get_range(&paths[0], 0..8).await.unwrap();
        store
            .get_range(&paths[MANIFEST_TAILS_MAX], 0..8)
            .await
            .unwrap();
        assert_eq!(probe.total(), 1);
        assert_eq!(probe.requests()[0].path, paths[0].to_string());
    }

    #[tokio::test]
    async fn a_kept_manifest_block_never_answers_for_a_deleted_object() {
        use object_store::ObjectStoreExt;
        let wrapper = StoreWrapper::new("");
        let store = wrapper.wrap_store(Arc::new(object_store::memory::InMemory::new()));
        let path = Path::from("tables/t1/_versions/d1.manifest");
        store
            .put(&path, PutPayload::from_static(b"manifest"))
            .await
            .unwrap();
        // Deleted through the wrapper after its HEAD: the read finds it gone.
        store.head(&path).await.unwrap();
        store.delete(&path).await.unwrap();
        let gone = store.get_range(&path, 0..8).await;
        assert!(
            matches!(gone, Err(object_store::Error::NotFound { .. })),
            "{gone:?}"
        );
        // Deleted by another process, unseen: a block kept longer than Lance waits
        // between its HEAD and its read answers nothing.
        store
            .put(&path, PutPayload::from_static(b"manifest"))
            .await
            .unwrap();
        store.head(&path).await.unwrap();
        let kept = wrapper.state.tails.lock()[0].read_at_micros;
        wrapper.state.tails.lock()[0].read_at_micros =
            kept - crate::limits::MANIFEST_TAIL_AGE_MICROS_MAX - 1;
        let probe = wrapper.probe();
        store.get_range(&path, 0..8).await.unwrap();
        assert_eq!(probe.total(), 1, "the read went to the store");
        assert!(wrapper.state.tails.lock().is_empty());
    }

    #[test]
    fn only_table_manifests_are_read_in_place_of_a_head() {
        assert!(is_table_manifest("tables/t1/_versions/d123.manifest"));
        assert!(is_table_manifest(
            "tables/t1/_versions/18446744073709551614.manifest"
        ));
        for path in [
            "tables/t1/_versions/.manifest",
            "tables//_versions/d1.manifest",
            "tables/t1/_versions/d1.manifest/x",
            "tables/t1/_latest.manifest",
            "tables/t1/data/d1.manifest",
            "_graph/branches/main/HEAD",
        ] {
            assert!(!is_table_manifest(path), "{path}");
        }
    }
}
