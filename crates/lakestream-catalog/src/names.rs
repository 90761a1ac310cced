//! Name rules for namespaces and streams, and the Kafka binding's stream identity.
//!
//! A stream's namespace and name become two directory levels under the compacted root
//! (`{compacted root}/{namespace}/{stream name}/`, spec "Compacted object names"), and keys of
//! catalog records. The rules below keep both well formed:
//!
//! | rule | why |
//! |---|---|
//! | not empty | an empty path component collapses the directory levels |
//! | no `/` | spec MUST: the stream directory lies exactly two levels below the root |
//! | not `.` or `..` | a file-system object store would resolve them as path steps |
//! | no control characters | they break logs, terminals and some object stores |
//! | no Unicode noncharacters (U+FFFE, U+FFFF, U+FDD0..U+FDEF, U+nFFFE/U+nFFFF) | catalog listings end their key ranges with U+10FFFF, so no name may start with it; noncharacters are not meant for interchange anyway |
//! | at most [`MAX_NAME_BYTES`] UTF-8 bytes | one path component on common file systems (`NAME_MAX` = 255) |

use crate::error::{CatalogError, NameKind, NameRule, Result};

/// The longest namespace or stream name, in UTF-8 bytes: one path component on common file
/// systems (ext4, XFS, APFS), since the name is a directory of the compacted root.
pub const MAX_NAME_BYTES: usize = 255;

/// The namespace of every Kafka topic's stream (Appendix A, "Stream identity").
pub const KAFKA_NAMESPACE: &str = "default";

/// The longest Kafka topic name Kafka itself allows.
pub const MAX_KAFKA_TOPIC_BYTES: usize = 249;

/// Checks a namespace name against the rules of this module.
pub fn validate_namespace(name: &str) -> Result<()> {
    validate(NameKind::Namespace, name)
}

/// Checks a stream name against the rules of this module.
pub fn validate_stream_name(name: &str) -> Result<()> {
    validate(NameKind::Stream, name)
}

fn validate(kind: NameKind, name: &str) -> Result<()> {
    let refuse = |rule: NameRule| Err(CatalogError::InvalidName { kind, name: name.to_owned(), rule });
    if name.is_empty() {
        return refuse(NameRule::Empty);
    }
    if name.len() > MAX_NAME_BYTES {
        return refuse(NameRule::TooLong { bytes: name.len(), max: MAX_NAME_BYTES });
    }
    if name == "." || name == ".." {
        return refuse(NameRule::DotSegment);
    }
    for (byte_index, c) in name.char_indices() {
        if c == '/' {
            return refuse(NameRule::ContainsSlash { byte_index });
        }
        if c.is_control() {
            return refuse(NameRule::ControlCharacter { byte_index, code_point: u32::from(c) });
        }
        if is_noncharacter(c) {
            return refuse(NameRule::Noncharacter { byte_index, code_point: u32::from(c) });
        }
    }
    Ok(())
}

/// Unicode noncharacters: U+FDD0..=U+FDEF and the last two code points of every plane.
fn is_noncharacter(c: char) -> bool {
    let cp = u32::from(c);
    (0xFDD0..=0xFDEF).contains(&cp) || (cp & 0xFFFE) == 0xFFFE
}

/// The stream name of one incarnation of a Kafka topic: `{topic}-topic-id-{topic_id}`
/// (Appendix A). A topic deleted and created again gets a new topic ID, hence a new stream
/// identity, so the dropped identity's tombstone never blocks the new incarnation.
///
/// `topic` must be a legal Kafka topic name (ASCII letters, digits, `.`, `_`, `-`; at most
/// 249 bytes; not `.` or `..`), and `topic_id` Kafka's string form of a topic ID (URL-safe
/// Base64 letters). The result must also satisfy the stream-name rules, which bounds the
/// topic to [`MAX_NAME_BYTES`] minus the suffix.
pub fn kafka_stream_name(topic: &str, topic_id: &str) -> Result<String> {
    let legal_kafka_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    let refuse = |detail: String| Err(CatalogError::InvalidArgument(detail));
    if topic.is_empty() || topic == "." || topic == ".." {
        return refuse(format!("Kafka topic name {topic:?} is empty, \".\" or \"..\""));
    }
    if topic.len() > MAX_KAFKA_TOPIC_BYTES {
        return refuse(format!(
            "Kafka topic name is {} bytes, more than {MAX_KAFKA_TOPIC_BYTES}",
            topic.len()
        ));
    }
    if let Some(c) = topic.chars().find(|&c| !legal_kafka_char(c)) {
        return refuse(format!(
            "Kafka topic name {topic:?} contains {c:?}; legal are ASCII letters, digits, '.', '_', '-'"
        ));
    }
    let legal_id_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-');
    if topic_id.is_empty() || !topic_id.chars().all(legal_id_char) {
        return refuse(format!("Kafka topic ID {topic_id:?} is not URL-safe Base64 text"));
    }
    let name = format!("{topic}-topic-id-{topic_id}");
    validate_stream_name(&name)?;
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule_of(result: Result<()>) -> NameRule {
        match result {
            Err(CatalogError::InvalidName { rule, .. }) => rule,
            other => panic!("expected an InvalidName error, got {other:?}"),
        }
    }

    // spec-rule: 135b20f22a [Catalog] In format version 3, a stream namespace MUST NOT contain /.
    #[test]
    fn catalog_namespace_must_not_contain_slash() {
        // [Catalog] In format version 3, a stream namespace MUST NOT contain /.
        assert_eq!(rule_of(validate_namespace("a/b")), NameRule::ContainsSlash { byte_index: 1 });
        assert_eq!(rule_of(validate_namespace("/")), NameRule::ContainsSlash { byte_index: 0 });
    }

    // spec-rule: 20275f9337 [Catalog] In format version 3, a stream name MUST NOT contain /.
    #[test]
    fn catalog_stream_name_must_not_contain_slash() {
        // [Catalog] In format version 3, a stream name MUST NOT contain /.
        assert_eq!(rule_of(validate_stream_name("orders/eu")), NameRule::ContainsSlash { byte_index: 6 });
        assert_eq!(rule_of(validate_stream_name("x/")), NameRule::ContainsSlash { byte_index: 1 });
    }

    #[test]
    fn other_name_rules_name_what_is_wrong() {
        assert_eq!(rule_of(validate_stream_name("")), NameRule::Empty);
        assert_eq!(rule_of(validate_stream_name(".")), NameRule::DotSegment);
        assert_eq!(rule_of(validate_stream_name("..")), NameRule::DotSegment);
        assert_eq!(
            rule_of(validate_stream_name("a\nb")),
            NameRule::ControlCharacter { byte_index: 1, code_point: 0x0A }
        );
        assert_eq!(
            rule_of(validate_stream_name("a\u{7f}")),
            NameRule::ControlCharacter { byte_index: 1, code_point: 0x7F }
        );
        assert_eq!(
            rule_of(validate_stream_name("x\u{10FFFF}")),
            NameRule::Noncharacter { byte_index: 1, code_point: 0x10FFFF }
        );
        assert_eq!(
            rule_of(validate_stream_name("\u{FFFF}")),
            NameRule::Noncharacter { byte_index: 0, code_point: 0xFFFF }
        );
        let long = "n".repeat(MAX_NAME_BYTES + 1);
        assert_eq!(rule_of(validate_stream_name(&long)), NameRule::TooLong { bytes: 256, max: 255 });
        // Bytes, not characters: 128 two-byte characters are 256 bytes.
        assert_eq!(rule_of(validate_namespace(&"é".repeat(128))), NameRule::TooLong { bytes: 256, max: 255 });
    }

    #[test]
    fn ordinary_names_pass() {
        for ok in ["default", "orders-eu.v2", "a", "...", "名前", "with space", &"n".repeat(MAX_NAME_BYTES)]
        {
            validate_stream_name(ok).unwrap();
            validate_namespace(ok).unwrap();
        }
    }

    #[test]
    fn invalid_name_is_invalid_input_and_says_the_rule() {
        let err = validate_namespace("a/b").unwrap_err();
        assert_eq!(err.class(), lakestream_format::ErrorClass::InvalidInput);
        let text = err.to_string();
        assert!(text.contains("namespace") && text.contains("'/'"), "{text}");
    }

    #[test]
    fn kafka_stream_identity_is_topic_and_topic_id() {
        // Appendix A: the stream name is {topic}-topic-id-{topic ID}; a re-created topic has a
        // new topic ID, so its stream is a new identity.
        let first = kafka_stream_name("orders", "AAAAAAAAAAAAAAAAAAAAAQ").unwrap();
        let second = kafka_stream_name("orders", "AAAAAAAAAAAAAAAAAAAAAg").unwrap();
        assert_eq!(first, "orders-topic-id-AAAAAAAAAAAAAAAAAAAAAQ");
        assert_ne!(first, second);
    }

    #[test]
    fn kafka_stream_name_refuses_illegal_topics_and_ids() {
        for (topic, id) in
            [("", "x"), ("..", "x"), ("a b", "x"), ("a/b", "x"), ("t", ""), ("t", "a/b"), ("t", "a=")]
        {
            assert!(
                matches!(kafka_stream_name(topic, id), Err(CatalogError::InvalidArgument(_))),
                "{topic:?} {id:?}"
            );
        }
        // A legal 249-byte topic does not fit the 255-byte stream name once suffixed.
        let err =
            kafka_stream_name(&"t".repeat(MAX_KAFKA_TOPIC_BYTES), "AAAAAAAAAAAAAAAAAAAAAQ").unwrap_err();
        assert!(matches!(err, CatalogError::InvalidName { rule: NameRule::TooLong { .. }, .. }), "{err}");
    }
}
