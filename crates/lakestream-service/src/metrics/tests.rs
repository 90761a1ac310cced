//! The metrics' tests: names, types and helps against the docs and the alert rules, labels
//! and their escaping, and a strict parser of the text format that every scrape must pass.

use std::time::Duration;

use prometheus_client::registry::Registry;

use super::*;

/// A scrape of every metric `/metrics` can expose: the operations', and those of every
/// component a process can have (object stores, writer, reader cache, Oxia client).
fn every_metric() -> String {
    Metrics::with(|r| {
        crate::objects::ObjectStoreMetrics::default().register(r);
        register_writer(r, lakestream_writer::WriterStats::default);
        register_oxia(r, lakestream_meta_oxia::OxiaStats::default);
        register_cache(r, lakestream_reader::cache::CacheStats::default);
    })
    .render()
}

/// Every `lakestream_*` metric the alert rules and the dashboard under `deploy/` query is
/// one `/metrics` exposes (histograms with their `_bucket`, `_sum` and `_count` series).
#[test]
fn the_alerts_and_the_dashboard_query_only_metrics_we_expose() {
    let text = every_metric();
    let mut exposed = std::collections::BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
            exposed.insert(name.to_string());
            if kind == "histogram" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    exposed.insert(format!("{name}{suffix}"));
                }
            }
        }
    }
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    let mut checked = 0;
    for file in ["prometheus/alerts.yml", "prometheus/alerts_test.yml", "grafana/lakestream.json"] {
        let content = std::fs::read_to_string(deploy.join(file)).unwrap();
        let mut rest = content.as_str();
        while let Some(at) = rest.find("lakestream_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            assert!(exposed.contains(&name), "{file} queries {name}, which /metrics does not expose");
            checked += 1;
            rest = &rest[at + name.len()..];
        }
    }
    assert!(checked > 40, "only {checked} metric references found");
}

#[test]
fn grpc_methods_are_ours_or_unknown() {
    assert_eq!(GrpcRequestMetrics::method_of("/lakestream.v1.Lakestream/Produce"), "Produce");
    assert_eq!(GrpcRequestMetrics::method_of("/lakestream.v1.Lakestream/Nope"), "unknown");
    assert_eq!(GrpcRequestMetrics::method_of("/other.Service/Produce"), "unknown");
    let m = Metrics::default();
    m.grpc_requests.observe("unknown", tonic::Code::Unimplemented, Duration::from_millis(1));
    m.grpc_requests.observe("Produce", tonic::Code::Ok, Duration::from_millis(1));
    m.grpc_requests.observe("Produce", tonic::Code::Ok, Duration::from_millis(1));
    let out = m.render();
    assert!(
        out.contains("lakestream_grpc_requests_total{method=\"unknown\",code=\"UNIMPLEMENTED\"} 1\n"),
        "{out}"
    );
    assert!(out.contains("lakestream_grpc_requests_total{method=\"Produce\",code=\"OK\"} 2\n"), "{out}");
    parse_scrape(&out).unwrap();
}

#[test]
fn http_route_labels_are_escaped_and_the_scrape_parses() {
    let m = Metrics::default();
    let (get, ok, missing) = (http::Method::GET, http::StatusCode::OK, http::StatusCode::NOT_FOUND);
    m.http_requests.observe(Some("/a/{x}"), &get, ok, Duration::from_millis(2));
    m.http_requests.observe(Some("/a/{x}"), &get, missing, Duration::from_millis(2));
    m.http_requests.observe(None, &http::Method::from_bytes(b"BREW").unwrap(), missing, Duration::ZERO);
    let out = m.render();
    parse_scrape(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert!(
        out.contains("lakestream_http_requests_total{route=\"/a/{x}\",method=\"GET\",status=\"2xx\"} 1\n"),
        "{out}"
    );
    assert!(
        out.contains("lakestream_http_requests_total{route=\"/a/{x}\",method=\"GET\",status=\"4xx\"} 1\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "lakestream_http_requests_total{route=\"unmatched\",method=\"other\",status=\"4xx\"} 1\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("lakestream_http_request_duration_seconds_count{route=\"/a/{x}\",method=\"GET\"} 2\n"),
        "{out}"
    );
    assert!(out.contains("lakestream_http_request_duration_seconds_bucket{route=\"/a/{x}\",method=\"GET\",le=\"0.0025\"} 2\n"), "{out}");
}

#[test]
fn writer_stats_render_as_counters_and_histograms() {
    let stats = lakestream_writer::WriterStats {
        objects_written: 3,
        object_write_failures: 1,
        object_bytes: lakestream_writer::HistogramSnapshot {
            bounds: &[1024, 4096],
            cumulative: vec![1, 2],
            count: 3,
            sum: 10_000,
        },
        logs_per_object: lakestream_writer::HistogramSnapshot {
            bounds: &[1, 2],
            cumulative: vec![2, 2],
            count: 3,
            sum: 9,
        },
        index_puts: 8,
        index_put_failures: 0,
        index_put_unknown: 1,
    };
    let mut registry = Registry::default();
    register_writer(&mut registry, move || stats.clone());
    let out = encode(&registry);
    parse_scrape(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    for line in [
        "lakestream_wal_objects_written_total 3",
        "lakestream_wal_object_write_failures_total 1",
        "lakestream_wal_object_size_bytes_bucket{le=\"4096\"} 2",
        "lakestream_wal_object_size_bytes_bucket{le=\"+Inf\"} 3",
        "lakestream_wal_object_size_bytes_sum 10000.0",
        "lakestream_wal_object_logs_bucket{le=\"1\"} 2",
        "lakestream_wal_object_logs_count 3",
        "lakestream_wal_object_logs_sum 9.0",
        "lakestream_wal_index_puts_total{outcome=\"committed\"} 8",
        "lakestream_wal_index_puts_total{outcome=\"unknown\"} 1",
    ] {
        assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
    }
}

#[test]
fn oxia_requests_render_per_kind() {
    let mut stats = lakestream_meta_oxia::OxiaStats::default();
    stats.counts[0] = lakestream_meta_oxia::RequestCounts { requests: 7, errors: 2 };
    stats.counts[4] = lakestream_meta_oxia::RequestCounts { requests: 3, errors: 0 };
    let mut registry = Registry::default();
    register_oxia(&mut registry, move || stats);
    let out = encode(&registry);
    parse_scrape(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    for line in [
        "lakestream_oxia_requests_total{kind=\"write\"} 7",
        "lakestream_oxia_request_errors_total{kind=\"write\"} 2",
        "lakestream_oxia_requests_total{kind=\"session\"} 3",
        "lakestream_oxia_requests_total{kind=\"scan\"} 0",
    ] {
        assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
    }
}

/// `docs/operations.md`'s metrics reference names every metric `/metrics` can expose, with
/// its type, and nothing else.
#[test]
fn the_metrics_reference_lists_every_metric_with_its_type() {
    let text = every_metric();
    let exposed: std::collections::BTreeMap<String, String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|rest| {
            let (name, kind) = rest.split_once(' ').unwrap();
            (name.to_string(), kind.to_string())
        })
        .collect();
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md");
    let docs = std::fs::read_to_string(docs).unwrap();
    let documented: std::collections::BTreeMap<String, String> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("| `lakestream_"))
        .map(|rest| {
            let mut cells = rest.split('|');
            let name = format!("lakestream_{}", cells.next().unwrap().trim().trim_end_matches('`'));
            (name, cells.next().unwrap().trim().to_string())
        })
        .collect();
    assert!(exposed.len() > 40, "{exposed:?}");
    assert_eq!(documented, exposed);
}

#[test]
fn histogram_buckets_are_cumulative() {
    let mut registry = Registry::default();
    let h = histogram(&mut registry, "x", "x");
    h.observe(Duration::from_millis(3).as_secs_f64());
    h.observe(Duration::from_secs(60).as_secs_f64());
    let out = encode(&registry);
    assert!(out.contains("x_bucket{le=\"0.005\"} 1"));
    assert!(out.contains("x_bucket{le=\"30\"} 1"));
    assert!(out.contains("x_bucket{le=\"+Inf\"} 2"));
    assert!(out.contains("x_count 2"));
}

#[test]
fn compaction_gauges_are_labelled_per_log_and_forget_dropped_logs() {
    let m = Metrics::default();
    let log = lakestream_format::LogRef {
        log_id: lakestream_format::LogId(7),
        namespace: "default".into(),
        stream: "orders".into(),
    };
    let backlog = lakestream_compactor::Backlog {
        log_id: log.log_id,
        trim_marker: 3,
        open_payload_bytes: 1024,
        oldest_open_entry_ms: Some(10_000),
    };
    m.compaction.record_backlog(&log, backlog, 12_500);
    let out = m.render();
    let labels = "{namespace=\"default\",stream=\"orders\",log=\"7\"}";
    assert!(out.contains(&format!("lakestream_compaction_lag_bytes{labels} 1024")), "{out}");
    assert!(out.contains(&format!("lakestream_compaction_lag_seconds{labels} 2.5")), "{out}");
    assert!(out.contains(&format!("lakestream_trim_marker{labels} 3")), "{out}");
    m.compaction.retain_logs(&Default::default());
    assert!(!m.render().contains("log=\"7\""));
}

/// A sample: metric name, labels (values unescaped), value.
type Sample = (String, Vec<(String, String)>, String);

/// Parses one sample line of the text exposition format strictly; the error names what is
/// wrong in which line.
fn parse_sample(line: &str) -> Result<Sample, String> {
    let bad = |what: String| Err(format!("{what} in {line:?}"));
    let mut chars = line.chars().peekable();
    let name = take_while(&mut chars, |c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return bad(format!("bad metric name {name:?}"));
    }
    let mut labels = Vec::new();
    if chars.peek() == Some(&'{') {
        chars.next();
        loop {
            if chars.peek() == Some(&'}') {
                chars.next();
                break;
            }
            let label = take_while(&mut chars, |c| c.is_ascii_alphanumeric() || c == '_');
            if label.is_empty() || label.starts_with(|c: char| c.is_ascii_digit()) {
                return bad(format!("bad label name {label:?}"));
            }
            if chars.next() != Some('=') || chars.next() != Some('"') {
                return bad(format!("label {label}: expected =\""));
            }
            let mut value = String::new();
            loop {
                match chars.next() {
                    None => return bad(format!("label {label}: unterminated value")),
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some('\\') => value.push('\\'),
                        Some('"') => value.push('"'),
                        Some('n') => value.push('\n'),
                        other => return bad(format!("label {label}: bad escape \\{other:?}")),
                    },
                    Some(c) => value.push(c),
                }
            }
            labels.push((label.clone(), value));
            match chars.next() {
                Some(',') => {}
                Some('}') => break,
                other => return bad(format!("after label {label}: expected , or }}, found {other:?}")),
            }
        }
    }
    if chars.next() != Some(' ') {
        return bad("expected one space before the value".into());
    }
    let value: String = chars.collect();
    if value.parse::<f64>().is_err() && !["+Inf", "-Inf", "NaN"].contains(&value.as_str()) {
        return bad(format!("bad value {value:?}"));
    }
    Ok((name, labels, value))
}

fn take_while(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, ok: impl Fn(char) -> bool) -> String {
    let mut taken = String::new();
    while let Some(c) = chars.next_if(|c| ok(*c)) {
        taken.push(c);
    }
    taken
}

/// Parses a whole scrape: `# HELP`/`# TYPE` lines and samples, nothing else.
fn parse_scrape(text: &str) -> Result<Vec<Sample>, String> {
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            let ok = match comment.split_once(' ') {
                Some(("HELP", rest)) => rest.split_once(' ').is_some(),
                Some(("TYPE", rest)) => rest
                    .split_once(' ')
                    .is_some_and(|(_, kind)| ["counter", "gauge", "histogram"].contains(&kind)),
                _ => false,
            };
            if !ok {
                return Err(format!("bad comment line {line:?}"));
            }
        } else {
            samples.push(parse_sample(line)?);
        }
    }
    Ok(samples)
}

#[test]
fn the_strict_parser_refuses_unescaped_label_values() {
    assert!(parse_sample(r#"x{stream="a"b"} 1"#).is_err());
    assert!(parse_sample(r#"x{stream="a\qb"} 1"#).is_err());
    assert!(parse_sample(r#"x{stream="a} 1"#).is_err());
    assert!(parse_scrape("x{stream=\"a\nb\"} 1\n").is_err(), "a raw line feed splits the sample");
    let (_, labels, _) = parse_sample(r#"x{stream="a\"b\\c\nd"} 1"#).unwrap();
    assert_eq!(labels, [("stream".to_string(), "a\"b\\c\nd".to_string())]);
}

#[test]
fn label_values_are_escaped_so_a_scrape_with_any_stream_name_parses() {
    let m = Metrics::default();
    // Catalog names may hold `"`, `\`, spaces, `%` and non-ASCII; line feeds are refused
    // by the catalog but escaped here all the same.
    let names = [("default", "a\"b\\c"), ("ns \"q\" %41 é", "line\nbreak"), ("plain", "plain")];
    for (i, (namespace, stream)) in names.iter().enumerate() {
        let log = lakestream_format::LogRef {
            log_id: lakestream_format::LogId(i as u64 + 1),
            namespace: (*namespace).into(),
            stream: (*stream).into(),
        };
        let backlog = lakestream_compactor::Backlog {
            log_id: log.log_id,
            trim_marker: 0,
            open_payload_bytes: 10,
            oldest_open_entry_ms: None,
        };
        m.compaction.record_backlog(&log, backlog, 0);
    }
    let out = m.render();
    let samples = parse_scrape(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    for (namespace, stream) in names {
        let matching = samples
            .iter()
            .filter(|(name, labels, _)| {
                name == "lakestream_compaction_lag_bytes"
                    && labels.contains(&("namespace".into(), namespace.into()))
                    && labels.contains(&("stream".into(), stream.into()))
            })
            .count();
        assert_eq!(matching, 1, "{namespace:?}/{stream:?} in\n{out}");
    }
    assert!(out.contains(r#"stream="a\"b\\c""#), "{out}");
    assert!(out.contains(r#"stream="line\nbreak""#), "{out}");
}

#[test]
fn a_log_seen_under_new_labels_keeps_one_series() {
    let m = Metrics::default();
    let backlog = |log_id| lakestream_compactor::Backlog {
        log_id,
        trim_marker: 0,
        open_payload_bytes: 5,
        oldest_open_entry_ms: None,
    };
    for stream in ["before", "after"] {
        let log = lakestream_format::LogRef {
            log_id: lakestream_format::LogId(7),
            namespace: "default".into(),
            stream: stream.into(),
        };
        m.compaction.record_backlog(&log, backlog(log.log_id), 0);
    }
    let out = m.render();
    let series: Vec<&str> =
        out.lines().filter(|l| l.starts_with("lakestream_compaction_lag_bytes{")).collect();
    assert_eq!(series, [r#"lakestream_compaction_lag_bytes{namespace="default",stream="after",log="7"} 5"#]);
}
