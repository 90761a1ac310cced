//! Object paths, listing prefixes and store roots.
//!
//! An [`ObjectPath`] names an object relative to a store's root. It is a `/`-separated list
//! of segments with no empty segment, no `.` or `..` segment, no leading or trailing `/` and
//! no control character, so that it maps onto an S3 key and onto a file below a directory
//! without any escaping, and can never climb out of the root.
//!
//! An [`ObjectRoot`] is where a store keeps its objects: a bucket plus an optional key
//! prefix (the spec's "WAL root" and "compacted root" are roots). A store maps the path `p`
//! to the key `{prefix}/{p}` in the bucket.

use std::fmt;

use crate::error::ObjectStoreError;

/// The longest object key S3 accepts, in bytes. Paths (with the root's prefix) must fit.
pub const MAX_KEY_BYTES: usize = 1024;

/// A validated object path, relative to a store's root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectPath(String);

impl ObjectPath {
    /// Validates `path`: non-empty, at most [`MAX_KEY_BYTES`] bytes, no leading or trailing
    /// `/`, no empty segment (`a//b`), no `.` or `..` segment, no control character.
    pub fn new(path: impl Into<String>) -> Result<Self, ObjectStoreError> {
        let path = path.into();
        if path.is_empty() {
            return Err(ObjectStoreError::invalid_path(&path, "the path is empty"));
        }
        if path.len() > MAX_KEY_BYTES {
            return Err(ObjectStoreError::invalid_path(&path, "the path is longer than 1024 bytes"));
        }
        if path.starts_with('/') {
            return Err(ObjectStoreError::invalid_path(&path, "the path starts with '/'"));
        }
        for segment in path.split('/') {
            check_segment(&path, segment)?;
        }
        Ok(ObjectPath(path))
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// This path with one more segment, `{self}/{segment}`.
    pub fn child(&self, segment: &str) -> Result<Self, ObjectStoreError> {
        ObjectPath::new(format!("{}/{segment}", self.0))
    }

    /// The last segment of the path.
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }
}

impl fmt::Display for ObjectPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ObjectPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for ObjectPath {
    type Error = ObjectStoreError;
    fn try_from(path: &str) -> Result<Self, Self::Error> {
        ObjectPath::new(path)
    }
}

fn check_segment(path: &str, segment: &str) -> Result<(), ObjectStoreError> {
    if segment.is_empty() {
        return Err(ObjectStoreError::invalid_path(
            path,
            "the path has an empty segment (a '//' or a trailing '/')",
        ));
    }
    if segment == "." || segment == ".." {
        return Err(ObjectStoreError::invalid_path(path, "the path has a '.' or '..' segment"));
    }
    if segment.chars().any(char::is_control) {
        return Err(ObjectStoreError::invalid_path(path, "the path contains a control character"));
    }
    Ok(())
}

/// A listing prefix: the empty prefix (everything), or text that a path must start with.
///
/// The prefix is not segment-aware, as in S3: `logs/7` matches `logs/7.wal` and `logs/70/a`.
/// Every complete segment (before the last `/`) obeys the [`ObjectPath`] rules; the last,
/// partial segment may be empty (a trailing `/` lists one "directory") or any text without
/// a control character.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ObjectPrefix(String);

impl ObjectPrefix {
    /// The empty prefix, which every path matches.
    pub fn all() -> Self {
        ObjectPrefix(String::new())
    }

    /// Validates a listing prefix.
    pub fn new(prefix: impl Into<String>) -> Result<Self, ObjectStoreError> {
        let prefix = prefix.into();
        if prefix.len() > MAX_KEY_BYTES {
            return Err(ObjectStoreError::invalid_path(&prefix, "the prefix is longer than 1024 bytes"));
        }
        if prefix.starts_with('/') {
            return Err(ObjectStoreError::invalid_path(&prefix, "the prefix starts with '/'"));
        }
        if let Some((complete, last)) = prefix.rsplit_once('/') {
            for segment in complete.split('/') {
                check_segment(&prefix, segment)?;
            }
            if last.chars().any(char::is_control) {
                return Err(ObjectStoreError::invalid_path(
                    &prefix,
                    "the prefix contains a control character",
                ));
            }
        } else if prefix.chars().any(char::is_control) {
            return Err(ObjectStoreError::invalid_path(&prefix, "the prefix contains a control character"));
        }
        Ok(ObjectPrefix(prefix))
    }

    /// The prefix as text (empty for [`ObjectPrefix::all`]).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `path` starts with this prefix.
    pub fn matches(&self, path: &ObjectPath) -> bool {
        path.as_str().starts_with(&self.0)
    }
}

impl From<&ObjectPath> for ObjectPrefix {
    /// The prefix of everything below `path` treated as a directory, `{path}/`.
    fn from(path: &ObjectPath) -> Self {
        ObjectPrefix(format!("{path}/"))
    }
}

impl fmt::Display for ObjectPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a store keeps its objects: a bucket plus an optional key prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectRoot {
    bucket: String,
    prefix: Option<ObjectPath>,
}

impl ObjectRoot {
    /// A root at `prefix` (if any) in `bucket`. The bucket name follows S3's rules: 3 to 63
    /// characters of lower-case letters, digits, `-` and `.`, starting and ending with a
    /// letter or digit.
    pub fn new(bucket: impl Into<String>, prefix: Option<ObjectPath>) -> Result<Self, ObjectStoreError> {
        let bucket = bucket.into();
        let valid_chars =
            bucket.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        let valid_ends = bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
            && bucket.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !(3..=63).contains(&bucket.len()) || !valid_chars || !valid_ends {
            return Err(ObjectStoreError::invalid_path(
                &bucket,
                "a bucket name has 3 to 63 characters of a-z, 0-9, '-' and '.', and starts and ends with a letter or digit",
            ));
        }
        Ok(ObjectRoot { bucket, prefix })
    }

    /// Parses `bucket` or `bucket/key/prefix`.
    pub fn parse(text: &str) -> Result<Self, ObjectStoreError> {
        match text.split_once('/') {
            None => ObjectRoot::new(text, None),
            Some((bucket, prefix)) => ObjectRoot::new(bucket, Some(ObjectPath::new(prefix)?)),
        }
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key prefix, if any.
    pub fn prefix(&self) -> Option<&ObjectPath> {
        self.prefix.as_ref()
    }

    /// The key of `path` in the bucket: `{prefix}/{path}`, or `path` without a prefix.
    /// Fails if the key is longer than [`MAX_KEY_BYTES`].
    pub fn key_of(&self, path: &ObjectPath) -> Result<String, ObjectStoreError> {
        let key = match &self.prefix {
            Some(prefix) => format!("{prefix}/{path}"),
            None => path.as_str().to_owned(),
        };
        if key.len() > MAX_KEY_BYTES {
            return Err(ObjectStoreError::invalid_path(
                &key,
                "the key (root prefix plus path) is longer than 1024 bytes",
            ));
        }
        Ok(key)
    }

    /// The key prefix in the bucket that lists `prefix`: `{root prefix}/{prefix}`.
    pub fn key_prefix_of(&self, prefix: &ObjectPrefix) -> String {
        match &self.prefix {
            Some(root) => format!("{root}/{prefix}"),
            None => prefix.as_str().to_owned(),
        }
    }

    /// The path of a bucket key below this root, or `None` if the key is outside the root or
    /// is not a valid path (a stranger's object in a shared bucket).
    pub fn path_of_key(&self, key: &str) -> Option<ObjectPath> {
        let relative = match &self.prefix {
            Some(prefix) => key.strip_prefix(prefix.as_str())?.strip_prefix('/')?,
            None => key,
        };
        ObjectPath::new(relative).ok()
    }
}

impl fmt::Display for ObjectRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.prefix {
            Some(prefix) => write!(f, "{}/{prefix}", self.bucket),
            None => f.write_str(&self.bucket),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lakestream_format::ErrorClass;

    #[test]
    fn accepts_ordinary_paths() {
        for ok in ["a", "wal/00000001.wal", "7/7-0.parquet", "a/..b/c.", "x y/ü"] {
            assert_eq!(ObjectPath::new(ok).map(|p| p.to_string()), Ok(ok.to_owned()), "{ok}");
        }
    }

    #[test]
    fn rejects_paths_that_escape_or_have_empty_segments() {
        let cases = [
            ("", "empty"),
            ("/a", "starts with '/'"),
            ("a//b", "empty segment"),
            ("a/", "empty segment"),
            ("../a", "'..' segment"),
            ("a/../b", "'..' segment"),
            ("a/./b", "'.' or '..' segment"),
            ("a/\nb", "control character"),
        ];
        for (bad, why) in cases {
            let err = ObjectPath::new(bad).expect_err(bad);
            assert_eq!(err.class(), ErrorClass::InvalidInput);
            assert!(err.to_string().contains(why), "{bad:?}: {err}");
        }
        let long = "a".repeat(MAX_KEY_BYTES + 1);
        assert!(ObjectPath::new(long).is_err());
    }

    #[test]
    fn prefixes_allow_a_partial_last_segment() {
        for ok in ["", "a", "a/", "a/b", "a/b/", "a/.", "a/.."] {
            assert!(ObjectPrefix::new(ok).is_ok(), "{ok}");
        }
        for bad in ["/a", "a//b", "../a", "a/../"] {
            assert!(ObjectPrefix::new(bad).is_err(), "{bad}");
        }
        let prefix = ObjectPrefix::new("logs/7").unwrap();
        assert!(prefix.matches(&ObjectPath::new("logs/7.wal").unwrap()));
        assert!(prefix.matches(&ObjectPath::new("logs/70/a").unwrap()));
        assert!(!prefix.matches(&ObjectPath::new("logs/8").unwrap()));
    }

    #[test]
    fn root_maps_paths_to_keys_and_back() {
        let root = ObjectRoot::parse("my-bucket/tenant/wal").unwrap();
        assert_eq!(root.bucket(), "my-bucket");
        let path = ObjectPath::new("7/a.wal").unwrap();
        assert_eq!(root.key_of(&path).unwrap(), "tenant/wal/7/a.wal");
        assert_eq!(root.path_of_key("tenant/wal/7/a.wal"), Some(path));
        assert_eq!(root.path_of_key("tenant/walrus/x"), None);
        // A stranger's key in a shared bucket that is no valid path is not ours to list.
        assert_eq!(root.path_of_key("tenant/wal/odd//key"), None);
        assert_eq!(root.key_prefix_of(&ObjectPrefix::new("7/").unwrap()), "tenant/wal/7/");
        let bare = ObjectRoot::parse("bucket").unwrap();
        assert_eq!(bare.key_of(&ObjectPath::new("x").unwrap()).unwrap(), "x");
    }

    #[test]
    fn rejects_bad_bucket_names() {
        for bad in ["ab", "Upper", "-lead", "trail-", "under_score", &"b".repeat(64)] {
            assert!(ObjectRoot::new(bad, None).is_err(), "{bad}");
        }
        assert!(ObjectRoot::parse("bucket//x").is_err());
    }
}
