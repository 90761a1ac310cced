//! The HTTP protocol binding: mode detection and binary mode (reference §4).
//!
//! Binary mode maps `datacontenttype` to `Content-Type`, every other attribute to a `ce-`
//! header, and data to the body. Header values are percent-encoded on output (space, `"`,
//! `%` and everything outside U+0021–U+007E, as upper-case `%XY` of the UTF-8 bytes) and
//! decoded on input: an RFC 7230 quoted string is unquoted, then exactly one round of
//! percent-decoding is applied; a malformed escape (`%ZZ`, a trailing `%4`, a lone `%`) and
//! bytes that are not UTF-8 are refused. Raw UTF-8 from senders that do not encode passes
//! through unchanged.
//!
//! **Empty body.** We read an empty body as "no data" (not zero-length data), and write an
//! event without data as an empty body.

use crate::error::{CeError, Result};
use crate::event::{Attribute, CloudEvent, Data, is_json_media_type};

/// The prefix of a binary-mode attribute header.
pub const HEADER_PREFIX: &str = "ce-";

/// How an HTTP message carries its event(s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Attributes in `ce-` headers, data in the body.
    Binary,
    /// One event in an event format in the body.
    Structured,
    /// A batch of events in the body.
    Batch,
}

/// The mode of a message with this `Content-Type`, matched case-insensitively and checking
/// the batch prefix first (it also starts with `application/cloudevents`).
pub fn detect_mode(content_type: Option<&str>) -> Mode {
    let lower = content_type.unwrap_or_default().trim_start().to_ascii_lowercase();
    if lower.starts_with("application/cloudevents-batch") {
        Mode::Batch
    } else if lower.starts_with("application/cloudevents") {
        Mode::Structured
    } else {
        Mode::Binary
    }
}

/// Percent-encodes an attribute value for a binary-mode header (1.0.2 §3.1.3.2).
pub fn encode_header_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\u{21}'..='\u{7e}') && c != '"' && c != '%' {
            out.push(c);
        } else {
            let mut buffer = [0u8; 4];
            for byte in c.encode_utf8(&mut buffer).bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
    }
    out
}

/// Decodes a binary-mode header value: unquotes an RFC 7230 quoted string, applies one round
/// of percent-decoding and checks the result is UTF-8. The error says what was wrong.
pub fn decode_header_value(raw: &[u8]) -> std::result::Result<String, String> {
    let unquoted = match raw {
        [b'"', inner @ .., b'"'] => {
            let mut out = Vec::with_capacity(inner.len());
            let mut bytes = inner.iter();
            while let Some(&byte) = bytes.next() {
                match byte {
                    b'\\' => out.push(*bytes.next().ok_or("the quoted string ends in a lone backslash")?),
                    b'"' => return Err("the quoted string has an unescaped quote inside".into()),
                    other => out.push(other),
                }
            }
            out
        }
        other => other.to_vec(),
    };
    let mut decoded = Vec::with_capacity(unquoted.len());
    let mut index = 0;
    while index < unquoted.len() {
        if unquoted[index] == b'%' {
            let hex = unquoted.get(index + 1..index + 3).and_then(|pair| std::str::from_utf8(pair).ok());
            let byte = hex
                .filter(|pair| pair.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| format!("malformed percent escape at byte {index}"))?;
            decoded.push(byte);
            index += 3;
        } else {
            decoded.push(unquoted[index]);
            index += 1;
        }
    }
    String::from_utf8(decoded).map_err(|error| format!("not UTF-8 after percent-decoding: {error}"))
}

/// Decodes a binary-mode message: its headers in order (names in any case, values as raw
/// bytes) and its body. Headers other than `ce-*` and `Content-Type` are ignored.
///
/// Data: an empty body is no data; a body whose content type declares JSON and that parses as
/// JSON is [`Data::Json`]; a `text/*` body that is UTF-8 is [`Data::Text`]; anything else is
/// [`Data::Binary`]. Extensions are typed String (binary mode carries no types).
pub fn decode_binary<N: AsRef<str>, V: AsRef<[u8]>>(headers: &[(N, V)], body: &[u8]) -> Result<CloudEvent> {
    let mut attributes = Vec::new();
    for (name, value) in headers {
        let name = name.as_ref().to_ascii_lowercase();
        let value = value.as_ref();
        if name == "content-type" {
            let content_type = String::from_utf8(value.to_vec())
                .map_err(|_| CeError::attribute("datacontenttype", "the Content-Type header is not UTF-8"))?;
            attributes.push(Attribute::string("datacontenttype", content_type));
        } else if let Some(attribute) = name.strip_prefix(HEADER_PREFIX) {
            if attribute == "datacontenttype" {
                return Err(CeError::attribute(
                    "datacontenttype",
                    "binary mode carries it in Content-Type; a ce-datacontenttype header must not be present",
                ));
            }
            let decoded =
                decode_header_value(value).map_err(|reason| CeError::attribute(attribute, reason))?;
            attributes.push(Attribute::string(attribute, decoded));
        }
    }
    let content_type = attributes.iter().find(|a| a.name == "datacontenttype").map(|a| a.value.as_str());
    let data = body_to_data(content_type, body);
    CloudEvent::new(attributes, data)
}

/// Classifies a binary-mode body (HTTP or Kafka) by its content type.
pub(crate) fn body_to_data(content_type: Option<&str>, body: &[u8]) -> Option<Data> {
    if body.is_empty() {
        return None;
    }
    let text = std::str::from_utf8(body).ok();
    let data = match (content_type, text) {
        (Some(content_type), Some(text))
            if is_json_media_type(content_type)
                && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() =>
        {
            Data::Json(text.to_owned())
        }
        (Some(content_type), Some(text))
            if content_type.trim_start().to_ascii_lowercase().starts_with("text/") =>
        {
            Data::Text(text.to_owned())
        }
        _ => Data::Binary(body.to_vec()),
    };
    Some(data)
}

/// Encodes an event in binary mode: headers in attribute order (`content-type` for
/// `datacontenttype`, `ce-{name}` with a percent-encoded value for the others) and the body.
/// JSON data of an event without `datacontenttype` gets an explicit
/// `content-type: application/json`, since the JSON format's implied type must be written
/// out when translating.
pub fn encode_binary(event: &CloudEvent) -> (Vec<(String, String)>, Vec<u8>) {
    let mut headers: Vec<(String, String)> = event
        .attributes()
        .iter()
        .map(|attribute| {
            if attribute.name == "datacontenttype" {
                ("content-type".to_owned(), attribute.value.clone())
            } else {
                (format!("{HEADER_PREFIX}{}", attribute.name), encode_header_value(&attribute.value))
            }
        })
        .collect();
    if matches!(event.data(), Some(Data::Json(_))) && event.get("datacontenttype").is_none() {
        headers.push(("content-type".to_owned(), "application/json".to_owned()));
    }
    let body = event.data().map(|data| data.as_bytes().to_vec()).unwrap_or_default();
    (headers, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal_headers() -> Vec<(&'static str, &'static [u8])> {
        vec![("ce-specversion", b"1.0"), ("ce-id", b"1"), ("ce-source", b"/s"), ("ce-type", b"t")]
    }

    #[test]
    fn percent_encoding_vectors_of_the_reference() {
        for (value, encoded) in [
            ("Euro € 😀", "Euro%20%E2%82%AC%20%F0%9F%98%80"),
            ("a b", "a%20b"),
            ("100%", "100%25"),
            ("say \"hi\"", "say%20%22hi%22"),
            ("é", "%C3%A9"),
            ("tab\there", "tab%09here"),
            ("~!/:?#[]@$&'()*+,;=", "~!/:?#[]@$&'()*+,;="),
        ] {
            assert_eq!(encode_header_value(value), encoded);
            assert_eq!(decode_header_value(encoded.as_bytes()).as_deref(), Ok(value));
        }
    }

    #[test]
    fn percent_decoding_accepts_lower_case_over_encoding_quotes_and_raw_utf8() {
        for (raw, decoded) in [
            (&b"%c3%a9"[..], "é"),
            (b"%41", "A"),
            (b"%2Fgithub%2Facme", "/github/acme"),
            (br#""a \"b\"""#, "a \"b\""),
            ("é raw".as_bytes(), "é raw"),
            (b"%2541", "%41"), // exactly one round
        ] {
            assert_eq!(decode_header_value(raw).as_deref(), Ok(decoded));
        }
    }

    #[test]
    fn percent_decoding_refuses_invalid_utf8_and_malformed_escapes() {
        for raw in [&b"%C0%A0"[..], b"%ZZ", b"%4", b"100%", b"%", b"\xff", br#""a\""#, br#""a"b""#] {
            assert!(decode_header_value(raw).is_err(), "{raw:?}");
        }
    }

    #[test]
    fn header_that_fails_decoding_names_its_attribute() {
        let mut headers = minimal_headers();
        headers.push(("ce-subject", b"%C0%A0"));
        assert_eq!(decode_binary(&headers, b"").unwrap_err().attribute_name(), Some("subject"));
    }

    #[test]
    fn ce_datacontenttype_header_is_refused() {
        let mut headers = minimal_headers();
        headers.push(("ce-datacontenttype", b"text/plain"));
        assert_eq!(decode_binary(&headers, b"x").unwrap_err().attribute_name(), Some("datacontenttype"));
    }

    #[test]
    fn header_names_are_case_insensitive_and_other_headers_ignored() {
        let headers = [
            ("CE-SpecVersion", &b"1.0"[..]),
            ("Ce-Id", b"1"),
            ("ce-source", b"%2Fs"),
            ("ce-type", b"t"),
            ("Content-Type", b"text/plain"),
            ("user-agent", b"curl"),
        ];
        let event = decode_binary(&headers, b"hi").unwrap();
        assert_eq!(event.source(), "/s");
        assert_eq!(event.get("datacontenttype"), Some("text/plain"));
        assert_eq!(event.data(), Some(&Data::Text("hi".into())));
        assert_eq!(event.attributes().len(), 5);
    }

    #[test]
    fn binary_mode_round_trips_byte_for_byte() {
        let headers: Vec<(String, String)> = [
            ("ce-specversion", "1.0"),
            ("ce-id", "1"),
            ("ce-source", "/github/acme/repo"),
            ("ce-type", "com.github.push"),
            ("content-type", "application/octet-stream"),
            ("ce-time", "2018-04-05T18:31:00.10+01:00"),
            ("ce-note", "Euro%20%E2%82%AC%20%F0%9F%98%80"),
            ("ce-tracestate", ""),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect();
        let body = vec![0u8, 159, 146, 150];
        let event = decode_binary(&headers, &body).unwrap();
        assert_eq!(encode_binary(&event), (headers, body));
    }

    #[test]
    fn empty_body_means_no_data() {
        let event = decode_binary(&minimal_headers(), b"").unwrap();
        assert_eq!(event.data(), None);
        assert!(encode_binary(&event).1.is_empty());
    }

    #[test]
    fn json_body_is_json_data_and_implied_content_type_is_written() {
        let mut headers = minimal_headers();
        headers.push(("content-type", b"application/json; charset=utf-8"));
        let event = decode_binary(&headers, br#" {"a": 1} "#).unwrap();
        assert_eq!(event.data(), Some(&Data::Json(r#" {"a": 1} "#.into())));
        // A JSON-format event with string data and no datacontenttype (spec example).
        let structured = crate::json::decode_event(
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":"I'm just a string"}"#,
        )
        .unwrap();
        let (headers, body) = encode_binary(&structured);
        assert_eq!(body, br#""I'm just a string""#);
        assert!(headers.contains(&("content-type".to_owned(), "application/json".to_owned())));
    }

    #[test]
    fn json_format_examples_re_encode_as_the_spec_shows() {
        // Spec §3.3 examples: data_base64 becomes the decoded bytes with the event's
        // datacontenttype; an XML string becomes the raw XML text.
        let base64 = crate::json::decode_event(
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"application/octet-stream","data_base64":"AAH/"}"#,
        )
        .unwrap();
        let (headers, body) = encode_binary(&base64);
        assert_eq!(body, [0, 1, 255]);
        assert!(headers.contains(&("content-type".to_owned(), "application/octet-stream".to_owned())));
        let xml = crate::json::decode_event(
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"application/xml","data":"<much wow=\"xml\"/>"}"#,
        )
        .unwrap();
        let (headers, body) = encode_binary(&xml);
        assert_eq!(body, br#"<much wow="xml"/>"#);
        assert!(headers.contains(&("content-type".to_owned(), "application/xml".to_owned())));
    }

    #[test]
    fn mode_detection_checks_batch_first_and_ignores_case() {
        assert_eq!(detect_mode(Some("application/cloudevents-batch+json")), Mode::Batch);
        assert_eq!(detect_mode(Some("Application/CloudEvents+json; charset=UTF-8")), Mode::Structured);
        assert_eq!(detect_mode(Some("application/json")), Mode::Binary);
        assert_eq!(detect_mode(None), Mode::Binary);
    }
}
