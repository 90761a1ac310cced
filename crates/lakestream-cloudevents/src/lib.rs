//! A pure CloudEvents 1.0.2 codec for Lakestream: no I/O, no async.
//!
//! A [`CloudEvent`] keeps every attribute as the exact string it arrived with, in arrival
//! order, with its CloudEvents type ([`AttrType`]), and its [`Data`] in the form it arrived in
//! (JSON `data` keeps its raw JSON text). Nothing normalizes `time` or extension values, so
//! re-encoding in the format an event arrived in gives back the same bytes.
//!
//! | module | format or binding |
//! |---|---|
//! | [`json`] | JSON event format and JSON batch format |
//! | [`http`] | HTTP binding: mode detection, binary mode, header percent-encoding |
//! | [`kafka`] | Kafka binding's binary-mode record: our stored entry (one magic-2 record batch) |
//! | [`proto`] | protobuf format `io.cloudevents.v1` (`CloudEvent`, `CloudEventBatch`) |
//! | [`partition`] | Kafka's default partitioner (murmur2) |
//! | [`event`] | the model, validation and the deduplication key |
//! | `ledger` | the ingest deduplication ledger over the metadata store (feature `ledger`, default) |
//!
//! Validation refuses, naming the attribute ([`CeError::attribute_name`]): a `specversion`
//! other than `1.0`; a missing or empty `id`, `source` or `type`; a `time` that is not
//! RFC 3339; an attribute name that is not lower-case letters and digits (or is `data`); a
//! context attribute of the wrong JSON type; both `data` and `data_base64`; and the type and
//! emptiness rules of the optional attributes. Every refusal has
//! [`lakestream_format::ErrorClass::InvalidInput`].
//!
//! ```
//! use lakestream_cloudevents::{http, json, kafka};
//!
//! let body = br#"{"specversion":"1.0","id":"1","source":"/github/acme/repo","type":"com.github.push","extcount":3,"data":{"ref":"main"}}"#;
//! let event = json::decode_event(body)?;
//! assert_eq!(event.get("extcount"), Some("3"));
//!
//! // Byte for byte back in the JSON format.
//! assert_eq!(json::encode_event(&event).as_bytes(), body);
//!
//! // Stored as one Kafka record batch, then read back unchanged, extension types included.
//! let entry = kafka::encode_events(std::slice::from_ref(&event), 1_700_000_000_000)?;
//! assert_eq!(lakestream_format::kafka::count_records(&entry), Ok(1));
//! assert_eq!(kafka::decode_events(&entry)?, vec![event.clone()]);
//!
//! // Served in HTTP binary mode.
//! let (headers, data) = http::encode_binary(&event);
//! assert!(headers.contains(&("ce-source".into(), "/github/acme/repo".into())));
//! assert_eq!(data, br#"{"ref":"main"}"#);
//!
//! // Refusals name the attribute.
//! let error = json::decode_event(br#"{"specversion":"0.3","id":"1","source":"/s","type":"t"}"#).unwrap_err();
//! assert_eq!(error.attribute_name(), Some("specversion"));
//! # Ok::<(), lakestream_cloudevents::CeError>(())
//! ```
#![deny(missing_docs)]

pub mod error;
pub mod event;
pub mod http;
pub mod json;
pub mod kafka;
#[cfg(feature = "ledger")]
pub mod ledger;
pub mod partition;
pub mod proto;
pub mod time;

pub use error::{CeError, Result};
pub use event::{AttrType, Attribute, CloudEvent, Data, dedup_key};
