//! A local folder's short reads, made on the thread that asks, and the files kept open
//! for the next one.
//!
//! object_store answers a GET of a local file by opening it (and reading its metadata)
//! on tokio's blocking pool, and hands back the open file, whose bytes
//! `GetResult::bytes` would read on the blocking pool again. For a served point read,
//! each trip is a thread's wake-up around a few kilobytes the page cache holds. So a
//! range of at most [`LOCAL_INLINE_READ_BYTES_MAX`] is read here with one `pread`, and
//! the open file is kept ([`OpenFiles`]): the next short read of the object is one
//! `fstat` and one `pread`, with no trip at all.
//!
//! A kept file is used only while it is still the object at its path: its `fstat` must
//! show it linked, with the device, inode, size and modification time it had when
//! object_store opened it. A file deleted or replaced since, by this process or another,
//! fails that check and the read goes to object_store as before. This process's own
//! deletes, puts, copies and renames drop the kept file of their path at once, so a
//! deleted file's space is not held by this process.

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
    /// A short range of a local file, read: the answer, and the file it was read from.
    Read { answer: GetResult, file: File },
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
        let GetResultPayload::File(file, _) = payload else {
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
        return Ok(Short::Read { answer, file });
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

/// What `fstat` says a file is: a kept file answers only while this is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    device: u64,
    inode: u64,
    size: u64,
    modified_seconds: i64,
    modified_nanos: i64,
}

impl Identity {
    /// The file's identity, or `None` when it has no link left (deleted, or replaced by
    /// a rename over its path) or cannot be read.
    #[cfg(unix)]
    fn of_linked(file: &File) -> Option<Identity> {
        use std::os::unix::fs::MetadataExt;
        let stat = file.metadata().ok()?;
        (stat.nlink() > 0).then(|| Identity {
            device: stat.dev(),
            inode: stat.ino(),
            size: stat.size(),
            modified_seconds: stat.mtime(),
            modified_nanos: stat.mtime_nsec(),
        })
    }

    #[cfg(not(unix))]
    fn of_linked(_file: &File) -> Option<Identity> {
        None
    }
}

/// An open local file kept after a short read of it.
#[derive(Debug)]
struct OpenFile {
    file: File,
    /// What object_store said of the object when it opened the file.
    meta: ObjectMeta,
    attributes: Attributes,
    /// What `fstat` said right after, checked against the metadata.
    identity: Identity,
    /// When it was kept (clock seam).
    kept_at_micros: i64,
}

#[derive(Debug, Default)]
struct Kept {
    by_path: HashMap<Path, Arc<OpenFile>>,
    /// Every kept file, oldest first; a path's entry here may be one `by_path` no longer
    /// holds (dropped or kept again since).
    order: VecDeque<(Path, Arc<OpenFile>)>,
}

impl Kept {
    /// Drops the oldest entry, and its file unless it was kept again since.
    fn drop_oldest(&mut self) {
        let Some((path, file)) = self.order.pop_front() else {
            return;
        };
        if self
            .by_path
            .get(&path)
            .is_some_and(|kept| Arc::ptr_eq(kept, &file))
        {
            self.by_path.remove(&path);
        }
    }
}

/// The local files a root keeps open, at most [`LOCAL_OPEN_FILES_KEPT_MAX`] and each
/// for at most [`LOCAL_OPEN_FILE_AGE_MICROS_MAX`]; the oldest is closed first.
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
        if Identity::of_linked(&open.file) != Some(open.identity) {
            self.forget(location);
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
            self.forget(location);
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
            Short::Read { answer, file } => {
                self.keep(location, file, &answer.meta, &answer.attributes);
                Ok(answer)
            }
            Short::Other(got) => Ok(got),
        }
    }

    /// Closes the kept file of `location`: the object is being deleted or written.
    pub(super) fn forget(&self, location: &Path) {
        self.kept.lock().by_path.remove(location);
    }

    /// The kept file of `location`, when one is kept and young enough.
    fn kept(&self, location: &Path) -> Option<Arc<OpenFile>> {
        let oldest = crate::seams::now_micros().saturating_sub(LOCAL_OPEN_FILE_AGE_MICROS_MAX);
        let mut kept = self.kept.lock();
        // The order is by age: the old ones are at its front.
        while kept
            .order
            .front()
            .is_some_and(|(_, file)| file.kept_at_micros < oldest)
        {
            kept.drop_oldest();
        }
        kept.by_path.get(location).cloned()
    }

    /// Keeps `file`, just read as `location`, when `fstat` agrees with object_store's
    /// metadata of it.
    fn keep(&self, location: &Path, file: File, meta: &ObjectMeta, attributes: &Attributes) {
        let Some(identity) = Identity::of_linked(&file) else {
            return;
        };
        if identity.size != meta.size || meta.location != *location {
            return;
        }
        let open = Arc::new(OpenFile {
            file,
            meta: meta.clone(),
            attributes: attributes.clone(),
            identity,
            kept_at_micros: crate::seams::now_micros(),
        });
        let mut kept = self.kept.lock();
        while kept.order.len() >= LOCAL_OPEN_FILES_KEPT_MAX {
            kept.drop_oldest();
        }
        kept.order.push_back((location.clone(), open.clone()));
        kept.by_path.insert(location.clone(), open);
        assert!(kept.order.len() <= LOCAL_OPEN_FILES_KEPT_MAX);
        assert!(kept.by_path.len() <= kept.order.len());
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
