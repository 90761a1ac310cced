//! The two row layouts, as an Iceberg schema (field ids) and as the Arrow schema the data
//! files are written with (the same field ids in `PARQUET:field_id`), and the hidden day
//! partitioning on `timestamp`.
//!
//! | layout | one row per | columns (field id) |
//! |---|---|---|
//! | [`Layout::Kafka`] | Kafka record | `partition` int (1), `offset` long (2), `timestamp` timestamptz (3), `key` binary? (4), `value` binary? (5), `headers` list<struct<`key` string (8), `value` binary? (9)>> (6, element 7) |
//! | [`Layout::Entries`] | entry | `partition` int (1), `offset` long (2), `timestamp` timestamptz (3), `record_count` int (4), `payload` binary (5) |
//!
//! The partition spec is `day(timestamp)` (partition field `timestamp_day`, id 1000).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema as ArrowSchema, TimeUnit};
use iceberg::spec::{
    ListType, NestedField, PrimitiveType, Schema, StructType, Transform, Type, UnboundPartitionSpec,
};

use crate::error::{TablesError, TablesResult};

/// How a stream's entries become rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// A Kafka-binding stream (`default/{topic}-topic-id-{id}`): one row per Kafka record,
    /// decoded from the stored record batches.
    Kafka,
    /// Any other stream: one row per entry, the payload as stored.
    Entries,
}

/// The Arrow metadata key the Parquet writer turns into a field id.
pub const FIELD_ID_KEY: &str = "PARQUET:field_id";
/// The id of the partition field `timestamp_day`.
pub const PARTITION_FIELD_ID: i32 = 1000;
/// The field ids of the columns both layouts share.
pub const PARTITION_ID: i32 = 1;
/// `offset`.
pub const OFFSET_ID: i32 = 2;
/// `timestamp`.
pub const TIMESTAMP_ID: i32 = 3;

impl Layout {
    /// The layout of a stream: Kafka for the Kafka binding's stream identity
    /// (`default/{topic}-topic-id-{topic ID}`), entries otherwise.
    pub fn of(namespace: &str, stream: &str) -> Layout {
        if namespace == lakestream_format::kafka::NAMESPACE
            && lakestream_format::kafka::parse_stream_name(stream).is_ok()
        {
            Layout::Kafka
        } else {
            Layout::Entries
        }
    }

    /// Its name in table properties (`lakestream.layout`).
    pub fn name(self) -> &'static str {
        match self {
            Layout::Kafka => "kafka-records",
            Layout::Entries => "entries",
        }
    }

    /// The Iceberg schema.
    pub fn iceberg_schema(self) -> TablesResult<Schema> {
        let common = [
            NestedField::required(PARTITION_ID, "partition", Type::Primitive(PrimitiveType::Int)),
            NestedField::required(OFFSET_ID, "offset", Type::Primitive(PrimitiveType::Long)),
            NestedField::required(TIMESTAMP_ID, "timestamp", Type::Primitive(PrimitiveType::Timestamptz)),
        ];
        let rest = match self {
            Layout::Kafka => vec![
                NestedField::optional(4, "key", Type::Primitive(PrimitiveType::Binary)),
                NestedField::optional(5, "value", Type::Primitive(PrimitiveType::Binary)),
                NestedField::required(
                    6,
                    "headers",
                    Type::List(ListType::new(Arc::new(NestedField::list_element(
                        7,
                        Type::Struct(StructType::new(vec![
                            Arc::new(NestedField::required(8, "key", Type::Primitive(PrimitiveType::String))),
                            Arc::new(NestedField::optional(
                                9,
                                "value",
                                Type::Primitive(PrimitiveType::Binary),
                            )),
                        ])),
                        true,
                    )))),
                ),
            ],
            Layout::Entries => vec![
                NestedField::required(4, "record_count", Type::Primitive(PrimitiveType::Int)),
                NestedField::required(5, "payload", Type::Primitive(PrimitiveType::Binary)),
            ],
        };
        Schema::builder()
            .with_schema_id(0)
            .with_fields(common.into_iter().chain(rest).map(Arc::new))
            .build()
            .map_err(|e| TablesError::Encode { table: self.name().into(), message: e.to_string() })
    }

    /// The partition spec: `day(timestamp)`.
    pub fn partition_spec(self) -> TablesResult<UnboundPartitionSpec> {
        Ok(UnboundPartitionSpec::builder()
            .with_spec_id(0)
            .add_partition_field(TIMESTAMP_ID, "timestamp_day", Transform::Day)
            .map_err(|e| TablesError::Encode { table: self.name().into(), message: e.to_string() })?
            .build())
    }

    /// The Arrow schema of the data files, with the Iceberg field ids.
    pub fn arrow_schema(self) -> Arc<ArrowSchema> {
        let common = [
            field("partition", DataType::Int32, false, PARTITION_ID),
            field("offset", DataType::Int64, false, OFFSET_ID),
            field("timestamp", timestamp_type(), false, TIMESTAMP_ID),
        ];
        let rest = match self {
            Layout::Kafka => vec![
                field("key", DataType::Binary, true, 4),
                field("value", DataType::Binary, true, 5),
                field("headers", DataType::List(Arc::new(header_element())), false, 6),
            ],
            Layout::Entries => {
                vec![
                    field("record_count", DataType::Int32, false, 4),
                    field("payload", DataType::Binary, false, 5),
                ]
            }
        };
        Arc::new(ArrowSchema::new(common.into_iter().chain(rest).collect::<Vec<_>>()))
    }
}

/// `timestamp`'s Arrow type: microseconds, UTC (Iceberg `timestamptz`).
pub(crate) fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// The list element of `headers`: a struct of `key` and `value`.
pub(crate) fn header_element() -> Field {
    field("element", DataType::Struct(header_fields()), false, 7)
}

/// The fields of a header struct.
pub(crate) fn header_fields() -> Fields {
    Fields::from(vec![field("key", DataType::Utf8, false, 8), field("value", DataType::Binary, true, 9)])
}

fn field(name: &str, data_type: DataType, nullable: bool, id: i32) -> Field {
    Field::new(name, data_type, nullable)
        .with_metadata(HashMap::from([(FIELD_ID_KEY.to_owned(), id.to_string())]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_streams_are_recognised_by_their_identity() {
        assert_eq!(Layout::of("default", "orders-topic-id-AAAAAAAAAAAAAAAAAAAAAA"), Layout::Kafka);
        assert_eq!(Layout::of("other", "orders-topic-id-AAAAAAAAAAAAAAAAAAAAAA"), Layout::Entries);
        assert_eq!(Layout::of("default", "orders"), Layout::Entries);
    }

    #[test]
    fn schemas_carry_the_same_field_ids() {
        for layout in [Layout::Kafka, Layout::Entries] {
            let iceberg = layout.iceberg_schema().unwrap();
            let arrow = layout.arrow_schema();
            assert_eq!(iceberg.as_struct().fields().len(), arrow.fields().len());
            for (i, f) in arrow.fields().iter().enumerate() {
                let id: i32 = f.metadata()[FIELD_ID_KEY].parse().unwrap();
                let nested = &iceberg.as_struct().fields()[i];
                assert_eq!((nested.id, nested.name.as_str()), (id, f.name().as_str()));
                assert_eq!(nested.required, !f.is_nullable());
            }
        }
        layout_partition_spec_is_day();
    }

    fn layout_partition_spec_is_day() {
        let spec = Layout::Entries.partition_spec().unwrap();
        let json = serde_json::to_string(&spec).unwrap();
        assert!(json.contains("\"day\"") && json.contains("timestamp_day"), "{json}");
    }
}
