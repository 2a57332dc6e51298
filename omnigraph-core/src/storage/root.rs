//! A graph's storage root: where its objects live, the wrapped store the engine and Lance
//! share, and the Lance session every table in the root is opened with.

use super::options::StorageOptions;
use super::wrapper::{FaultHandle, FaultRule, RequestProbe, StoreWrapper};
use crate::error::{InputLocation, OmniError, Result, StorageKind};
use crate::limits::{INDEX_CACHE_BYTES_MAX, METADATA_CACHE_BYTES_MAX, ROOT_URI_LEN_MAX};
use bytes::Bytes;
use futures::TryStreamExt;
use lance::io::{ObjectStore as LanceStore, ObjectStoreParams};
use lance::session::Session;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use std::sync::Arc;

/// The block Lance reads a file's tail in, on every store: the size it uses for S3
/// (see [`StorageRoot::open`] for what else it sets).
pub(crate) const LANCE_BLOCK_BYTES: usize = 64 << 10;
/// What [`StorageRoot::check_put_if_absent`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutIfAbsentCheck {
    /// The second conditional PUT of one object was refused: commits are safe.
    Atomic,
    /// The credentials may not write, so nothing was checked (and nothing can commit).
    ReadOnly,
}

/// Where the put-if-absent check writes its scratch objects.
const PROBE_FOLDER: &str = "_graph/probe";

/// The roots this process has checked for atomic put-if-absent.
static PROBED_ROOTS: std::sync::LazyLock<parking_lot::Mutex<std::collections::BTreeSet<String>>> =
    std::sync::LazyLock::new(Default::default);

/// Where a root's objects live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootLocation {
    /// A local folder (absolute path).
    Local(std::path::PathBuf),
    /// Process-shared memory under a name (`memory://name/optional/prefix`).
    Memory {
        /// The shared store's name.
        name: String,
        /// A prefix inside it.
        prefix: String,
    },
    /// An S3-compatible bucket (`s3://bucket/prefix`), with the `s3` feature.
    S3 {
        /// The bucket.
        bucket: String,
        /// A prefix inside it.
        prefix: String,
    },
}

impl RootLocation {
    /// Parses a root URI: a local path, `file://…`, `memory://…` or `s3://…`.
    pub fn parse(uri: &str) -> Result<RootLocation> {
        let bad = |message: String| {
            OmniError::bad_input(InputLocation::in_source("root URI").field(uri), message)
        };
        if uri.is_empty() {
            return Err(bad("the root URI is empty".into()));
        }
        if uri.len() > ROOT_URI_LEN_MAX {
            return Err(bad(format!(
                "the root URI is longer than {ROOT_URI_LEN_MAX} bytes"
            )));
        }
        if let Some(rest) = uri.strip_prefix("memory://") {
            let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let name = if name.is_empty() { "default" } else { name };
            if !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(bad(format!(
                    "memory root name {name:?} must be ASCII letters, digits, '-' or '_'"
                )));
            }
            return Ok(RootLocation::Memory {
                name: name.to_string(),
                prefix: clean_prefix(prefix).map_err(bad)?,
            });
        }
        if let Some(rest) = uri.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad("an s3:// root needs a bucket".into()));
            }
            return Ok(RootLocation::S3 {
                bucket: bucket.to_string(),
                prefix: clean_prefix(prefix).map_err(bad)?,
            });
        }
        let local = if let Some(rest) = uri.strip_prefix("file://") {
            std::path::PathBuf::from(rest)
        } else if uri.contains("://") {
            return Err(bad(format!(
                "unsupported root URI scheme in {uri:?}: use a local path, file://, memory:// or s3://"
            )));
        } else {
            std::path::PathBuf::from(uri)
        };
        let absolute = std::path::absolute(&local)
            .map_err(|error| bad(format!("cannot make {uri:?} absolute: {error}")))?;
        // Resolve symlinks where the folder exists, so two spellings of one folder share
        // one branch gate.
        let canonical = std::fs::canonicalize(&absolute).unwrap_or(absolute);
        Ok(RootLocation::Local(canonical))
    }

    /// The URI Lance opens for the root (every request routed through wrappers: plain
    /// `file://` would bypass them).
    fn lance_base(&self) -> String {
        match self {
            RootLocation::Local(path) => format!("file-object-store://{}", path.display())
                .trim_end_matches('/')
                .to_string(),
            RootLocation::Memory { name, prefix } => {
                join_uri(&format!("shared-memory://{name}"), prefix)
            }
            RootLocation::S3 { bucket, prefix } => join_uri(&format!("s3://{bucket}"), prefix),
        }
    }

    /// The canonical identity of the root, the key of per-root registries.
    pub fn canonical(&self) -> String {
        match self {
            RootLocation::Local(path) => format!("file://{}", path.display()),
            RootLocation::Memory { name, prefix } => join_uri(&format!("memory://{name}"), prefix),
            RootLocation::S3 { bucket, prefix } => join_uri(&format!("s3://{bucket}"), prefix),
        }
    }
}

fn clean_prefix(prefix: &str) -> std::result::Result<String, String> {
    let trimmed = prefix.trim_matches('/');
    for part in trimmed.split('/').filter(|part| !part.is_empty()) {
        if part == "." || part == ".." {
            return Err(format!(
                "the root prefix {prefix:?} has a '.' or '..' segment"
            ));
        }
    }
    Ok(trimmed.to_string())
}

fn join_uri(base: &str, prefix: &str) -> String {
    if prefix.is_empty() {
        base.to_string()
    } else {
        format!("{base}/{prefix}")
    }
}

/// What a put-if-absent found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// The object was created.
    Created,
    /// An object was already there; nothing was written.
    AlreadyExists,
}

/// One listed object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Root-relative path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Last modified, in microseconds since the epoch on the engine's clock
    /// (`crate::seams::stored_time_micros`).
    pub modified_micros: i64,
}

/// An open storage root.
#[derive(Debug)]
pub struct StorageRoot {
    location: RootLocation,
    lance_base: String,
    wrapper: StoreWrapper,
    params: ObjectStoreParams,
    session: Arc<Session>,
    store: Arc<LanceStore>,
    base_path: Path,
}

impl StorageRoot {
    /// Opens the root at `uri`, its store configured by the environment alone. See
    /// [`StorageRoot::open_with`].
    pub async fn open(uri: &str) -> Result<Arc<StorageRoot>> {
        StorageRoot::open_with(uri, &StorageOptions::new()).await
    }

    /// Opens the root at `uri` with `options` for its store (S3 settings; a folder or
    /// memory root takes none). Nothing of the graph is read or written: a root that
    /// holds no graph opens fine, and the graph layer decides what that means. An S3
    /// root is first checked, once per process, to refuse a second conditional PUT of
    /// one object: without atomic put-if-absent the commit log is unsafe.
    pub async fn open_with(uri: &str, options: &StorageOptions) -> Result<Arc<StorageRoot>> {
        let location = RootLocation::parse(uri)?;
        let registry = Arc::new(lance::io::ObjectStoreRegistry::default());
        let configuration = |message: String| {
            OmniError::storage(
                StorageKind::Configuration,
                format!("open {uri}"),
                message.into(),
            )
        };
        match &location {
            #[cfg(feature = "s3")]
            RootLocation::S3 { .. } => {
                super::s3::check_options(options)?;
                registry.insert("s3", Arc::new(super::s3::S3Provider::new(options.clone())));
            }
            #[cfg(not(feature = "s3"))]
            RootLocation::S3 { .. } => {
                return Err(configuration(
                    "this build has no S3 support: build omnigraph-core with its `s3` feature (on by default)".into(),
                ));
            }
            RootLocation::Local(_) | RootLocation::Memory { .. } if !options.is_empty() => {
                return Err(configuration(
                    "storage options apply to s3:// roots only".into(),
                ));
            }
            RootLocation::Local(_) | RootLocation::Memory { .. } => {}
        }
        let lance_base = location.lance_base();
        let session = Arc::new(Session::new(
            INDEX_CACHE_BYTES_MAX,
            METADATA_CACHE_BYTES_MAX,
            registry,
        ));
        // The wrapper strips the root's own path so patterns and probes see
        // root-relative paths; learn that path from Lance's parse of the URI first.
        let base_path = LanceStore::extract_path_from_uri(session.store_registry(), &lance_base)
            .map_err(|error| OmniError::from_lance(format!("parse root {uri}"), error))?;
        let wrapper = match location {
            RootLocation::Local(_) => StoreWrapper::for_local_folder(base_path.as_ref()),
            RootLocation::Memory { .. } | RootLocation::S3 { .. } => {
                StoreWrapper::new(base_path.as_ref())
            }
        };
        let params = ObjectStoreParams {
            object_store_wrapper: Some(Arc::new(wrapper.clone())),
            // Lance reads a manifest's last block first, 4 KiB on a local folder by
            // default: a manifest of a few hundred fragments (tens of KiB) then took a
            // HEAD and three ranged GETs, one per section. With S3's 64 KiB it takes
            // one read of its last block (the wrapper makes the HEAD that read: see
            // `wrapper::ManifestTail`), and a data file under 64 KiB is read in one GET. Local
            // and memory roots now read as S3 roots always did, which also sets the
            // scans' default batch (a quarter of the block in rows: 16,384) and the
            // gap Lance's scheduler merges reads across.
            block_size: Some(LANCE_BLOCK_BYTES),
            ..Default::default()
        };
        let (store, _) =
            LanceStore::from_uri_and_params(session.store_registry(), &lance_base, &params)
                .await
                .map_err(|error| OmniError::from_lance(format!("open root {uri}"), error))?;
        let root = Arc::new(StorageRoot {
            location,
            lance_base,
            wrapper,
            params,
            session,
            store,
            base_path,
        });
        // Checked once per process for each root and its options (the endpoint is one).
        let checked_as = format!("{} {options:?}", root.canonical());
        if let RootLocation::S3 { .. } = root.location
            && !PROBED_ROOTS.lock().contains(&checked_as)
            && root.check_put_if_absent().await? == PutIfAbsentCheck::Atomic
        {
            PROBED_ROOTS.lock().insert(checked_as);
        }
        Ok(root)
    }

    /// Checks that the store makes put-if-absent atomic: a conditional PUT of a scratch
    /// object, then the same PUT again, which must be refused. The scratch object is
    /// deleted after. A store that cannot is a configuration error naming the problem;
    /// the engine never falls back to an unconditional commit. Credentials that may not
    /// write cannot commit either, so for them the check is skipped.
    pub async fn check_put_if_absent(&self) -> Result<PutIfAbsentCheck> {
        use object_store::Error as E;
        let id = crate::seams::new_id();
        let scratch = format!("{PROBE_FOLDER}/{id}");
        let refuse = |message: String| {
            OmniError::storage(
                StorageKind::Configuration,
                format!("check put-if-absent on {}", self.canonical()),
                format!(
                    "{message}: without atomic put-if-absent the commit log is unsafe, so this root is refused"
                )
                .into(),
            )
        };
        let failed = |error: object_store::Error| match error {
            E::NotImplemented { .. } | E::NotSupported { .. } => refuse(format!(
                "the store does not support conditional PUT ({error})"
            )),
            other => OmniError::from_object_store(format!("put-if-absent {scratch}"), other),
        };
        let conditional = |bytes: Bytes| {
            let options = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            let path = self.path(&scratch);
            async move {
                self.inner()
                    .put_opts(&path, PutPayload::from_bytes(bytes), options)
                    .await
            }
        };
        let token = Bytes::from(id.clone());
        let first_landed = match conditional(token.clone()).await {
            Ok(_) => true,
            // A client retry of a PUT that landed is refused; the object is then ours.
            Err(E::AlreadyExists { .. }) => {
                self.get(&scratch).await?.as_deref() == Some(&token[..])
            }
            Err(E::PermissionDenied { .. } | E::Unauthenticated { .. }) => {
                return Ok(PutIfAbsentCheck::ReadOnly);
            }
            Err(error) => return Err(failed(error)),
        };
        if !first_landed {
            return Err(refuse(
                "a conditional PUT of a new scratch object was refused as if it existed".into(),
            ));
        }
        let second = conditional(Bytes::from_static(b"second")).await;
        let _ = self.delete(&scratch).await;
        match second {
            Err(E::AlreadyExists { .. }) => Ok(PutIfAbsentCheck::Atomic),
            Ok(_) => Err(refuse(
                "the store accepted a second conditional PUT of the same object".into(),
            )),
            Err(error) => Err(failed(error)),
        }
    }

    /// Where the root lives.
    pub fn location(&self) -> &RootLocation {
        &self.location
    }

    /// The canonical identity of the root (`file:///abs`, `memory://name`, `s3://b/p`).
    pub fn canonical(&self) -> String {
        self.location.canonical()
    }

    /// The URI Lance opens for an object under the root, e.g. `tables/<id>`.
    pub(crate) fn lance_uri(&self, relative: &str) -> String {
        join_uri(&self.lance_base, relative.trim_matches('/'))
    }

    /// The URI a plain Lance reader (pylance, `lance` in Rust) opens for an object
    /// under the root: a local path for a folder, `s3://…` for a bucket. A
    /// `memory://` root lives only in this process.
    pub fn reader_uri(&self, relative: &str) -> String {
        let relative = relative.trim_matches('/');
        match &self.location {
            RootLocation::Local(path) => path.join(relative).display().to_string(),
            RootLocation::Memory { .. } | RootLocation::S3 { .. } => {
                join_uri(&self.location.canonical(), relative)
            }
        }
    }

    /// The store parameters every Lance call in this root uses (they carry the wrapper).
    pub(crate) fn store_params(&self) -> &ObjectStoreParams {
        &self.params
    }

    /// The Lance session shared by every table in this root.
    pub fn session(&self) -> Arc<Session> {
        self.session.clone()
    }

    /// Starts recording requests made in this root (by the engine and by Lance).
    pub fn probe(&self) -> RequestProbe {
        self.wrapper.probe()
    }

    /// Injects a fault into this root's requests until the handle drops.
    pub fn inject(&self, rule: FaultRule) -> FaultHandle {
        self.wrapper.inject(rule)
    }

    fn path(&self, relative: &str) -> Path {
        let mut path = self.base_path.clone();
        for part in relative.split('/').filter(|part| !part.is_empty()) {
            path = path.join(part);
        }
        path
    }

    fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.store.inner
    }

    /// Reads an object; `None` when it does not exist.
    pub async fn get(&self, relative: &str) -> Result<Option<Bytes>> {
        match self.inner().get(&self.path(relative)).await {
            Ok(result) => {
                result.bytes().await.map(Some).map_err(|error| {
                    OmniError::from_object_store(format!("read {relative}"), error)
                })
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(error) => Err(OmniError::from_object_store(
                format!("get {relative}"),
                error,
            )),
        }
    }

    /// Reads an object of at most `max_bytes`; `None` when it does not exist. A larger
    /// object is refused as corrupt from the size its GET reports, before its body is
    /// read into memory (but for a local file of at most `LOCAL_INLINE_READ_BYTES_MAX`,
    /// which the store's wrapper has read with the GET).
    pub async fn get_capped(&self, relative: &str, max_bytes: usize) -> Result<Option<Bytes>> {
        let too_large = |size: u64| {
            OmniError::corrupt(
                relative,
                format!("the object is {size} bytes; the limit is {max_bytes}"),
            )
        };
        let result = match self.inner().get(&self.path(relative)).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(error) => {
                return Err(OmniError::from_object_store(
                    format!("get {relative}"),
                    error,
                ));
            }
        };
        if result.meta.size > max_bytes as u64 {
            return Err(too_large(result.meta.size));
        }
        let bytes = result
            .bytes()
            .await
            .map_err(|error| OmniError::from_object_store(format!("read {relative}"), error))?;
        if bytes.len() > max_bytes {
            return Err(too_large(bytes.len() as u64));
        }
        Ok(Some(bytes))
    }

    /// Writes an object only if none exists at the path: the engine's CAS.
    pub async fn put_if_absent(&self, relative: &str, bytes: Bytes) -> Result<PutOutcome> {
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .inner()
            .put_opts(&self.path(relative), PutPayload::from_bytes(bytes), options)
            .await
        {
            Ok(_) => Ok(PutOutcome::Created),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(PutOutcome::AlreadyExists),
            Err(error) => Err(OmniError::from_object_store(
                format!("put-if-absent {relative}"),
                error,
            )),
        }
    }

    /// Writes (overwrites) an object.
    pub async fn put(&self, relative: &str, bytes: Bytes) -> Result<()> {
        self.inner()
            .put(&self.path(relative), PutPayload::from_bytes(bytes))
            .await
            .map(|_| ())
            .map_err(|error| OmniError::from_object_store(format!("put {relative}"), error))
    }

    /// The symbolic links at or under `relative` on a local root, as root-relative
    /// paths (none on `memory://` and S3 roots, which have no links): what repair
    /// reports, and what listing and deleting refuse.
    pub async fn symlinks_under(&self, relative: &str) -> Result<Vec<String>> {
        self.local_links(relative, super::local_links::links_at_or_under)
            .await
    }

    /// Refuses a listing of `prefix` that would follow a symbolic link (on a local
    /// root): nothing under a root is followed out of it.
    async fn refuse_links_under(&self, prefix: &str) -> Result<()> {
        let links = self.symlinks_under(prefix).await?;
        refuse_links(links)
    }

    /// Refuses a request to `relative` through a symbolic link (on a local root).
    async fn refuse_links_on_the_way(&self, relative: &str) -> Result<()> {
        let links = self
            .local_links(relative, super::local_links::links_on_the_way)
            .await?;
        refuse_links(links)
    }

    /// Runs a link check of a local root off the runtime's threads (inline in a
    /// deterministic simulation); nothing to check elsewhere.
    async fn local_links(
        &self,
        relative: &str,
        check: fn(&std::path::Path, &str) -> std::io::Result<Vec<String>>,
    ) -> Result<Vec<String>> {
        let RootLocation::Local(folder) = &self.location else {
            return Ok(Vec::new());
        };
        let (folder, owned) = (folder.clone(), relative.to_string());
        let checked = if crate::seams::in_simulation() {
            check(&folder, &owned)
        } else {
            tokio::task::spawn_blocking(move || check(&folder, &owned))
                .await
                .map_err(|error| OmniError::internal(format!("a link check stopped: {error}")))?
        };
        checked.map_err(|error| {
            OmniError::storage(
                StorageKind::Unknown,
                format!("check {relative} for symbolic links"),
                error.into(),
            )
        })
    }

    /// Lists the objects under a prefix (recursively), as root-relative paths, sorted.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        self.refuse_links_under(prefix).await?;
        let listed: Vec<String> = self
            .inner()
            .list(Some(&self.path(prefix)))
            .map_ok(|meta| meta.location.as_ref().to_string())
            .try_collect()
            .await
            .map_err(|error| OmniError::from_object_store(format!("list {prefix}"), error))?;
        let mut names = listed
            .iter()
            .map(|full| relative_of(self.base_path.as_ref(), prefix, full))
            .collect::<Result<Vec<String>>>()?;
        names.sort();
        Ok(names)
    }

    /// Lists the objects under a prefix (recursively) with their size and age, as
    /// root-relative paths, sorted.
    pub async fn list_with_meta(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        self.refuse_links_under(prefix).await?;
        let listed: Vec<object_store::ObjectMeta> = self
            .inner()
            .list(Some(&self.path(prefix)))
            .try_collect()
            .await
            .map_err(|error| OmniError::from_object_store(format!("list {prefix}"), error))?;
        let mut objects = listed
            .iter()
            .map(|meta| {
                Ok(ObjectInfo {
                    path: relative_of(self.base_path.as_ref(), prefix, meta.location.as_ref())?,
                    size: meta.size,
                    modified_micros: crate::seams::stored_time_micros(
                        meta.last_modified.timestamp_micros(),
                    ),
                })
            })
            .collect::<Result<Vec<ObjectInfo>>>()?;
        objects.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(objects)
    }

    /// The names of the folders directly under a prefix (one LIST with a delimiter),
    /// sorted.
    pub async fn list_folders(&self, prefix: &str) -> Result<Vec<String>> {
        // A linked folder among the names is refused when it is listed itself.
        self.refuse_links_on_the_way(prefix).await?;
        let listed = self
            .inner()
            .list_with_delimiter(Some(&self.path(prefix)))
            .await
            .map_err(|error| OmniError::from_object_store(format!("list {prefix}/"), error))?;
        let mut names = listed
            .common_prefixes
            .iter()
            .map(|folder| {
                // A folder directly under the prefix: its name, one segment.
                let relative = relative_of(self.base_path.as_ref(), prefix, folder.as_ref())?;
                let name = relative
                    .strip_prefix(prefix.trim_matches('/'))
                    .map(|rest| rest.trim_start_matches('/'))
                    .filter(|name| !name.is_empty() && !name.contains('/'))
                    .ok_or_else(|| {
                        OmniError::corrupt(
                            prefix,
                            format!("the store listed the folder {relative:?}, not one directly under {prefix:?}"),
                        )
                    })?;
                Ok(name.to_string())
            })
            .collect::<Result<Vec<String>>>()?;
        names.sort();
        Ok(names)
    }

    /// Deletes an object; deleting a missing object is not an error.
    pub async fn delete(&self, relative: &str) -> Result<()> {
        self.refuse_links_on_the_way(relative).await?;
        // Called as a function: `.delete(` reads as a Lance write to the guard.
        match ObjectStoreExt::delete(self.inner().as_ref(), &self.path(relative)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(error) => Err(OmniError::from_object_store(
                format!("delete {relative}"),
                error,
            )),
        }
    }
}

/// A symbolic link under a root, as the typed error that refuses to follow it.
fn refuse_links(links: Vec<String>) -> Result<()> {
    match links.first() {
        None => Ok(()),
        Some(link) => Err(OmniError::corrupt(
            link.clone(),
            format!(
                "a symbolic link under the root ({} in all): nothing under a root is followed out of it; replace it with the folder or file it names",
                links.len()
            ),
        )),
    }
}

/// The root-relative path of an object a LIST under `prefix` returned, for a root at
/// `base` (an object-store path: no leading slash, `""` for a bucket or memory root). A
/// location outside the prefix (a store that answered for another one) is refused,
/// never passed on as a path to read or delete.
fn relative_of(base: &str, prefix: &str, full: &str) -> Result<String> {
    let relative = if base.is_empty() {
        Some(full)
    } else {
        full.strip_prefix(base)
            .and_then(|rest| rest.strip_prefix('/'))
    };
    let prefix = prefix.trim_matches('/');
    match relative {
        Some(relative)
            if prefix.is_empty()
                || relative == prefix
                || relative
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with('/')) =>
        {
            Ok(relative.to_string())
        }
        _ => Err(OmniError::corrupt(
            prefix,
            format!("the store listed {full:?}, which is not under {prefix:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::relative_of;

    #[test]
    fn a_listed_location_is_relative_to_the_root_and_under_its_prefix() {
        // A root in a folder, and a bucket or memory root (base "").
        assert_eq!(
            relative_of("data/g", "tables/t1", "data/g/tables/t1/a.lance").unwrap(),
            "tables/t1/a.lance"
        );
        assert_eq!(
            relative_of("", "tables/t1/", "tables/t1/a.lance").unwrap(),
            "tables/t1/a.lance"
        );
        assert_eq!(relative_of("", "", "any/path").unwrap(), "any/path");
        assert_eq!(
            relative_of("data/g", "tables/t1", "data/g/tables/t1").unwrap(),
            "tables/t1"
        );
        // A sibling whose name merely starts like the prefix, another root, a root whose
        // name starts like this one's, another folder: refused.
        for (base, prefix, full) in [
            ("data/g", "tables/t1", "data/g/tables/t10/a.lance"),
            ("data/g", "tables/t1", "data/other/tables/t1/a.lance"),
            ("data/g", "tables/t1", "data/gg/tables/t1/a.lance"),
            ("", "tables/t1", "_graph/x"),
        ] {
            let error = relative_of(base, prefix, full).unwrap_err();
            assert_eq!(error.kind(), crate::ErrorKind::Corrupt, "{full}");
        }
    }
}
