//! A channel bounded by the bytes it holds as well as by its items.
//!
//! Checked rows wait in one for a streamed append's writer. Lance takes rows in bursts:
//! it buffers each column and then encodes pages for tens of milliseconds without
//! asking for more. A channel of a few batches fills in that time and stops the checks,
//! so the two took turns instead of running side by side. Bounded by bytes, the checks
//! can run that far ahead, and how far is a memory figure whatever the width of a row.

use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc};

/// Makes a channel of at most `items_max` items and `bytes_max` bytes.
pub(crate) fn channel<T>(items_max: usize, bytes_max: usize) -> (Sender<T>, Receiver<T>) {
    assert!(items_max > 0, "a channel holds an item");
    assert!(bytes_max > 0, "a channel holds a byte");
    let bytes_max = u32::try_from(bytes_max)
        .unwrap_or(u32::MAX)
        .min(u32::try_from(Semaphore::MAX_PERMITS).unwrap_or(u32::MAX));
    let room = Arc::new(Semaphore::new(bytes_max as usize));
    let (items, arriving) = mpsc::channel(items_max);
    (
        Sender {
            items,
            room: room.clone(),
            bytes_max,
        },
        Receiver { arriving, room },
    )
}

pub(crate) struct Sender<T> {
    items: mpsc::Sender<(T, u32)>,
    /// Bytes free; a sent item holds its bytes until it is received.
    room: Arc<Semaphore>,
    bytes_max: u32,
}

pub(crate) struct Receiver<T> {
    arriving: mpsc::Receiver<(T, u32)>,
    room: Arc<Semaphore>,
}

impl<T> Sender<T> {
    /// Sends `item` of `bytes` bytes; waits while the channel lacks the room. An item
    /// larger than the whole bound waits for the channel to empty. Gives the item back
    /// when the receiver is gone.
    pub(crate) async fn send(&self, item: T, bytes: usize) -> Result<(), T> {
        let held = u32::try_from(bytes).unwrap_or(u32::MAX).min(self.bytes_max);
        let Ok(permit) = self.room.acquire_many(held).await else {
            // Closed: the receiver is gone.
            return Err(item);
        };
        self.items
            .send((item, held))
            .await
            .map_err(|unsent| unsent.0.0)?;
        // The receiver gives the bytes back; a send that fails or is dropped before
        // this gives them back as its permit drops.
        permit.forget();
        Ok(())
    }
}

impl<T> Drop for Receiver<T> {
    /// A sender waiting for room would wait forever once the receiver is gone (the
    /// bytes of the items dropped with it never come back): closing the room ends its
    /// wait, and the send gives its item back.
    fn drop(&mut self) {
        self.room.close();
    }
}

impl<T> Receiver<T> {
    /// The next item, and its bytes back to the room; `None` once every sender is gone
    /// and the items ended.
    pub(crate) async fn recv(&mut self) -> Option<T> {
        let (item, held) = self.arriving.recv().await?;
        self.room.add_permits(held as usize);
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn a_sender_waits_for_bytes_and_for_items_and_an_item_past_the_bound_for_an_empty_channel()
     {
        let (sender, mut receiver) = channel::<u32>(3, 100);
        sender
            .send(1, 60)
            .now_or_never()
            .expect("room")
            .expect("sent");
        // 60 + 60 is past 100 bytes: the second waits until the first is received.
        let mut second = Box::pin(sender.send(2, 60));
        assert!((&mut second).now_or_never().is_none());
        assert_eq!(receiver.recv().await, Some(1));
        second.now_or_never().expect("room").expect("sent");
        // An item larger than the bound waits for the channel to empty, then goes.
        let mut large = Box::pin(sender.send(3, 1_000));
        assert!((&mut large).now_or_never().is_none());
        assert_eq!(receiver.recv().await, Some(2));
        large.now_or_never().expect("room").expect("sent");
        assert_eq!(receiver.recv().await, Some(3));
        // Small items stop at the item bound.
        for item in 4..7 {
            sender
                .send(item, 1)
                .now_or_never()
                .expect("room")
                .expect("sent");
        }
        assert!(Box::pin(sender.send(7, 1)).now_or_never().is_none());
        for item in 4..7 {
            assert_eq!(receiver.recv().await, Some(item));
        }
        // Every byte came back: the whole bound goes at once again.
        sender
            .send(8, 100)
            .now_or_never()
            .expect("room")
            .expect("sent");
        drop(sender);
        assert_eq!(receiver.recv().await, Some(8));
        assert_eq!(receiver.recv().await, None);
    }

    #[tokio::test]
    async fn an_item_comes_back_when_the_receiver_is_gone() {
        let (sender, receiver) = channel::<&str>(1, 10);
        drop(receiver);
        assert_eq!(sender.send("rows", 5).await, Err("rows"));
    }

    #[tokio::test]
    async fn a_sender_waiting_for_room_gets_its_item_back_when_the_receiver_goes() {
        // A writer that fails with its channel full drops the receiver and the items
        // in it: the checks waiting to send must hear of it, not wait for ever.
        let (sender, receiver) = channel::<&str>(4, 10);
        sender
            .send("first", 10)
            .now_or_never()
            .expect("room")
            .expect("sent");
        let mut waiting = Box::pin(sender.send("second", 10));
        assert!((&mut waiting).now_or_never().is_none());
        drop(receiver);
        assert_eq!(waiting.now_or_never(), Some(Err("second")));
        assert_eq!(sender.send("third", 1).await, Err("third"));
    }
}
