//! Waiting at the tail of a log, without polling each log many times a second.
//!
//! A read that finds nothing at its offset waits on the log's [`TailWatch`]: the log's next
//! offset as last seen. One poller per log and process keeps it fresh while any read waits,
//! however many reads wait on the log: it asks the metadata store for the log's end
//! (`Floor(K(L, MAX, MAX))`, one read) and backs off exponentially while nothing changes,
//! from 1 ms up to `tail_poll_max`, and back to 1 ms once something did. The interval lives
//! with the log, not with the read, so clients that long-poll in a loop (a Kafka fetch every
//! `max_wait`) do not restart the backoff on every call. Appends made through this process
//! ([`crate::Reader::notify_appended_to`]) wake the log's reads at once, with no metadata read;
//! appends made elsewhere are seen within `tail_poll_max`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lakestream_format::{LogId, Offset};
use tokio::sync::watch;
use tokio::time::Instant;

use super::Reader;

/// The shortest poll interval: right after the log changed.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// Watches kept for logs nobody waits on, before idle ones are dropped.
const KEPT_WATCHES: usize = 4096;

/// The waits of one reader, per log.
#[derive(Debug, Default)]
pub(super) struct Tails {
    logs: Mutex<HashMap<LogId, Arc<TailWatch>>>,
}

/// One log's end as last seen, and its poller's state.
#[derive(Debug)]
struct TailWatch {
    /// The log's next offset as last seen; only grows.
    next: watch::Sender<Offset>,
    state: Mutex<PollState>,
}

#[derive(Debug)]
struct PollState {
    interval: Duration,
    polling: bool,
}

impl TailWatch {
    fn state(&self) -> std::sync::MutexGuard<'_, PollState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `seen` as the log's next offset; true when it is new.
    fn saw(&self, seen: Offset) -> bool {
        self.next.send_if_modified(|v| {
            let newer = seen > *v;
            if newer {
                *v = seen;
            }
            newer
        })
    }
}

impl Tails {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LogId, Arc<TailWatch>>> {
        self.logs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn watch(&self, log_id: LogId) -> Arc<TailWatch> {
        let mut logs = self.lock();
        if let Some(w) = logs.get(&log_id) {
            return w.clone();
        }
        if logs.len() >= KEPT_WATCHES {
            logs.retain(|_, w| w.next.receiver_count() > 0 || w.state().polling);
        }
        let w = Arc::new(TailWatch {
            next: watch::channel(0).0,
            state: Mutex::new(PollState { interval: MIN_INTERVAL, polling: false }),
        });
        logs.insert(log_id, w.clone());
        w
    }
}

impl Reader {
    /// Tells tail reads of `log_id` waiting in this process that the log now ends at
    /// `next_offset` (an in-process writer acknowledged entries up to it): they read at once,
    /// and the log's poller looks again soon.
    pub fn notify_appended_to(&self, log_id: LogId, next_offset: Offset) {
        let watch = self.inner.tails.lock().get(&log_id).cloned();
        if let Some(w) = watch {
            w.state().interval = MIN_INTERVAL;
            w.saw(next_offset);
        }
    }

    /// Waits until the log's next offset is seen above `above`, or `deadline`. Returns the
    /// offset seen, `None` at the deadline.
    pub(super) async fn wait_for_append(
        &self,
        log_id: LogId,
        above: Offset,
        deadline: Instant,
    ) -> Option<Offset> {
        let w = self.inner.tails.watch(log_id);
        let mut seen = w.next.subscribe();
        {
            let mut state = w.state();
            if !state.polling {
                state.polling = true;
                tokio::spawn(poll(self.clone(), log_id, w.clone()));
            }
        }
        match tokio::time::timeout_at(deadline, seen.wait_for(|next| *next > above)).await {
            Ok(Ok(next)) => Some(*next),
            _ => None,
        }
    }
}

/// The poller of one log: runs while some read waits on it.
async fn poll(reader: Reader, log_id: LogId, w: Arc<TailWatch>) {
    let max = reader.inner.config.tail_poll_max;
    let mut appended = reader.inner.appended.subscribe();
    loop {
        let interval = w.state().interval;
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            // `notify_appended`: an append in this process, to some log.
            _ = appended.changed() => {}
        }
        {
            let mut state = w.state();
            if w.next.receiver_count() == 0 {
                state.polling = false;
                return;
            }
        }
        let seen = reader.next_offset(log_id).await;
        let mut state = w.state();
        state.interval = match seen {
            Ok(next) if w.saw(next) => MIN_INTERVAL,
            Ok(_) => (state.interval * 2).clamp(MIN_INTERVAL, max),
            Err(e) => {
                tracing::debug!(log_id = %log_id, error = %e, "tail poll failed; polling again later");
                max
            }
        };
    }
}
