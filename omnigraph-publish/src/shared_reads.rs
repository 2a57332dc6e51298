//! Reads of a branch head shared by the callers that ask at once.
//!
//! A read that started after a caller asked saw every commit that landed before the
//! caller asked, so its head answers that caller exactly as a read of its own would. A
//! read already in flight when the caller asked may have missed such a commit, and never
//! answers it. One read runs at a time: a caller that finds one in flight waits for it to
//! end, then takes the next read's head, or makes that read. Every waiter is woken at
//! once when a read ends (a broadcast, not a lock handed from one waiter to the next).
//!
//! So under load a head costs a few reads rather than one per caller (on S3, a round
//! trip of three GETs each: `docs/format.md` §6.1). The price is the wait: a caller that
//! asks just after a read began waits for it, then for the next, about two reads' time
//! where a read of its own takes one. A caller waits on at most [`HEAD_READ_WAITS_MAX`]
//! reads, then reads alone, so a read whose caller goes away (its future dropped, as a
//! query past its time limit is) delays its waiters by one read at most. A failed read
//! is not shared: each caller it would have answered reads alone, at once, as it would
//! have without sharing.

use crate::commit::GraphCommit;
use crate::limits::HEAD_READ_WAITS_MAX;
use omnigraph_core::Result;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::sync::watch;

/// What the newest read that ended found: its number among the reads started, and its
/// head (`None` when it failed).
#[derive(Clone, Debug, Default)]
struct Ended {
    number: u64,
    head: Option<GraphCommit>,
}

/// The shared reads of one writer's branch head.
#[derive(Debug)]
pub(crate) struct SharedReads {
    /// How many reads have started: a caller that read `n` here is answered only by a
    /// read numbered above `n`.
    started: AtomicU64,
    /// Whether a read is in flight.
    reading: AtomicBool,
    /// The last read that ended, sent to every waiter.
    ended: watch::Sender<Ended>,
}

impl Default for SharedReads {
    fn default() -> Self {
        SharedReads {
            started: AtomicU64::new(0),
            reading: AtomicBool::new(false),
            ended: watch::Sender::new(Ended::default()),
        }
    }
}

/// The read in flight: when dropped it ends with what it found, or with no answer when
/// its caller went away before it did, so waiters never wait on it past its end.
struct InFlight<'a> {
    reads: &'a SharedReads,
    found: Option<Ended>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.reads.finish(self.found.take());
    }
}

impl SharedReads {
    /// The branch head: from a read that starts after this call, made by `read` when
    /// this caller is the one to make it.
    pub(crate) async fn head<F, R>(&self, read: F) -> Result<GraphCommit>
    where
        F: Fn() -> R,
        R: Future<Output = Result<GraphCommit>>,
    {
        let asked = self.started.load(Ordering::SeqCst);
        let mut ended = self.ended.subscribe();
        for _ in 0..=HEAD_READ_WAITS_MAX {
            let answer = {
                let last = ended.borrow_and_update();
                (last.number > asked).then(|| last.head.clone())
            };
            match answer {
                Some(Some(head)) => return Ok(head),
                Some(None) => return read().await,
                None => {}
            }
            if self
                .reading
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                let number = self.started.fetch_add(1, Ordering::SeqCst) + 1;
                let mut in_flight = InFlight {
                    reads: self,
                    found: None,
                };
                let head = read().await;
                in_flight.found = Some(Ended {
                    number,
                    head: head.as_ref().ok().cloned(),
                });
                drop(in_flight);
                return head;
            }
            // The sender lives in `self`, which outlives this call.
            let _ = ended.changed().await;
        }
        read().await
    }

    /// Ends the read in flight with what it found (`None`: dropped, no answer) and
    /// wakes every waiter. The flag is cleared first, so a woken waiter finds either no
    /// read in flight or one that will wake it again.
    fn finish(&self, ended: Option<Ended>) {
        assert!(
            self.reading.swap(false, Ordering::SeqCst),
            "only the read in flight ends"
        );
        self.ended.send_modify(|last| {
            if let Some(ended) = ended {
                // One read at a time, each numbered as it starts: the one ending is the
                // newest.
                assert!(
                    ended.number > last.number,
                    "reads end in the order they start"
                );
                *last = ended;
            }
        });
    }
}
