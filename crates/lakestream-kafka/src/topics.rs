//! Kafka topics as Lakestream streams, by the spec's Kafka binding: each incarnation of a
//! topic is the stream `default/{topic}-topic-id-{topic ID}`, its partitions the stream's
//! partitions. A topic is found by listing the streams of `default` whose names start with
//! `{topic}-topic-id-`; streams there that do not follow the binding are not topics.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use lakestream_format::kafka::{self as binding, NAMESPACE, TOPIC_ID_SEPARATOR};
use lakestream_service::TokenSource;
use lakestream_service::api::Stream;
use lakestream_service::api::{Api, ApiError, ApiResult, ErrorKind};
use lakestream_service::auth::Caller;
use uuid::Uuid;

/// One live topic incarnation.
#[derive(Debug, Clone)]
pub(crate) struct Topic {
    /// The topic name.
    pub name: String,
    /// The Kafka topic ID.
    pub id: Uuid,
    /// The stream that stores it, in [`NAMESPACE`].
    pub stream: String,
    /// Its partition count.
    pub partitions: usize,
}

/// Streams listed per catalog page while looking for topics.
const PAGE: usize = 1000;

/// How long a topic resolved for produce is used without looking again.
pub(crate) const TOPIC_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// The topics produce requests named recently. Finding a topic lists the streams of
/// `default` (a metadata scan); without the cache every group of batches a partition receives
/// would repeat it before the service looks the stream up again. A stale entry is harmless:
/// the service refuses an append to a dropped stream (NotFound), whereupon the entry is
/// forgotten and the client's retry finds the topic anew; a partition beyond the cached count
/// is looked up afresh before it is refused. Entries also go when this process deletes,
/// creates or grows the topic, and after [`TOPIC_CACHE_TTL`].
#[derive(Debug)]
pub(crate) struct TopicCache {
    ttl: std::time::Duration,
    entries: std::sync::Mutex<std::collections::HashMap<String, (Topic, tokio::time::Instant)>>,
}

impl TopicCache {
    pub(crate) fn new(ttl: std::time::Duration) -> Self {
        TopicCache { ttl, entries: std::sync::Mutex::default() }
    }

    fn entries(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (Topic, tokio::time::Instant)>> {
        // A panic while holding the lock cannot leave the map half-changed.
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The topic `name`, if it was resolved within the TTL.
    pub(crate) fn get(&self, name: &str) -> Option<Topic> {
        let mut entries = self.entries();
        match entries.get(name) {
            Some((topic, at)) if at.elapsed() < self.ttl => Some(topic.clone()),
            Some(_) => {
                entries.remove(name);
                None
            }
            None => None,
        }
    }

    /// Remembers a topic just resolved.
    pub(crate) fn insert(&self, topic: &Topic) {
        self.entries().insert(topic.name.clone(), (topic.clone(), tokio::time::Instant::now()));
    }

    /// Forgets the topic `name` (this process changed it).
    pub(crate) fn forget(&self, name: &str) {
        self.entries().remove(name);
    }

    /// Forgets the topic stored in `stream` (the stream is gone).
    pub(crate) fn forget_stream(&self, stream: &str) {
        self.entries().retain(|_, (topic, _)| topic.stream != stream);
    }
}

fn topic_of(stream: &Stream) -> Option<Topic> {
    let incarnation = binding::parse_stream_name(&stream.name).ok()?;
    let bytes = URL_SAFE_NO_PAD.decode(&incarnation.topic_id).ok()?;
    let id = Uuid::from_slice(&bytes).ok()?;
    Some(Topic {
        name: incarnation.topic,
        id,
        stream: stream.name.clone(),
        partitions: stream.partition_count(),
    })
}

/// A namespace that does not exist yet holds no topic.
fn none_when_missing<T: Default>(result: ApiResult<T>) -> ApiResult<T> {
    match result {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(T::default()),
        other => other,
    }
}

/// The live incarnation of `name`, if any. Should two exist (two processes created the topic
/// at once), the one whose stream name sorts first is the topic.
pub(crate) async fn find(api: &Api, caller: &Caller, name: &str) -> ApiResult<Option<Topic>> {
    let prefix = format!("{name}{TOPIC_ID_SEPARATOR}");
    let mut after = prefix.clone();
    loop {
        let page = match api.list_streams(caller, NAMESPACE, Some(&after), Some(PAGE)).await {
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            // A prefix that is not a legal stream name (too long, say) names no topic.
            Err(e) if e.kind() == ErrorKind::InvalidArgument => return Ok(None),
            other => other?,
        };
        for stream in &page.items {
            if !stream.name.starts_with(&prefix) {
                return Ok(None);
            }
            if let Some(topic) = topic_of(stream).filter(|t| t.name == name) {
                return Ok(Some(topic));
            }
        }
        match page.next_page {
            Some(next) => after = next,
            None => return Ok(None),
        }
    }
}

/// Every live topic, in name order (the first incarnation of a name only).
pub(crate) async fn list(api: &Api, caller: &Caller) -> ApiResult<Vec<Topic>> {
    let mut topics: BTreeMap<String, Topic> = BTreeMap::new();
    let mut after: Option<String> = None;
    loop {
        let page = none_when_missing(
            api.list_streams(caller, NAMESPACE, after.as_deref(), Some(PAGE)).await.map(Some),
        )?;
        let Some(page) = page else { break };
        for topic in page.items.iter().filter_map(topic_of) {
            topics.entry(topic.name.clone()).or_insert(topic);
        }
        match page.next_page {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    Ok(topics.into_values().collect())
}

/// A new topic ID from `tokens`, in Kafka's rules: never the nil UUID, and (as Kafka's own
/// `Uuid.randomUuid`) never one whose string form starts with `-`; also never one whose
/// string form holds the binding's separator.
fn new_topic_id(tokens: &dyn TokenSource) -> ApiResult<(Uuid, String)> {
    for _ in 0..16 {
        let token = tokens.new_token();
        let id = Uuid::parse_str(&token)
            .map_err(|e| ApiError::new(ErrorKind::Internal, format!("token {token:?} is not a UUID: {e}")))?;
        let text = URL_SAFE_NO_PAD.encode(id.as_bytes());
        if !id.is_nil() && !text.starts_with('-') && !text.contains(TOPIC_ID_SEPARATOR) {
            return Ok((id, text));
        }
    }
    Err(ApiError::new(ErrorKind::Internal, "no usable topic ID in 16 draws"))
}

/// Creates a topic of `partitions` partitions. Fails with `AlreadyExists` when a live
/// incarnation exists, and `InvalidArgument` for an illegal topic name.
pub(crate) async fn create(
    api: &Api,
    caller: &Caller,
    tokens: &dyn TokenSource,
    name: &str,
    partitions: u32,
) -> ApiResult<Topic> {
    check_name(name)?;
    if find(api, caller, name).await?.is_some() {
        return Err(ApiError::new(ErrorKind::AlreadyExists, format!("topic {name:?} already exists")));
    }
    let (id, id_text) = new_topic_id(tokens)?;
    let stream = binding::stream_name(name, &id_text).map_err(|e| ApiError::invalid(e.to_string()))?;
    // The Kafka binding's topic properties (spec Appendix A): the stream's compacted files
    // carry the Kafka identifiers, and its entries must be complete record batches.
    let properties = lakestream_format::kafka::topic_stream_properties(name);
    let created =
        match api.create_stream(caller, NAMESPACE, &stream, Some(partitions), properties.clone()).await {
            // The binding's namespace (made at start) was deleted: make it again.
            Err(e) if e.kind() == ErrorKind::NotFound => {
                match api.create_namespace(caller, NAMESPACE, BTreeMap::new()).await {
                    Err(e) if e.kind() != ErrorKind::AlreadyExists => return Err(e),
                    _ => {}
                }
                api.create_stream(caller, NAMESPACE, &stream, Some(partitions), properties).await?
            }
            created => created?,
        };
    Ok(Topic { name: name.to_owned(), id, stream, partitions: created.partition_count() })
}

/// Checks a topic name by Kafka's rules (and the stream-name length the binding leaves).
pub(crate) fn check_name(name: &str) -> ApiResult<()> {
    // Any well-formed ID checks the name part; the real one is drawn later.
    binding::stream_name(name, "AAAAAAAAAAAAAAAAAAAAAA").map_err(|e| ApiError::invalid(e.to_string()))?;
    if name == "." || name == ".." {
        return Err(ApiError::invalid(format!("topic name {name:?} is not allowed")));
    }
    Ok(())
}

/// Drops a topic's stream.
pub(crate) async fn delete(api: &Api, caller: &Caller, topic: &Topic) -> ApiResult<()> {
    api.drop_stream(caller, NAMESPACE, &topic.stream).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use lakestream_service::SeededTokens;

    fn topic(name: &str, stream: &str) -> Topic {
        Topic { name: name.into(), id: Uuid::nil(), stream: stream.into(), partitions: 3 }
    }

    #[tokio::test(start_paused = true)]
    async fn cached_topics_expire_and_are_forgotten_by_name_and_stream() {
        let cache = TopicCache::new(TOPIC_CACHE_TTL);
        assert!(cache.get("orders").is_none());
        cache.insert(&topic("orders", "orders-topic-id-A"));
        cache.insert(&topic("users", "users-topic-id-B"));
        assert_eq!(cache.get("orders").unwrap().stream, "orders-topic-id-A");
        tokio::time::advance(TOPIC_CACHE_TTL - std::time::Duration::from_millis(1)).await;
        assert!(cache.get("orders").is_some(), "fresh within the TTL");
        tokio::time::advance(std::time::Duration::from_millis(1)).await;
        assert!(cache.get("orders").is_none(), "expired at the TTL");
        cache.insert(&topic("orders", "orders-topic-id-A"));
        cache.insert(&topic("users", "users-topic-id-B"));
        cache.forget_stream("orders-topic-id-A");
        assert!(cache.get("orders").is_none(), "its stream is gone");
        assert!(cache.get("users").is_some(), "another topic stays");
        cache.forget("users");
        assert!(cache.get("users").is_none());
    }

    #[test]
    fn topic_ids_follow_kafka_rules() {
        let tokens = SeededTokens::new(7);
        for _ in 0..200 {
            let (id, text) = new_topic_id(&tokens).unwrap();
            assert_eq!(text.len(), 22);
            assert!(!text.starts_with('-'));
            assert_eq!(URL_SAFE_NO_PAD.decode(&text).unwrap(), id.as_bytes());
            binding::stream_name("t", &text).unwrap();
        }
    }

    #[test]
    fn illegal_topic_names_are_refused() {
        assert!(check_name("ok.topic_1-x").is_ok());
        for bad in ["", ".", "..", "has space", "slash/", &"x".repeat(250)] {
            assert_eq!(check_name(bad).unwrap_err().kind(), ErrorKind::InvalidArgument, "{bad:?}");
        }
    }
}
