//! The `events` scenario: CloudEvents ingestion with deduplication
//! (`Api::ingest_events`, one event per request) against plain produce of
//! entries of the same payload size, at the same concurrency, on the same stream, in the
//! same run. Every event has a new id, so each one pays the full deduplication cost (claim,
//! append, record); a duplicate would skip the append and be cheaper.

use lakestream_cloudevents::{Attribute, CloudEvent, Data};
use lakestream_service::DEFAULT_NAMESPACE;
use lakestream_service::events::EventStatus;

use crate::baseline;
use crate::meter::Meter;
use crate::report::{Latency, Ratio, ScenarioReport, Target, ratio};
use crate::scenarios::{BenchContext, Scenario, append_load, figure, payload_pool, rss_target, warm_up};
use crate::{BenchError, err};

/// Runs the scenario.
pub(crate) async fn run(ctx: &BenchContext) -> Result<ScenarioReport, BenchError> {
    let logs = ctx.create_stream(Scenario::Events).await?;
    let stream = logs.first().map(|l| l.stream.clone()).unwrap_or_default();
    let ends = warm_up(ctx.writer()?, &logs).await?;
    let api = lakestream_service::Api::over_stack(ctx.stack.clone(), ctx.config.service.max_fetch_wait);
    let caller = api.admit(None, None).map_err(err("admitting the benchmark's requests"))?;
    let pool = payload_pool(ctx.knobs.entry_bytes);
    let source = format!("/bench/{}", ctx.run_id);

    let meter = Meter::new();
    let sampler = ctx.sampler(&meter, "events: ingest", ctx.goal());
    let events = baseline::closed_loop(ctx.producers(), ctx.load(), &meter, move |_, seq| {
        let (api, caller, pool, source, stream) =
            (api.clone(), caller.clone(), pool.clone(), source.clone(), stream.clone());
        async move {
            let data = pool[(seq % pool.len() as u64) as usize].to_vec();
            let n = data.len() as u64;
            let event = CloudEvent::new(
                vec![
                    Attribute::string("specversion", "1.0"),
                    Attribute::string("id", format!("e{seq}")),
                    Attribute::string("source", source),
                    Attribute::string("type", "dev.lakestream.bench"),
                ],
                Some(Data::Binary(data)),
            )
            .map_err(err("building a CloudEvent"))?;
            match api.ingest_events(&caller, DEFAULT_NAMESPACE, &stream, None, vec![event]).await {
                Ok(results) if results.iter().all(|r| r.status == EventStatus::Appended) => Ok(n),
                Ok(other) => Err(BenchError::Operation {
                    what: format!("ingest of event e{seq}"),
                    message: format!("a new event was not appended: {other:?}"),
                }),
                Err(e) => Err(err(format!("ingest of event e{seq}"))(e)),
            }
        }
    })
    .await;
    let events_sampled = sampler.stop().await;
    let events = events?;

    let meter = Meter::new();
    let sampler = ctx.sampler(&meter, "events: plain produce", ctx.goal());
    let plain = append_load(ctx, &logs, &meter, ends, ctx.load()).await;
    let plain_sampled = sampler.stop().await;
    let plain = plain?.stats;

    let mut r = ctx.report(Scenario::Events);
    r.figures = vec![
        figure("CloudEvents ingested (deduplicated)", events.ops_s(), "events/s"),
        figure("plain produce", plain.ops_s(), "entries/s"),
        figure("CloudEvents payload", events.mb_s(), "MB/s"),
        figure("plain produce payload", plain.mb_s(), "MB/s"),
        figure("events", events.ops as f64, ""),
    ];
    r.latencies = vec![
        Latency::of("ingest request (1 event)", &events.latency),
        Latency::of("plain append", &plain.latency),
    ];
    r.ratios = vec![Ratio::new(
        "deduplicated CloudEvents vs plain produce",
        events.ops_s(),
        plain.ops_s(),
        "events/s",
    )];
    let t0 = events.elapsed.as_secs_f64();
    r.samples = events_sampled
        .samples
        .iter()
        .copied()
        .chain(plain_sampled.samples.iter().map(|s| crate::meter::Sample { t_s: s.t_s + t0, ..*s }))
        .collect();
    r.targets.push(Target::at_least(
        "CloudEvents with deduplication ≥ 0.5 × plain produce events/s",
        ratio(events.ops_s(), plain.ops_s()).unwrap_or(0.0),
        0.5,
        "×",
    ));
    rss_target(&mut r, events_sampled.peak_rss.max(plain_sampled.peak_rss), 0, "");
    r.notes.push(format!(
        "{} concurrent requests of one event each (new ids: every event pays claim, append and record); \
         plain produce appends entries of the same payload size at the same concurrency. The time series shows \
         the CloudEvents phase, then the plain one ({:.1} s in).",
        ctx.producers(),
        t0
    ));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use crate::scenarios::tests::{context, figure_of, tiny};
    use crate::scenarios::{Scenario, run};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn events_smoke() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path(), tiny()).await;
        let r = run(&ctx, Scenario::Events).await.unwrap();
        assert_eq!(figure_of(&r, "events"), 200.0);
        assert_eq!(r.latencies[0].summary.count, 200);
        assert_eq!(r.latencies[1].summary.count, 200);
        assert!(r.ratios[0].ratio.is_some());
        assert!(r.targets[0].name.starts_with("CloudEvents"));
        ctx.close().await;
    }
}
