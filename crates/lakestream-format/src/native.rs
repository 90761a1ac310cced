//! The native binding: Lakestream's own binding, for every stream that is not a Kafka topic.
//!
//! The spec leaves payloads opaque at every layer and lets a *binding* define what an entry
//! payload holds and which identifiers compacted objects carry (Goals; "Compacted objects";
//! Appendix A defines the Kafka binding). A stream whose payloads are not Kafka record batches
//! must not claim the Kafka binding: a reader of that binding would take its rows for record
//! batches. So such streams (anything produced over HTTP or gRPC into a stream that is not a
//! Kafka topic) follow this binding, whose identifiers are under our name:
//!
//! * **Entry payloads.** Any bytes, the empty string included, unchanged. The entry's record
//!   count is the one its producer gave (at least 1; 1 when the producer gives none). Nothing
//!   inside the payload is interpreted, so a reader hands it back byte for byte.
//! * **Compacted objects.** [`NATIVE_BINDING`]: footer `entrySerDeType` =
//!   `LAKESTREAM_RAW_PARQUET`, Avro record `LakestreamEntry` (no namespace) with the one field
//!   `payload` of type `["null","bytes"]`, default null — the structure every binding shares,
//!   only the two identifiers differ from the Kafka binding's.
//!
//! Which binding a stream follows is fixed when the stream is created, by its properties:
//! [`binding_of_stream`] answers [`crate::kafka::KAFKA_BINDING`] for a stream carrying the
//! Kafka binding's property [`crate::kafka::TOPIC_NAME_PROPERTY`] (Appendix A: "The stream's
//! properties include lakestream.source.logical.name and lakestream.kafka.topic.name"), and
//! [`NATIVE_BINDING`] for every other stream. Readers accept files of both bindings
//! ([`crate::compacted::KNOWN_BINDINGS`]) and refuse any other identifier.
//!
//! ```
//! use std::collections::BTreeMap;
//! use lakestream_format::{kafka, native};
//!
//! let http_stream = BTreeMap::from([("owner".to_owned(), "billing".to_owned())]);
//! assert_eq!(native::binding_of_stream(&http_stream), native::NATIVE_BINDING);
//! let topic_stream = kafka::topic_stream_properties("orders");
//! assert_eq!(native::binding_of_stream(&topic_stream), kafka::KAFKA_BINDING);
//! ```

use std::collections::BTreeMap;

use crate::compacted::Binding;
use crate::kafka;

/// The native binding's compacted-object identifiers.
pub const NATIVE_BINDING: Binding =
    Binding { entry_serde_type: "LAKESTREAM_RAW_PARQUET", avro_record_name: "LakestreamEntry" };

/// The binding a stream follows, from the properties it was created with: the Kafka binding
/// when they name a Kafka topic ([`kafka::is_topic_stream`]), the native binding otherwise.
pub fn binding_of_stream(properties: &BTreeMap<String, String>) -> Binding {
    if kafka::is_topic_stream(properties) { kafka::KAFKA_BINDING } else { NATIVE_BINDING }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_identifiers_are_ours_and_differ_from_kafkas() {
        assert_eq!(NATIVE_BINDING.entry_serde_type, "LAKESTREAM_RAW_PARQUET");
        assert_eq!(NATIVE_BINDING.avro_record_name, "LakestreamEntry");
        assert_ne!(NATIVE_BINDING.entry_serde_type, kafka::KAFKA_BINDING.entry_serde_type);
        assert_ne!(NATIVE_BINDING.avro_record_name, kafka::KAFKA_BINDING.avro_record_name);
        assert_eq!(
            NATIVE_BINDING.avro_schema(),
            r#"{"type":"record","name":"LakestreamEntry","fields":[{"name":"payload","type":["null","bytes"],"default":null}]}"#
        );
    }

    #[test]
    fn a_stream_is_a_kafka_topic_only_by_its_binding_property() {
        let props = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        assert_eq!(binding_of_stream(&props(&[])), NATIVE_BINDING);
        assert_eq!(binding_of_stream(&props(&[("lakestream.kafka.topic.name", "t")])), kafka::KAFKA_BINDING);
        assert_eq!(binding_of_stream(&kafka::topic_stream_properties("t")), kafka::KAFKA_BINDING);
        // Streams our Kafka front end created before the spec's properties were written.
        assert_eq!(binding_of_stream(&props(&[("kafka.topic", "t")])), kafka::KAFKA_BINDING);
        // The other Appendix A property alone names a source, not a Kafka topic.
        assert_eq!(binding_of_stream(&props(&[("lakestream.source.logical.name", "t")])), NATIVE_BINDING);
        assert_eq!(binding_of_stream(&props(&[("kafka.topic.name", "t")])), NATIVE_BINDING);
    }
}
