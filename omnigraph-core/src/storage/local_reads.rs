//! A local folder's short reads, made on the thread that asks, and the files kept open
//! for the next one.
//!
//! object_store answers a GET of a local file by opening it (and reading its metadata)
//! on tokio's blocking pool, and hands back the open file, whose bytes
//! `GetResult::bytes` would read on the blocking pool again. For a served point read,
//! each trip is a thread's wake-up around a few kilobytes the page cache holds. So a
//! range of at most [`LOCAL_INLINE_READ_BYTES_MAX`] is read here with one `pread`, and
//! the open file is kept ([`OpenFiles`]): the next short read of the object is one
//! `stat` and one `pread`, with no trip at all.
//!
//! A kept file is used only while it is still the object at its path: a `stat` of the
//! path must show the device, inode, size, modification and change times it showed when
//! the file was kept. A file deleted, replaced, renamed away or changed since, by this
//! process or another, fails that check and the read goes to object_store as before.
//! This process's own deletes, puts, copies and renames close the kept file of their
//! path, before and after the request, so a file this process deletes is not held open
//! past the reads in flight.

use crate::limits::{
    LOCAL_INLINE_READ_BYTES_MAX, LOCAL_OPEN_FILE_AGE_MICROS_MAX, LOCAL_OPEN_FILES_KEPT_MAX,
};
use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{Attributes, GetOptions, GetResult, GetResultPayload, ObjectMeta};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

/// Bytes already in memory, as the answer to a GET.
pub(super) fn in_one_chunk(bytes: Bytes) -> GetResultPayload {
    GetResultPayload::Stream(futures::stream::once(async move { Ok(bytes) }).boxed())
}

/// A local file's range of at most [`LOCAL_INLINE_READ_BYTES_MAX`], read now, on this
/// thread. Any other answer is handed on as it came. An error keeps the `io::Error` as
/// its source, which the engine classifies by its kind.
pub(super) fn read_short_local_range(got: GetResult) -> object_store::Result<GetResult> {
    match read_short(got)? {
        Short::Read { answer, .. } => Ok(answer),
        Short::Other(got) => Ok(got),
    }
}

/// What [`read_short`] made of a GET's answer.
enum Short {
    /// A short range of a local file, read: the answer, and the file it was read from
    /// with its path.
    Read {
        answer: GetResult,
        file: File,
        on_disk: PathBuf,
    },
    /// Any other answer, as it came.
    Other(GetResult),
}

fn read_short(got: GetResult) -> object_store::Result<Short> {
    #[cfg(unix)]
    if matches!(got.payload, GetResultPayload::File(..))
        && let Some(length) = got.range.end.checked_sub(got.range.start)
        && length <= LOCAL_INLINE_READ_BYTES_MAX
    {
        let GetResult {
            payload,
            meta,
            range,
            attributes,
            extensions,
        } = got;
        let GetResultPayload::File(file, on_disk) = payload else {
            unreachable!("matched as a file above");
        };
        let bytes = pread(&file, range.start, length)?;
        let answer = GetResult {
            payload: in_one_chunk(bytes),
            meta,
            range,
            attributes,
            extensions,
        };
        return Ok(Short::Read {
            answer,
            file,
            on_disk,
        });
    }
    Ok(Short::Other(got))
}

/// `length` bytes of `file` from `start`: all of them or an error.
#[cfg(unix)]
fn pread(file: &File, start: u64, length: u64) -> object_store::Result<Bytes> {
    use std::os::unix::fs::FileExt;
    assert!(length <= LOCAL_INLINE_READ_BYTES_MAX);
    let length =
        usize::try_from(length).expect("a range within LOCAL_INLINE_READ_BYTES_MAX fits in memory");
    let mut buffer = vec![0; length];
    file.read_exact_at(&mut buffer, start)
        .map_err(|source| object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(source),
        })?;
    Ok(Bytes::from(buffer))
}

/// Never called: without `pread` no file is read in place or kept.
#[cfg(not(unix))]
fn pread(_file: &File, _start: u64, _length: u64) -> object_store::Result<Bytes> {
    Err(object_store::Error::Generic {
        store: "LocalFileSystem",
        source: "a read in place needs a positioned read".into(),
    })
}

/// What `stat` says of a file: a kept file answers only while its path still shows it
/// so. A rename over the path or a delete (a new inode or none), a write in place (size,
/// modification time), a rename away, a new link or a change of mode (change time) each
/// change it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    device: u64,
    inode: u64,
    size: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl Identity {
    /// The identity of the file at `path` now, or `None` when there is none.
    #[cfg(unix)]
    fn at(path: &std::path::Path) -> Option<Identity> {
        std::fs::metadata(path).ok().map(|stat| Identity::of(&stat))
    }

    /// The identity of an open file.
    #[cfg(unix)]
    fn of_open(file: &File) -> Option<Identity> {
        file.metadata().ok().map(|stat| Identity::of(&stat))
    }

    #[cfg(unix)]
    fn of(stat: &std::fs::Metadata) -> Identity {
        use std::os::unix::fs::MetadataExt;
        Identity {
            device: stat.dev(),
            inode: stat.ino(),
            size: stat.size(),
            modified: (stat.mtime(), stat.mtime_nsec()),
            changed: (stat.ctime(), stat.ctime_nsec()),
        }
    }

    #[cfg(not(unix))]
    fn at(_path: &std::path::Path) -> Option<Identity> {
        None
    }

    #[cfg(not(unix))]
    fn of_open(_file: &File) -> Option<Identity> {
        None
    }

    /// Whether object_store's metadata of the object describes this file: its size and
    /// modification time (the ETag is made of the inode, the time and the size).
    fn described_by(&self, meta: &ObjectMeta) -> bool {
        let modified = meta.last_modified;
        self.size == meta.size
            && self.modified
                == (
                    modified.timestamp(),
                    i64::from(modified.timestamp_subsec_nanos()),
                )
    }
}

/// An open local file kept after a short read of it.
#[derive(Debug)]
struct OpenFile {
    /// The object.
    location: Path,
    /// The file's path, as object_store mapped the object to it.
    on_disk: PathBuf,
    file: File,
    /// What object_store said of the object when it opened the file.
    meta: ObjectMeta,
    attributes: Attributes,
    /// What `stat` said of the path right after, the same as of the open file.
    identity: Identity,
    /// When it was kept (clock seam).
    kept_at_micros: i64,
}

/// The kept files: `order` holds each of `by_path`'s, oldest first.
#[derive(Debug, Default)]
struct Kept {
    by_path: HashMap<Path, Arc<OpenFile>>,
    order: VecDeque<Arc<OpenFile>>,
}

impl Kept {
    /// Takes out the kept file of `location`, if it is `only` (or any, without one).
    fn take(&mut self, location: &Path, only: Option<&Arc<OpenFile>>) -> Option<Arc<OpenFile>> {
        let kept = self.by_path.get(location)?;
        if only.is_some_and(|only| !Arc::ptr_eq(only, kept)) {
            return None;
        }
        let kept = self.by_path.remove(location)?;
        self.order.retain(|open| !Arc::ptr_eq(open, &kept));
        self.check();
        Some(kept)
    }

    /// Takes out the oldest kept file. Each call shortens the order by one, so a loop
    /// of them ends.
    fn pop_oldest(&mut self) -> Option<Arc<OpenFile>> {
        let oldest = self.order.pop_front()?;
        if self
            .by_path
            .get(&oldest.location)
            .is_some_and(|open| Arc::ptr_eq(open, &oldest))
        {
            self.by_path.remove(&oldest.location);
        }
        Some(oldest)
    }

    fn check(&self) {
        assert!(self.order.len() <= LOCAL_OPEN_FILES_KEPT_MAX);
        assert_eq!(self.order.len(), self.by_path.len());
        debug_assert!(self.order.iter().all(|open| {
            self.by_path
                .get(&open.location)
                .is_some_and(|kept| Arc::ptr_eq(kept, open))
        }));
    }
}

/// The local files a root keeps open, at most [`LOCAL_OPEN_FILES_KEPT_MAX`] and each
/// for at most [`LOCAL_OPEN_FILE_AGE_MICROS_MAX`]; the oldest is closed first. A file is
/// closed after the lock is let go: closing the last descriptor of a large deleted file
/// frees its blocks, which can take a while.
#[derive(Debug, Default)]
pub(super) struct OpenFiles {
    kept: Mutex<Kept>,
    /// Reads answered from a kept file (for tests).
    #[cfg(test)]
    answered: std::sync::atomic::AtomicU64,
}

impl OpenFiles {
    /// The answer to an unconditional GET (not a HEAD) of `location` from its kept
    /// file, when one is kept, is still the object at its path, and the range is valid
    /// and short. `None` when the read is for object_store to make.
    pub(super) fn answer(&self, location: &Path, options: &GetOptions) -> Option<GetResult> {
        assert!(!options.head, "a HEAD reads no file");
        let open = self.kept(location)?;
        if Identity::at(&open.on_disk) != Some(open.identity) {
            // Deleted, replaced or changed: object_store finds what is there now.
            self.forget_this(&open);
            return None;
        }
        let range = match &options.range {
            None => 0..open.meta.size,
            // An invalid range is object_store's to refuse, with its own error.
            Some(range) => range.as_range(open.meta.size).ok()?,
        };
        let length = range.end.checked_sub(range.start)?;
        if length > LOCAL_INLINE_READ_BYTES_MAX {
            return None;
        }
        let Ok(bytes) = pread(&open.file, range.start, length) else {
            // object_store opens the file again and reports what it finds.
            self.forget_this(&open);
            return None;
        };
        assert_eq!(bytes.len() as u64, length);
        #[cfg(test)]
        self.answered
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(GetResult {
            payload: in_one_chunk(bytes),
            meta: open.meta.clone(),
            range,
            attributes: open.attributes.clone(),
            extensions: Default::default(),
        })
    }

    /// [`read_short_local_range`], keeping the file of a short read for the next.
    pub(super) fn read_and_keep(
        &self,
        location: &Path,
        got: GetResult,
    ) -> object_store::Result<GetResult> {
        match read_short(got)? {
            Short::Read {
                answer,
                file,
                on_disk,
            } => {
                self.keep(location, on_disk, file, &answer.meta, &answer.attributes);
                Ok(answer)
            }
            Short::Other(got) => Ok(got),
        }
    }

    /// Makes `change` (a write, copy, rename or delete of `locations`), closing their
    /// kept files before it and after it: a read while it ran may have kept the file
    /// it replaced or deleted.
    pub(super) async fn changing<T>(
        &self,
        locations: &[&Path],
        change: impl std::future::Future<Output = T>,
    ) -> T {
        for location in locations {
            self.forget(location);
        }
        let changed = change.await;
        for location in locations {
            self.forget(location);
        }
        changed
    }

    /// Closes the kept file of `location`: the object is being deleted or written, or
    /// was.
    pub(super) fn forget(&self, location: &Path) {
        let closed = self.kept.lock().take(location, None);
        drop(closed);
    }

    /// Closes `open`, unless its object has been kept again since.
    fn forget_this(&self, open: &Arc<OpenFile>) {
        let closed = self.kept.lock().take(&open.location, Some(open));
        drop(closed);
    }

    /// The kept file of `location`, when one is kept and young enough; the ones past
    /// their age are closed.
    fn kept(&self, location: &Path) -> Option<Arc<OpenFile>> {
        let now = crate::seams::now_micros();
        let oldest = now.saturating_sub(LOCAL_OPEN_FILE_AGE_MICROS_MAX);
        let mut closed = Vec::new();
        let found =
            {
                let mut kept = self.kept.lock();
                // The order is by age: the old ones are at its front. One kept after now
                // (the clock stepped back) is as old as can be: it would hold the sweep.
                while kept.order.front().is_some_and(|front| {
                    front.kept_at_micros < oldest || front.kept_at_micros > now
                }) && let Some(front) = kept.pop_oldest()
                {
                    closed.push(front);
                }
                kept.check();
                kept.by_path.get(location).cloned()
            };
        drop(closed);
        found
    }

    /// Keeps `file`, just read as `location` from `on_disk`, when the path still shows
    /// it and object_store's metadata describes it.
    fn keep(
        &self,
        location: &Path,
        on_disk: PathBuf,
        file: File,
        meta: &ObjectMeta,
        attributes: &Attributes,
    ) {
        let Some(identity) = Identity::of_open(&file) else {
            return;
        };
        if !identity.described_by(meta) || meta.location != *location {
            return;
        }
        let open = Arc::new(OpenFile {
            location: location.clone(),
            on_disk,
            file,
            meta: meta.clone(),
            attributes: attributes.clone(),
            identity,
            kept_at_micros: crate::seams::now_micros(),
        });
        let mut closed = Vec::new();
        {
            let mut kept = self.kept.lock();
            // The path is checked under the lock: a delete or write of this process
            // forgets the path under it too, so it comes wholly before (and the file
            // is not kept) or wholly after (and closes it).
            if Identity::at(&open.on_disk) == Some(identity) {
                closed.extend(kept.take(location, None));
                while kept.order.len() >= LOCAL_OPEN_FILES_KEPT_MAX
                    && let Some(oldest) = kept.pop_oldest()
                {
                    closed.push(oldest);
                }
                kept.order.push_back(open.clone());
                kept.by_path.insert(location.clone(), open);
                kept.check();
            } else {
                closed.push(open);
            }
        }
        drop(closed);
    }

    /// How many files are kept open (for tests).
    #[cfg(test)]
    pub(super) fn kept_count(&self) -> usize {
        self.kept.lock().by_path.len()
    }

    /// How many reads a kept file answered (for tests).
    #[cfg(test)]
    pub(super) fn answered(&self) -> u64 {
        self.answered.load(std::sync::atomic::Ordering::SeqCst)
    }
}
