//! Input read on a thread of its own, a bounded number of items ahead of its consumer:
//! decoding a file (Parquet, CSV, splitting JSONL into lines) then runs beside the checks
//! of what came before, on a core the checks leave free.

use crate::limits::READ_AHEAD_ITEMS_MAX;
use omnigraph_core::{OmniError, Result};

/// Opens an input file off the runtime's threads (a FIFO's open waits for its writer);
/// in a deterministic simulation, on the caller's thread, as its schedule needs.
pub(crate) async fn open_input(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    if omnigraph_core::seams::in_simulation() {
        return std::fs::File::open(path);
    }
    Ok(tokio::fs::File::open(path).await?.into_std().await)
}

/// What tells one regular file from another, or from itself after a change: read again
/// only when this is unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileIdentity {
    len: u64,
    modified: Option<std::time::SystemTime>,
    #[cfg(unix)]
    device_and_inode: (u64, u64),
}

impl FileIdentity {
    /// The identity of the file `meta` describes.
    pub(crate) fn of(meta: &std::fs::Metadata) -> FileIdentity {
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt;
        FileIdentity {
            len: meta.len(),
            modified: meta.modified().ok(),
            #[cfg(unix)]
            device_and_inode: (meta.dev(), meta.ino()),
        }
    }
}

/// The items of an iterator, produced on a thread of their own at most
/// [`READ_AHEAD_ITEMS_MAX`] ahead and awaited by the consumer, so a runtime thread never
/// waits on the input. Dropped early (a load that failed), the channel closes and the
/// reader ends at its next item on its own: it is not waited for, since a read from a
/// stalled pipe may not return. A deterministic simulation reads on the caller's thread
/// instead, so its schedule stays its own.
pub(crate) enum ReadAhead<T: Send + 'static> {
    Threaded {
        items: tokio::sync::mpsc::Receiver<T>,
        reader: Option<std::thread::JoinHandle<()>>,
    },
    Inline(Box<dyn Iterator<Item = T> + Send>),
}

impl<T: Send + 'static> ReadAhead<T> {
    pub(crate) fn start(items: Box<dyn Iterator<Item = T> + Send>) -> Result<ReadAhead<T>> {
        if omnigraph_core::seams::in_simulation() {
            return Ok(ReadAhead::Inline(items));
        }
        let (sender, receiver) = tokio::sync::mpsc::channel(READ_AHEAD_ITEMS_MAX);
        let reader = std::thread::Builder::new()
            .name("omnigraph-read".into())
            .spawn(move || {
                for item in items {
                    // A receiver gone is a consumer that stopped: so does its reader.
                    if sender.blocking_send(item).is_err() {
                        return;
                    }
                }
            })
            .map_err(|error| {
                OmniError::internal(format!("cannot start a reader thread: {error}"))
            })?;
        Ok(ReadAhead::Threaded {
            items: receiver,
            reader: Some(reader),
        })
    }

    /// Items already in memory (a call's own batches): nothing to read ahead.
    pub(crate) fn inline(items: Box<dyn Iterator<Item = T> + Send>) -> ReadAhead<T> {
        ReadAhead::Inline(items)
    }

    /// The next item; `None` at the end of the input.
    pub(crate) async fn next(&mut self) -> Option<T> {
        let (items, reader) = match self {
            ReadAhead::Inline(items) => return items.next(),
            ReadAhead::Threaded { items, reader } => (items, reader),
        };
        match items.recv().await {
            Some(item) => Some(item),
            // The channel closes when the reader's thread returns (or unwinds): joining
            // it then does not wait.
            None => match reader.take()?.join() {
                Ok(()) => None,
                // A reader's panic is a defect, not bad input: it goes on as a panic.
                Err(panic) => std::panic::resume_unwind(panic),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    async fn all<T: Send + 'static>(mut read: ReadAhead<T>) -> Vec<T> {
        let mut items = Vec::new();
        while let Some(item) = read.next().await {
            items.push(item);
        }
        items
    }

    #[tokio::test]
    async fn items_read_ahead_come_in_order_and_end_with_the_input() {
        let read = ReadAhead::start(Box::new(0..1_000u32)).expect("start");
        assert!(
            matches!(read, ReadAhead::Threaded { .. }),
            "read on a thread"
        );
        assert_eq!(all(read).await, (0..1_000).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_read_ahead_dropped_early_stops_its_reader_within_its_bound() {
        let produced = Arc::new(AtomicU64::new(0));
        let counted = produced.clone();
        // An input without end: only the bound and the drop stop its reader.
        let endless = Box::new((0u64..).inspect(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        }));
        let mut read = ReadAhead::start(endless).expect("start");
        assert_eq!(read.next().await, Some(0));
        drop(read);
        // The reader ends at its next send, and the input (holding the other count) with
        // it; it is not waited for, so this waits for it, within a bound.
        for _ in 0..1_000 {
            if Arc::strong_count(&produced) == 1 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(Arc::strong_count(&produced), 1, "the reader ended");
        let produced = produced.load(Ordering::SeqCst);
        // One taken, the channel's bound queued, and one made before the send that found
        // the channel closed.
        assert!(
            produced <= 1 + READ_AHEAD_ITEMS_MAX as u64 + 1,
            "{produced} items made"
        );
    }

    #[tokio::test]
    async fn dropping_a_read_ahead_does_not_wait_for_a_stalled_read() {
        // A read that returns only when told, as from a pipe whose writer stalled.
        let (release, stalled) = std::sync::mpsc::channel::<()>();
        let input = Box::new((0..2u32).inspect(move |value| {
            if *value == 1 {
                let _ = stalled.recv();
            }
        }));
        let mut read = ReadAhead::start(input).expect("start");
        assert_eq!(read.next().await, Some(0));
        // The reader now waits inside its second read; dropping returns regardless.
        drop(read);
        // Let the stalled read return: the reader then finds the channel closed and ends.
        release.send(()).expect("the reader still waits");
    }

    #[tokio::test]
    #[should_panic(expected = "a reader's defect")]
    async fn a_readers_panic_reaches_its_consumer_as_a_panic() {
        let failing = Box::new((0..3u32).inspect(|value| {
            assert!(*value < 2, "a reader's defect");
        }));
        all(ReadAhead::start(failing).expect("start")).await;
    }
}
