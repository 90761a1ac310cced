//! The `meta` scenario: the metadata store on its own, raw, on the stack's store (the same
//! `OxiaStore` or embedded store the writer publishes through), in the same run as the other
//! scenarios. It is the baseline of the writer's index publishing: every WAL object a writer
//! uploads is made visible by one `MetaStore::sequenced_put` per log section, in each log's
//! order.
//!
//! Three phases, each as long as a baseline phase of `produce`:
//! 1. sequenced puts with **one in flight per log** (`--logs` sequences, `--logs` tasks), the
//!    writer's pattern: each log publishes its next section after the previous one is
//!    acknowledged;
//! 2. sequenced puts **pipelined**, [`PIPELINE_DEPTH`] in flight per sequence over the same
//!    number of sequences: the store's throughput when a client keeps it busy;
//! 3. **plain puts** (no condition, fresh keys) from as many tasks as (1), to the same
//!    partitions: what a metadata write costs without the sequencing.
//!
//! Values are 128 bytes and the deltas (1, `--entry-bytes`), as the produce baseline's.

use crate::BenchError;
use crate::baseline::{self, Load, OpStats};
use crate::meter::{Goal, Meter};
use crate::report::{Latency, Ratio, ScenarioReport};
use crate::scenarios::{BenchContext, Scenario, figure};

/// Sequenced puts in flight per sequence in the pipelined phase.
pub const PIPELINE_DEPTH: usize = 8;

/// The bytes of each value, as an index record's.
const VALUE_BYTES: usize = 128;

/// Runs the scenario.
pub(crate) async fn run(ctx: &BenchContext) -> Result<ScenarioReport, BenchError> {
    let meta = ctx.stack.meta.clone();
    let sequences = ctx.knobs.logs as usize;
    let delta = ctx.knobs.entry_bytes as u64;
    let load = ctx.phase_load();
    let goal = match load {
        Load::Time(d) => Goal::Time(d * 3),
        Load::Ops(n) => Goal::Ops(n * 3),
    };
    let runs = ["one", "piped", "plain"].map(|phase| format!("{}-meta-{phase}", ctx.run_id));
    let meter = Meter::new();
    let sampler = ctx.sampler(&meter, "meta: sequenced and plain puts", goal);
    let measured = async {
        let one = baseline::raw_sequenced_puts(
            meta.clone(),
            runs[0].clone(),
            sequences,
            VALUE_BYTES,
            delta,
            load,
            &meter,
        )
        .await?;
        let piped = baseline::raw_sequenced_puts_over(
            meta.clone(),
            runs[1].clone(),
            sequences,
            sequences * PIPELINE_DEPTH,
            VALUE_BYTES,
            delta,
            load,
            &meter,
        )
        .await?;
        let plain =
            baseline::raw_plain_puts(meta.clone(), runs[2].clone(), sequences, VALUE_BYTES, load, &meter)
                .await?;
        Ok::<(OpStats, OpStats, OpStats), BenchError>((one, piped, plain))
    }
    .await;
    let sampled = sampler.stop().await;
    // Every acknowledged put must have left its record (not timed).
    let mut stored = Vec::new();
    if measured.is_ok() {
        for run in &runs {
            stored.push(baseline::count_sequences(&*meta, run, sequences).await);
        }
    }
    // Remove what was written even when a phase failed (not timed).
    let mut cleanup = Ok(());
    for run in &runs {
        if let Err(e) = baseline::remove_sequences(&*meta, run, sequences).await {
            cleanup = cleanup.and(Err(e));
        }
    }
    let (one, piped, plain) = measured?;
    cleanup?;
    let stored = stored.into_iter().collect::<Result<Vec<u64>, BenchError>>()?;
    let acknowledged = [one.ops, piped.ops, plain.ops];
    if stored != acknowledged {
        return Err(BenchError::Operation {
            what: "checking the meta scenario's records".into(),
            message: format!(
                "records found {stored:?} differ from the puts acknowledged {acknowledged:?} \
                 (one in flight, pipelined, plain)"
            ),
        });
    }

    let mut r = ctx.report(Scenario::Meta);
    r.figures = vec![
        figure("sequenced puts, one in flight per log", one.ops_s(), "puts/s"),
        figure(&format!("sequenced puts, {PIPELINE_DEPTH} in flight per log"), piped.ops_s(), "puts/s"),
        figure("plain puts, as many tasks as logs", plain.ops_s(), "puts/s"),
        figure("sequences (logs)", sequences as f64, ""),
    ];
    r.latencies = vec![
        Latency::of("sequenced put, one in flight per log", &one.latency),
        Latency::of(&format!("sequenced put, {PIPELINE_DEPTH} in flight per log"), &piped.latency),
        Latency::of("plain put", &plain.latency),
    ];
    r.ratios = vec![
        Ratio::new(
            "sequenced vs plain puts (same tasks and partitions)",
            one.ops_s(),
            plain.ops_s(),
            "puts/s",
        ),
        Ratio::new(
            &format!("sequenced puts, {PIPELINE_DEPTH} in flight per log vs one in flight"),
            piped.ops_s(),
            one.ops_s(),
            "puts/s",
        ),
    ];
    r.samples = sampled.samples;
    r.notes.push(format!(
        "Every acknowledged put was found stored afterwards ({} records, listed after the \
         phases, not timed).",
        acknowledged.iter().sum::<u64>()
    ));
    r.notes.push(format!(
        "Directly on the stack's metadata store, no writer: {sequences} sequences of \
         {VALUE_BYTES}-byte values with deltas (1, {delta}); the phases run one after another \
         (one in flight per log, {PIPELINE_DEPTH} in flight per log, plain puts), which the \
         time series shows in that order. Compare the first with `produce`'s \"writer's \
         sequenced puts\"."
    ));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use crate::scenarios::tests::{context, figure_of, tiny};
    use crate::scenarios::{Scenario, run};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn meta_smoke() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path(), tiny()).await;
        let r = run(&ctx, Scenario::Meta).await.unwrap();
        assert!(figure_of(&r, "sequenced puts, one in flight per log") > 0.0);
        assert!(figure_of(&r, "plain puts, as many tasks as logs") > 0.0);
        // tiny(): 200 operations per phase.
        assert!(r.latencies.iter().all(|l| l.summary.count == 200), "{:?}", r.latencies);
        assert!(r.ratios.iter().all(|x| x.ratio.is_some()), "{:?}", r.ratios);
        // Nothing is left behind.
        for phase in ["one", "piped", "plain"] {
            for worker in 0..2 {
                let partition = format!("bench-baseline-t1-meta-{phase}-{worker}");
                let keys =
                    ctx.stack.meta.list(&partition, "/bench-baseline/", "/bench-baseline0").await.unwrap();
                assert!(keys.is_empty(), "{partition}: {keys:?}");
            }
        }
        ctx.close().await;
    }
}
