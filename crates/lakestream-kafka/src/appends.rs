//! A connection's appends, partition by partition, in request order and committed in groups.
//!
//! A produce request's record batches are queued per partition when the request is decoded,
//! so in request order. One task per partition with a non-empty queue hands everything queued
//! (up to [`GROUP_BYTES`]) to the writer as one entry (an entry may hold several batches, each
//! with base offset 0), and each request is answered with its batches' first offset within
//! the entry once the append completes. The writer commits a partition's appends in the order
//! they are handed over (`Api::produce_pipelined`), so the task hands the next group over
//! without waiting for this one's PUT: several groups of a partition are in flight at once,
//! as a client pipelining requests needs. An idempotent producer's append completes before it
//! is handed over (the service layer runs them one at a time per producer and partition).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::handlers::Handler;

/// What a queued append gets: its batches' first offset, or a Kafka error code and message.
pub(crate) type AppendResult = Result<i64, (i16, String)>;

/// The most bytes of batches appended as one entry (one request's batches may be more).
const GROUP_BYTES: usize = 1 << 20;

/// One request's batches for one partition.
pub(crate) struct Queued {
    /// The batches, as the request carried them.
    pub records: Option<Bytes>,
    /// Where the outcome goes.
    pub reply: oneshot::Sender<AppendResult>,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Queued>,
    /// Whether a task is appending from this queue.
    draining: bool,
}

/// The queues of one connection.
#[derive(Default)]
pub(crate) struct PartitionQueues {
    queues: HashMap<(String, i32), Arc<Mutex<Queue>>>,
}

fn lock(queue: &Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    // Nothing panics while holding it; a poisoned lock's queue is still consistent.
    queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl PartitionQueues {
    /// Queues `records` for `topic`/`partition`, starting the partition's task if none runs.
    pub(crate) fn enqueue(
        &mut self,
        handler: &Handler,
        topic: &str,
        partition: i32,
        records: Option<Bytes>,
    ) -> oneshot::Receiver<AppendResult> {
        let (reply, outcome) = oneshot::channel();
        let queue = self.queues.entry((topic.to_owned(), partition)).or_default().clone();
        let start = {
            let mut q = lock(&queue);
            q.items.push_back(Queued { records, reply });
            !std::mem::replace(&mut q.draining, true)
        };
        if start {
            tokio::spawn(drain(handler.clone(), topic.to_owned(), partition, queue));
        }
        outcome
    }
}

/// Appends groups from `queue` until it is empty.
async fn drain(handler: Handler, topic: String, partition: i32, queue: Arc<Mutex<Queue>>) {
    loop {
        let group: Vec<Queued> = {
            let mut q = lock(&queue);
            if q.items.is_empty() {
                q.draining = false;
                return;
            }
            let mut group = Vec::new();
            let mut bytes = 0;
            while let Some(next) = q.items.front() {
                let len = next.records.as_ref().map_or(0, Bytes::len);
                if !group.is_empty() && bytes + len > GROUP_BYTES {
                    break;
                }
                bytes += len;
                group.extend(q.items.pop_front());
            }
            group
        };
        handler.append_group(&topic, partition, group).await;
    }
}
