//! The background roles of a service process, apart from the front ends: compaction and
//! reclamation, Iceberg table commits, retention, idle producers' state expiry and the
//! CloudEvents deduplication ledger's cleanup. Each runs as a task until the
//! service shuts down ([`crate::Service::shutdown`]).

pub(crate) mod compaction;
pub(crate) mod retention;
pub(crate) mod sweep;
pub mod tables;

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::ServiceConfig;
use crate::metrics::Metrics;
use crate::stack::Stack;

pub use retention::policy_of;

/// The background tasks of a running service.
#[derive(Debug)]
pub struct Background {
    stop: watch::Sender<bool>,
    tasks: Vec<(&'static str, JoinHandle<()>)>,
}

impl Background {
    /// Starts the background roles `config` asks this process to serve over `stack`,
    /// recording into `metrics`.
    pub(crate) fn spawn(stack: &Stack, config: &ServiceConfig, metrics: &Arc<Metrics>) -> Background {
        let (stop, stopped) = watch::channel(false);
        let mut tasks = Vec::new();
        if let Some(compactor) = stack.compactor.clone() {
            let schedule = config.compactor_schedule.clone();
            let task =
                compaction::run(stack.clone(), compactor.clone(), schedule, metrics.clone(), stopped.clone());
            tasks.push(("compaction", tokio::spawn(task)));
            // Streams as Iceberg tables: committed beside compaction, never in its way.
            if let Some(role) = stack.tables.clone() {
                let task = tables::run(stack.clone(), compactor, role, metrics.clone(), stop.subscribe());
                tasks.push(("tables", tokio::spawn(task)));
            }
        }
        if stack.writer.is_some() && !config.retention.interval.is_zero() {
            let task =
                retention::run(stack.clone(), config.retention.interval, metrics.clone(), stop.subscribe());
            tasks.push(("retention", tokio::spawn(task)));
        }
        // Idle producers' states are deleted periodically (a writer-role duty, like retention).
        let producers = &config.producers;
        if stack.writer.is_some() && !producers.idle_expiry.is_zero() && !producers.sweep_interval.is_zero() {
            let task = crate::producers::run_expiry(
                stack.clone(),
                producers.idle_expiry,
                producers.sweep_interval,
                metrics.clone(),
                stop.subscribe(),
            );
            tasks.push(("producer expiry", tokio::spawn(task)));
        }
        // Expired CloudEvents deduplication records are deleted periodically.
        tasks.push((
            "ledger cleanup",
            tokio::spawn(crate::events::run_cleanup(stack.clone(), stop.subscribe())),
        ));
        Background { stop, tasks }
    }

    /// Stops every task and waits for each to end.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        for (name, task) in self.tasks {
            if let Err(e) = task.await {
                tracing::warn!(task = name, error = %e, "a background task ended abnormally");
            }
        }
    }
}
