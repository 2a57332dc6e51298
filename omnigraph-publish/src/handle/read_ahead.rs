//! Input read on a thread of its own, a bounded number of items ahead of its consumer:
//! decoding a file (Parquet, CSV, splitting JSONL into lines) then runs beside the checks
//! of what came before, on a core the checks leave free.

use omnigraph_core::{OmniError, Result};

/// Items a reader produces ahead of its consumer.
pub(crate) const READ_AHEAD_ITEMS_MAX: usize = 2;

/// The items of an iterator, produced on a thread of their own at most
/// [`READ_AHEAD_ITEMS_MAX`] ahead. Dropped early (a load that failed), the thread stops
/// at its next item and is joined. A deterministic simulation reads on the caller's
/// thread instead, so its schedule stays its own.
pub(crate) enum ReadAhead<T: Send + 'static> {
    Threaded {
        items: Option<std::sync::mpsc::Receiver<T>>,
        reader: Option<std::thread::JoinHandle<()>>,
    },
    Inline(Box<dyn Iterator<Item = T> + Send>),
}

impl<T: Send + 'static> ReadAhead<T> {
    pub(crate) fn start(items: Box<dyn Iterator<Item = T> + Send>) -> Result<ReadAhead<T>> {
        if omnigraph_core::seams::in_simulation() {
            return Ok(ReadAhead::Inline(items));
        }
        let (sender, receiver) = std::sync::mpsc::sync_channel(READ_AHEAD_ITEMS_MAX);
        let reader = std::thread::Builder::new()
            .name("omnigraph-read".into())
            .spawn(move || {
                for item in items {
                    // A receiver gone is a consumer that stopped: so does its reader.
                    if sender.send(item).is_err() {
                        return;
                    }
                }
            })
            .map_err(|error| {
                OmniError::internal(format!("cannot start a reader thread: {error}"))
            })?;
        Ok(ReadAhead::Threaded {
            items: Some(receiver),
            reader: Some(reader),
        })
    }
}

impl<T: Send + 'static> Iterator for ReadAhead<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        let (items, reader) = match self {
            ReadAhead::Inline(items) => return items.next(),
            ReadAhead::Threaded { items, reader } => (items, reader),
        };
        // The consumer waits as it would wait on the file itself; a closed channel is the
        // end of the input.
        match items.as_ref()?.recv() {
            Ok(item) => Some(item),
            Err(std::sync::mpsc::RecvError) => match reader.take()?.join() {
                Ok(()) => None,
                // A reader's panic is a defect, not bad input: it goes on as a panic.
                Err(panic) => std::panic::resume_unwind(panic),
            },
        }
    }
}

impl<T: Send + 'static> Drop for ReadAhead<T> {
    fn drop(&mut self) {
        if let ReadAhead::Threaded { items, reader } = self {
            // Closing the channel first stops a reader blocked on a full one.
            drop(items.take());
            if let Some(reader) = reader.take() {
                // Its panic, if any, already failed the consumer or came after its end.
                let _ = reader.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn items_read_ahead_come_in_order_and_end_with_the_input() {
        let read: Vec<u32> = ReadAhead::start(Box::new(0..1_000u32))
            .expect("start")
            .collect();
        assert_eq!(read, (0..1_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_read_ahead_dropped_early_stops_its_reader_within_its_bound() {
        let produced = Arc::new(AtomicU64::new(0));
        let counted = produced.clone();
        // An input without end: only the bound and the drop stop its reader.
        let endless = Box::new((0u64..).map(move |value| {
            counted.fetch_add(1, Ordering::SeqCst);
            value
        }));
        let mut read = ReadAhead::start(endless).expect("start");
        assert_eq!(read.next(), Some(0));
        // Dropping joins the reader: this returns only once it stopped, and the input
        // (holding the other count) is gone with it.
        drop(read);
        assert_eq!(Arc::strong_count(&produced), 1, "the reader ended");
        let produced = produced.load(Ordering::SeqCst);
        // One taken, the channel's bound queued, one held by a blocked send, and one
        // made before the send that found the channel closed.
        assert!(
            produced <= 1 + READ_AHEAD_ITEMS_MAX as u64 + 2,
            "{produced} items made"
        );
    }

    #[test]
    #[should_panic(expected = "a reader's defect")]
    fn a_readers_panic_reaches_its_consumer_as_a_panic() {
        let failing = Box::new((0..3u32).map(|value| {
            assert!(value < 2, "a reader's defect");
            value
        }));
        let _: Vec<u32> = ReadAhead::start(failing).expect("start").collect();
    }
}
