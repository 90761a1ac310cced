//! The event model and its validation (CloudEvents 1.0.2 §3, the type system, and the
//! 1.0.3-wip naming rules we adopt).

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::error::{CeError, Result};
use crate::time;

/// The only `specversion` this codec accepts.
pub const SPEC_VERSION: &str = "1.0";

/// The CloudEvents type of an attribute. Every value is kept as its canonical string; the type
/// says how a format that has typed values (JSON, protobuf) writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttrType {
    /// `true` or `false`.
    Boolean,
    /// A signed 32-bit integer.
    Integer,
    /// Unicode text.
    String,
    /// Bytes, canonically standard Base64 with padding.
    Binary,
    /// An absolute URI.
    Uri,
    /// A URI reference.
    UriRef,
    /// An RFC 3339 timestamp.
    Timestamp,
}

impl AttrType {
    /// The type's name as written in the `lakestream_ce_types` Kafka header.
    pub fn name(self) -> &'static str {
        match self {
            AttrType::Boolean => "boolean",
            AttrType::Integer => "integer",
            AttrType::String => "string",
            AttrType::Binary => "binary",
            AttrType::Uri => "uri",
            AttrType::UriRef => "urireference",
            AttrType::Timestamp => "timestamp",
        }
    }

    /// The type named `name` (see [`AttrType::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        [
            AttrType::Boolean,
            AttrType::Integer,
            AttrType::String,
            AttrType::Binary,
            AttrType::Uri,
            AttrType::UriRef,
            AttrType::Timestamp,
        ]
        .into_iter()
        .find(|kind| kind.name() == name)
    }
}

/// The fixed type of a core context attribute, or `None` for an extension.
pub fn core_type(name: &str) -> Option<AttrType> {
    match name {
        "specversion" | "id" | "type" | "subject" | "datacontenttype" => Some(AttrType::String),
        "source" => Some(AttrType::UriRef),
        "dataschema" => Some(AttrType::Uri),
        "time" => Some(AttrType::Timestamp),
        _ => None,
    }
}

/// One context attribute: its name, its value exactly as it arrived (after the format's own
/// unescaping, e.g. JSON string escapes or HTTP percent-decoding), and its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    /// The attribute name: lower-case ASCII letters and digits.
    pub name: String,
    /// The canonical string of the value, as received.
    pub value: String,
    /// The value's CloudEvents type.
    pub kind: AttrType,
}

impl Attribute {
    /// An attribute of the given type.
    pub fn new(name: impl Into<String>, value: impl Into<String>, kind: AttrType) -> Self {
        Attribute { name: name.into(), value: value.into(), kind }
    }

    /// A core attribute with its fixed type, or an extension typed String.
    pub fn string(name: impl Into<String>, value: impl Into<String>) -> Self {
        let name = name.into();
        let kind = core_type(&name).unwrap_or(AttrType::String);
        Attribute { name, value: value.into(), kind }
    }
}

/// An event's data, in the form it arrived in, so each format writes it back unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    /// A JSON value, kept as its exact JSON text (JSON `data` with a JSON content type; an
    /// HTTP or Kafka body that declares JSON and parses as JSON).
    Json(String),
    /// Text that is not JSON (JSON `data` string with a non-JSON content type; protobuf
    /// `text_data`).
    Text(String),
    /// Bytes (JSON `data_base64`; protobuf `binary_data`; other binary-mode bodies).
    Binary(Vec<u8>),
}

impl Data {
    /// The data as the bytes of a binary-mode body or Kafka record value.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Data::Json(text) | Data::Text(text) => text.as_bytes(),
            Data::Binary(bytes) => bytes,
        }
    }

    /// The name of the data's form, as written in the `lakestream_ce_types` Kafka header.
    pub(crate) fn form_name(&self) -> &'static str {
        match self {
            Data::Json(_) => "json",
            Data::Text(_) => "text",
            Data::Binary(_) => "binary",
        }
    }
}

/// A validated CloudEvent: its attributes in arrival order and its optional data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudEvent {
    attributes: Vec<Attribute>,
    data: Option<Data>,
}

impl CloudEvent {
    /// Validates the attributes and data and builds the event. Errors name the attribute
    /// that breaks a rule.
    pub fn new(attributes: Vec<Attribute>, data: Option<Data>) -> Result<Self> {
        validate(&attributes)?;
        if let Some(Data::Json(text)) = &data
            && serde_json::from_str::<serde::de::IgnoredAny>(text).is_err()
        {
            return Err(CeError::attribute("data", "JSON data is not valid JSON text"));
        }
        Ok(CloudEvent { attributes, data })
    }

    /// The attributes, in arrival order.
    pub fn attributes(&self) -> &[Attribute] {
        &self.attributes
    }

    /// The attribute named `name`.
    pub fn attribute(&self, name: &str) -> Option<&Attribute> {
        self.attributes.iter().find(|attribute| attribute.name == name)
    }

    /// The value of the attribute named `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.attribute(name).map(|attribute| attribute.value.as_str())
    }

    /// The `id` attribute.
    pub fn id(&self) -> &str {
        self.required("id")
    }

    /// The `source` attribute.
    pub fn source(&self) -> &str {
        self.required("source")
    }

    /// The `type` attribute.
    pub fn event_type(&self) -> &str {
        self.required("type")
    }

    /// The data, if any.
    pub fn data(&self) -> Option<&Data> {
        self.data.as_ref()
    }

    /// The deduplication key of the event; see [`dedup_key`].
    pub fn dedup_key(&self) -> [u8; 32] {
        dedup_key(self.source(), self.id())
    }

    fn required(&self, name: &str) -> &str {
        // `validate` guarantees the required attributes exist.
        self.get(name).unwrap_or_default()
    }
}

/// The ingest deduplication key: SHA-256 of the UTF-8 `source`, a 0x00 byte and the UTF-8
/// `id`, with the strings exactly as received. 0x00 cannot occur in either (control characters
/// are not valid in Strings), so the pair is unambiguous.
pub fn dedup_key(source: &str, id: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(source.as_bytes());
    hasher.update([0u8]);
    hasher.update(id.as_bytes());
    hasher.finalize().into()
}

/// Checks an attribute name: one or more of `a-z0-9`, not `data` (1.0.2 §3.1.1 and
/// 1.0.3-wip).
pub fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(CeError::attribute(name, "an attribute name must not be empty"));
    }
    if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
        return Err(CeError::attribute(
            name,
            "an attribute name must be lower-case ASCII letters and digits only",
        ));
    }
    if name == "data" {
        return Err(CeError::attribute(name, "`data` is not a legal attribute name"));
    }
    Ok(())
}

fn validate(attributes: &[Attribute]) -> Result<()> {
    for (index, attribute) in attributes.iter().enumerate() {
        let name = attribute.name.as_str();
        check_name(name)?;
        if attributes[..index].iter().any(|earlier| earlier.name == name) {
            return Err(CeError::attribute(name, "the attribute appears more than once"));
        }
        if let Some(expected) = core_type(name)
            && expected != attribute.kind
        {
            return Err(CeError::attribute(
                name,
                format!("must have type {}, not {}", expected.name(), attribute.kind.name()),
            ));
        }
        check_value(attribute)?;
    }
    let find = |name: &str| attributes.iter().find(|attribute| attribute.name == name);
    match find("specversion") {
        None => return Err(CeError::attribute("specversion", "the required attribute is missing")),
        Some(attribute) if attribute.value != SPEC_VERSION => {
            return Err(CeError::attribute(
                "specversion",
                format!("{:?} is not a supported version (only {SPEC_VERSION:?})", attribute.value),
            ));
        }
        Some(_) => {}
    }
    for required in ["id", "source", "type"] {
        match find(required) {
            None => return Err(CeError::attribute(required, "the required attribute is missing")),
            Some(attribute) if attribute.value.is_empty() => {
                return Err(CeError::attribute(required, "must not be empty"));
            }
            Some(_) => {}
        }
    }
    // Optional attributes that, when present, must not be empty; partitionkey's own
    // extension specification demands a non-empty value.
    for non_empty in ["subject", "dataschema", "datacontenttype", "partitionkey"] {
        if find(non_empty).is_some_and(|attribute| attribute.value.is_empty()) {
            return Err(CeError::attribute(non_empty, "must not be empty when present"));
        }
    }
    if let Some(content_type) = find("datacontenttype") {
        check_content_type(&content_type.value)?;
    }
    Ok(())
}

/// Checks a `datacontenttype` value: an RFC 2046 media type. Codecs that interpret `data` by
/// its content type call this first, so a bad content type is reported as itself rather than
/// as data that does not fit it.
pub(crate) fn check_content_type(value: &str) -> Result<()> {
    if !is_media_type(value) {
        return Err(CeError::attribute(
            "datacontenttype",
            format!("{value:?} is not an RFC 2046 media type (type/subtype[;param=value])"),
        ));
    }
    Ok(())
}

/// Checks a value against the rules of its type.
fn check_value(attribute: &Attribute) -> Result<()> {
    let name = attribute.name.as_str();
    let value = attribute.value.as_str();
    if let Some(bad) = value.chars().find(|c| is_forbidden_char(*c)) {
        return Err(CeError::attribute(
            name,
            format!("contains U+{:04X}, which a CloudEvents String must not contain", u32::from(bad)),
        ));
    }
    let ok = match attribute.kind {
        AttrType::Boolean => value == "true" || value == "false",
        AttrType::Integer => is_canonical_int32(value),
        AttrType::String | AttrType::UriRef => true,
        AttrType::Binary => base64::engine::general_purpose::STANDARD.decode(value).is_ok(),
        AttrType::Uri => value.is_empty() || is_absolute_uri(value),
        AttrType::Timestamp => time::parse_rfc3339(value).is_some(),
    };
    if ok {
        Ok(())
    } else {
        Err(CeError::attribute(name, format!("{value:?} is not a valid {}", describe(attribute.kind))))
    }
}

fn describe(kind: AttrType) -> &'static str {
    match kind {
        AttrType::Boolean => "Boolean (true or false)",
        AttrType::Integer => "Integer (a signed 32-bit decimal without fraction or exponent)",
        AttrType::String => "String",
        AttrType::Binary => "Binary (standard Base64 with padding)",
        AttrType::Uri => "absolute URI",
        AttrType::UriRef => "URI reference",
        AttrType::Timestamp => "RFC 3339 timestamp",
    }
}

/// Control characters and Unicode noncharacters, which a CloudEvents String must not hold.
fn is_forbidden_char(c: char) -> bool {
    let code = u32::from(c);
    code <= 0x1F
        || (0x7F..=0x9F).contains(&code)
        || (0xFDD0..=0xFDEF).contains(&code)
        || (code & 0xFFFE) == 0xFFFE
}

/// An optional `-` and decimal digits, within the signed 32-bit range.
pub(crate) fn is_canonical_int32(value: &str) -> bool {
    let digits = value.strip_prefix('-').unwrap_or(value);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && value.parse::<i32>().is_ok()
}

/// RFC 3986 §4.3 absolute-URI: a scheme, `:`, and no fragment.
fn is_absolute_uri(value: &str) -> bool {
    let Some((scheme, rest)) = value.split_once(':') else {
        return false;
    };
    let mut scheme_chars = scheme.chars();
    let scheme_ok = scheme_chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && scheme_chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    scheme_ok && !rest.contains('#') && !value.chars().any(|c| c.is_whitespace())
}

/// RFC 2046 / RFC 7231 media type: `type/subtype` tokens and `;name=value` parameters, where
/// a value is a token or a quoted string.
pub(crate) fn is_media_type(value: &str) -> bool {
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    if !is_token(kind) || !is_token(subtype) {
        return false;
    }
    parts.all(|parameter| {
        let Some((name, value)) = parameter.trim().split_once('=') else {
            return false;
        };
        let quoted = value.len() >= 2 && value.starts_with('"') && value.ends_with('"');
        is_token(name) && (is_token(value) || quoted)
    })
}

fn is_token(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether a media type declares JSON: `*/json` or `*/*+json`, parameters ignored.
pub fn is_json_media_type(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    match essence.split_once('/') {
        Some((_, subtype)) => subtype == "json" || subtype.ends_with("+json"),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal() -> Vec<Attribute> {
        vec![
            Attribute::string("specversion", "1.0"),
            Attribute::string("id", "minimal"),
            Attribute::string("type", "io.cloudevents.test"),
            Attribute::string("source", "https://cloudevents.io"),
        ]
    }

    fn with(extra: Attribute) -> Result<CloudEvent> {
        let mut attributes = minimal();
        attributes.push(extra);
        CloudEvent::new(attributes, None)
    }

    fn rejected_attribute(result: Result<CloudEvent>) -> String {
        match result {
            Err(error) => error.attribute_name().map(str::to_owned).unwrap_or_else(|| format!("{error}")),
            Ok(event) => panic!("accepted {event:?}"),
        }
    }

    #[test]
    fn dedup_key_matches_reference_vectors() {
        // Reference §9: SHA-256(source ‖ 0x00 ‖ id).
        assert_eq!(
            hex::encode(dedup_key("https://cloudevents.io", "minimal")),
            "3cfbb162df17385e2f77211edcb38280037be0aafccb634a1cab229b68bfd62a"
        );
        assert_eq!(
            hex::encode(dedup_key("/github/acme/repo", "1")),
            "6630009fc315d0d1f8ce2fae2ad7af91d043a8b9a646be5862b53518ede29315"
        );
    }

    #[test]
    fn specversion_other_than_1_0_is_refused() {
        let mut attributes = minimal();
        attributes[0].value = "0.3".into();
        assert_eq!(rejected_attribute(CloudEvent::new(attributes, None)), "specversion");
    }

    #[test]
    fn each_required_attribute_missing_or_empty_is_named() {
        for required in ["specversion", "id", "source", "type"] {
            let missing: Vec<_> = minimal().into_iter().filter(|a| a.name != required).collect();
            assert_eq!(rejected_attribute(CloudEvent::new(missing, None)), required);
            let mut empty = minimal();
            empty.iter_mut().filter(|a| a.name == required).for_each(|a| a.value.clear());
            assert_eq!(rejected_attribute(CloudEvent::new(empty, None)), required);
        }
    }

    #[test]
    fn attribute_names_must_be_lowercase_letters_and_digits_and_not_data() {
        for bad in ["MyExtension", "my.extension", "my_ext", "my-ext", "", "data", "é"] {
            assert_eq!(rejected_attribute(with(Attribute::string(bad, "x"))), bad);
        }
        assert!(with(Attribute::string("ext1", "x")).is_ok());
    }

    #[test]
    fn duplicate_attribute_is_refused() {
        assert_eq!(rejected_attribute(with(Attribute::string("id", "again"))), "id");
    }

    #[test]
    fn core_attribute_with_the_wrong_type_is_refused() {
        assert_eq!(rejected_attribute(with(Attribute::new("time", "5", AttrType::Integer))), "time");
        assert_eq!(rejected_attribute(with(Attribute::new("subject", "true", AttrType::Boolean))), "subject");
    }

    #[test]
    fn optional_core_attributes_must_not_be_empty_and_must_be_well_formed() {
        for name in ["subject", "dataschema", "datacontenttype"] {
            assert_eq!(rejected_attribute(with(Attribute::string(name, ""))), name);
        }
        assert_eq!(rejected_attribute(with(Attribute::string("datacontenttype", "xyz"))), "datacontenttype");
        assert_eq!(rejected_attribute(with(Attribute::string("dataschema", "/relative"))), "dataschema");
        assert!(with(Attribute::string("datacontenttype", "text/plain; charset=\"utf-8\"")).is_ok());
        assert!(with(Attribute::string("dataschema", "urn:lakestream:proto:Foo")).is_ok());
    }

    #[test]
    fn empty_extension_is_accepted_except_partitionkey() {
        assert!(with(Attribute::string("tracestate", "")).is_ok());
        assert_eq!(rejected_attribute(with(Attribute::string("partitionkey", ""))), "partitionkey");
    }

    #[test]
    fn typed_values_are_checked() {
        for (kind, bad) in [
            (AttrType::Integer, "2147483648"),
            (AttrType::Integer, "1.5"),
            (AttrType::Integer, "1e3"),
            (AttrType::Boolean, "True"),
            (AttrType::Binary, "TWE"),
            (AttrType::Timestamp, "lunchtime"),
        ] {
            assert_eq!(rejected_attribute(with(Attribute::new("ext", bad, kind))), "ext", "{kind:?} {bad}");
        }
        assert!(with(Attribute::new("ext", "-2147483648", AttrType::Integer)).is_ok());
    }

    #[test]
    fn control_characters_and_noncharacters_are_refused() {
        for bad in ["a\u{0}b", "a\u{1f}", "\u{7f}", "\u{9f}", "\u{fdd0}", "\u{fffe}", "\u{1ffff}"] {
            assert_eq!(rejected_attribute(with(Attribute::string("ext", bad))), "ext", "{bad:?}");
        }
    }

    #[test]
    fn json_media_types_are_recognised() {
        for json in [
            "application/json",
            "text/json; charset=utf-8",
            "application/cloudevents+json",
            "APPLICATION/JSON",
        ] {
            assert!(is_json_media_type(json), "{json}");
        }
        for other in ["text/plain", "application/xml", "application/jsonx", "json"] {
            assert!(!is_json_media_type(other), "{other}");
        }
    }
}
