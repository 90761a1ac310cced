//! Which binding a compacted file carries: a Kafka topic's stream gets the Kafka binding's
//! identifiers (Appendix A), every other stream the native binding's (docs/format.md), and
//! the reader reads both back. Over the in-memory stores.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{Stack, append_n, log_ref, object_names, read_all, test_config};
use lakestream_compactor::{CompactionLog, no_progress};
use lakestream_format::compacted::{Binding, CompactedFileReader, KNOWN_BINDINGS};
use lakestream_format::kafka::{self, KAFKA_BINDING};
use lakestream_format::native::{self, NATIVE_BINDING};
use lakestream_format::{LogId, LogRef};
use lakestream_objstore::{ObjectPath, ObjectStore};

const AGE: i64 = 10 * 60_000;

/// The bindings of the compacted files under `log`'s stream directory.
async fn bindings_of(compacted: &Arc<dyn ObjectStore>, log: &LogRef) -> Vec<(Binding, String)> {
    let dir = format!("{}/{}/", log.namespace, log.stream);
    let mut out = Vec::new();
    for name in object_names(compacted).await {
        if !(name.starts_with(&dir) && name.ends_with(".parquet")) {
            continue;
        }
        let bytes = compacted.get(&ObjectPath::new(name.clone()).unwrap()).await.unwrap();
        let reader = CompactedFileReader::open(bytes, KNOWN_BINDINGS).unwrap();
        let schema_name = reader.footer().file_metadata().schema_descr().root_schema().name().to_owned();
        out.push((reader.binding(), schema_name));
    }
    out
}

/// A Kafka record batch of one record: what a topic's entries hold.
fn kafka_batch() -> Bytes {
    let path =
        concat!(env!("CARGO_MANIFEST_DIR"), "/../lakestream-format/tests/vectors/kafka/v2_single_record.bin");
    Bytes::from(std::fs::read(path).unwrap())
}

// spec-rule: 525bf9b7ca [Compactor] A compactor MUST write each compacted file with an Avro record schema…
#[tokio::test]
async fn a_stream_that_is_not_a_kafka_topic_is_compacted_under_the_native_binding() {
    // A binding defines which identifiers compacted objects carry (spec Goals, Appendix A):
    // opaque payloads of an HTTP/gRPC stream must not be labelled as Kafka record batches.
    let s = Stack::new();
    let w = s.writer(1);
    let log = log_ref(1);
    let acked = append_n(&w, log.log_id, 3, 1, "opaque").await;
    w.close().await;
    s.clock.advance_ms(AGE);
    let c = s.compactor(test_config(), 1);
    let report = c.compact_once(std::slice::from_ref(&log), &no_progress).await;
    assert!(report.failed.is_empty() && report.ranges.len() == 1, "{report:?}");
    let files = bindings_of(&s.compacted, &log).await;
    assert_eq!(files, [(NATIVE_BINDING, "LakestreamEntry".to_owned())]);
    assert_eq!(read_all(&s.reader(), &log, 0).await, acked, "read back byte for byte");
}

// spec-rule: 525bf9b7ca [Compactor] A compactor MUST write each compacted file with an Avro record schema…
#[tokio::test]
async fn a_kafka_topics_files_carry_the_kafka_identifiers_and_others_ours_in_one_pass() {
    // Appendix A: a Kafka topic's compacted files carry entrySerDeType
    // KAFKA_BATCHED_RAW_PARQUET and the Avro record KafkaMessage; the binding comes from the
    // stream's properties, so one pass over both kinds of stream labels each by its own.
    let s = Stack::new();
    let w = s.writer(2);
    let topic =
        LogRef { log_id: LogId(2), namespace: kafka::NAMESPACE.into(), stream: "t-topic-id-x".into() };
    let plain = log_ref(3);
    let mut topic_acked = Vec::new();
    for _ in 0..3 {
        let ack = w.append(topic.log_id, kafka_batch(), 1).await.unwrap();
        topic_acked.push(ack.offset);
    }
    append_n(&w, plain.log_id, 3, 1, "plain").await;
    w.close().await;
    s.clock.advance_ms(AGE);
    let c = s.compactor(test_config(), 2);
    let logs = [
        CompactionLog::new(topic.clone(), native::binding_of_stream(&kafka::topic_stream_properties("t"))),
        CompactionLog::new(plain.clone(), native::binding_of_stream(&Default::default())),
    ];
    let report = c.compact_logs_once(&logs, &no_progress).await;
    assert!(report.failed.is_empty() && report.ranges.len() == 2, "{report:?}");
    assert_eq!(bindings_of(&s.compacted, &topic).await, [(KAFKA_BINDING, "KafkaMessage".to_owned())]);
    assert_eq!(bindings_of(&s.compacted, &plain).await, [(NATIVE_BINDING, "LakestreamEntry".to_owned())]);
    let entries = read_all(&s.reader(), &topic, 0).await;
    assert_eq!(entries.iter().map(|e| e.offset).collect::<Vec<_>>(), topic_acked);
    assert!(entries.iter().all(|e| e.payload == kafka_batch()));
}
