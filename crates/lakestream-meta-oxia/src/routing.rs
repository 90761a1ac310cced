//! Shard routing (oxia.md §4–§5): the hash of a partition key, the shard map built from a
//! `ShardAssignments` message, and the lookup of the shard that owns a hash.
//!
//! Every `ShardAssignments` message is the complete assignment of the namespace, so an update
//! replaces the whole map. That also drops every old shard whose range overlaps a new one,
//! which is what a shard split requires.

use std::collections::BTreeMap;

use crate::config::validate_host_port;
use crate::proto::oxia::{ShardAssignments, ShardKeyRouter, shard_assignment::ShardBoundaries};

/// An Oxia shard id.
pub type ShardId = i64;

/// The routing hash of a key: the low 32 bits of XXH3-64 (seed 0) of its UTF-8 bytes.
pub fn routing_hash(key: &str) -> u32 {
    // Truncation to the low 32 bits is the definition of Oxia's hash.
    xxhash_rust::xxh3::xxh3_64(key.as_bytes()) as u32
}

/// A shard's hash range; both ends are inclusive (oxia.md §3.1: the upstream proto comment
/// saying `[min, max)` is wrong).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashRange {
    /// The smallest hash of the range.
    pub min: u32,
    /// The greatest hash of the range (inclusive).
    pub max: u32,
}

impl HashRange {
    /// Whether `hash` lies in the range.
    pub fn contains(&self, hash: u32) -> bool {
        self.min <= hash && hash <= self.max
    }
}

/// One shard: its id, the address of its leader and its hash range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// The shard id.
    pub id: ShardId,
    /// `host:port` of the leader's public endpoint, dialled exactly as given; empty while the
    /// shard has no leader (the coordinator announces an election under way so).
    pub leader: String,
    /// The hashes the shard owns.
    pub range: HashRange,
}

/// A `ShardAssignments` message that cannot be used, with what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssignmentError {
    /// The message has no entry for our namespace.
    #[error("shard assignments have no namespace `{0}`")]
    NamespaceMissing(String),
    /// The namespace routes by something other than XXHASH3.
    #[error("namespace `{namespace}` uses shard key router {router}, only XXHASH3 is supported")]
    UnsupportedRouter {
        /// The namespace.
        namespace: String,
        /// The router value received.
        router: i32,
    },
    /// The namespace has no shards.
    #[error("namespace `{0}` has no shards")]
    NoShards(String),
    /// A shard came without a hash range.
    #[error("shard {0} has no hash range")]
    MissingRange(ShardId),
    /// A shard's range has `min > max`.
    #[error("shard {shard} has the empty hash range [{min}, {max}]")]
    EmptyRange {
        /// The shard.
        shard: ShardId,
        /// The range's lower end.
        min: u32,
        /// The range's upper end.
        max: u32,
    },
    /// Two shards claim the same hash.
    #[error("shards {first} and {second} overlap at hash {hash}")]
    Overlap {
        /// One shard.
        first: ShardId,
        /// The other shard.
        second: ShardId,
        /// The first hash both claim.
        hash: u32,
    },
    /// The same shard id appears twice.
    #[error("shard {0} appears twice")]
    DuplicateShard(ShardId),
    /// A shard's leader address is not `host:port`.
    #[error("shard {shard} has an unusable leader address: {problem}")]
    BadLeader {
        /// The shard.
        shard: ShardId,
        /// What is wrong with the address.
        problem: String,
    },
}

/// The shards of one namespace, ordered by hash range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardMap {
    /// Sorted by `range.min`, ranges pairwise disjoint.
    shards: Vec<Shard>,
}

impl ShardMap {
    /// Builds a map from shards, checking that ranges are non-empty and disjoint, ids unique
    /// and leaders `host:port` or empty (no leader for now). Gaps are allowed (a hash in a gap
    /// has no shard for now).
    pub fn new(mut shards: Vec<Shard>) -> Result<Self, AssignmentError> {
        shards.sort_by_key(|shard| shard.range.min);
        let mut ids = BTreeMap::new();
        for shard in &shards {
            if shard.range.min > shard.range.max {
                return Err(AssignmentError::EmptyRange {
                    shard: shard.id,
                    min: shard.range.min,
                    max: shard.range.max,
                });
            }
            if ids.insert(shard.id, ()).is_some() {
                return Err(AssignmentError::DuplicateShard(shard.id));
            }
            // A shard without a leader must not make the whole map unusable: the client would
            // then stop following every other shard's leader until this one has one again.
            if !shard.leader.is_empty() {
                validate_host_port(&shard.leader)
                    .map_err(|problem| AssignmentError::BadLeader { shard: shard.id, problem })?;
            }
        }
        for pair in shards.windows(2) {
            if let [lower, upper] = pair
                && upper.range.min <= lower.range.max
            {
                return Err(AssignmentError::Overlap {
                    first: lower.id,
                    second: upper.id,
                    hash: upper.range.min,
                });
            }
        }
        Ok(Self { shards })
    }

    /// The map of `namespace` in an assignments message.
    pub fn from_assignments(message: &ShardAssignments, namespace: &str) -> Result<Self, AssignmentError> {
        let assignment = message
            .namespaces
            .get(namespace)
            .ok_or_else(|| AssignmentError::NamespaceMissing(namespace.to_owned()))?;
        if assignment.shard_key_router != ShardKeyRouter::Xxhash3 as i32 {
            return Err(AssignmentError::UnsupportedRouter {
                namespace: namespace.to_owned(),
                router: assignment.shard_key_router,
            });
        }
        if assignment.assignments.is_empty() {
            return Err(AssignmentError::NoShards(namespace.to_owned()));
        }
        let shards = assignment
            .assignments
            .iter()
            .map(|a| match &a.shard_boundaries {
                Some(ShardBoundaries::Int32HashRange(range)) => Ok(Shard {
                    id: a.shard,
                    leader: a.leader.clone(),
                    range: HashRange { min: range.min_hash_inclusive, max: range.max_hash_inclusive },
                }),
                None => Err(AssignmentError::MissingRange(a.shard)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(shards)
    }

    /// The ranges `oxia standalone --shards n` assigns (oxia.md §4), all led by `leader`:
    /// `bucket = floor(0xFFFFFFFF / n) + 1`, shard i gets `[i·bucket, i·bucket + bucket − 1]`
    /// and the last shard's upper end is `0xFFFFFFFF`.
    pub fn standalone(n: u32, leader: &str) -> Result<Self, AssignmentError> {
        if n == 0 {
            return Err(AssignmentError::NoShards("default".to_owned()));
        }
        let bucket = u64::from(u32::MAX / n) + 1;
        let shards = (0..n)
            .map(|i| {
                let min = u64::from(i) * bucket;
                let max = if i + 1 == n { u64::from(u32::MAX) } else { min + bucket - 1 };
                Shard {
                    id: ShardId::from(i),
                    leader: leader.to_owned(),
                    // Both fit: min <= max <= u32::MAX by construction.
                    range: HashRange {
                        min: u32::try_from(min).unwrap_or(u32::MAX),
                        max: u32::try_from(max).unwrap_or(u32::MAX),
                    },
                }
            })
            .collect();
        Self::new(shards)
    }

    /// The shard owning `hash`, if any.
    pub fn shard_for_hash(&self, hash: u32) -> Option<&Shard> {
        // The last shard whose range starts at or below the hash is the only candidate.
        let index = self.shards.partition_point(|shard| shard.range.min <= hash);
        let candidate = self.shards.get(index.checked_sub(1)?)?;
        candidate.range.contains(hash).then_some(candidate)
    }

    /// The shard a partition key routes to.
    pub fn shard_for_key(&self, partition_key: &str) -> Option<&Shard> {
        self.shard_for_hash(routing_hash(partition_key))
    }

    /// The shard with this id.
    pub fn shard(&self, id: ShardId) -> Option<&Shard> {
        self.shards.iter().find(|shard| shard.id == id)
    }

    /// All shards, ordered by hash range.
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// The shards of `self` whose connection must be dropped when `next` replaces it: those
    /// that are gone, or whose leader moved.
    pub fn moved_or_removed(&self, next: &ShardMap) -> Vec<ShardId> {
        self.shards
            .iter()
            .filter(|old| next.shard(old.id).is_none_or(|new| new.leader != old.leader))
            .map(|old| old.id)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::proto::oxia::{Int32HashRange, NamespaceShardsAssignment, ShardAssignment};

    /// oxia.md §5.1: hash, and the shard under the standalone ranges for N = 2, 3, 4, 8.
    /// `foo`/`bar`/`baz` are Oxia's own vectors (`common/hash/hash_test.go`).
    const VECTORS: &[(&str, u32, [ShardId; 4])] = &[
        ("foo", 125730186, [0, 0, 0, 0]),
        ("bar", 2687685474, [1, 1, 2, 5]),
        ("baz", 862947621, [0, 0, 0, 1]),
        ("0", 3139702869, [1, 2, 2, 5]),
        ("1", 2409165144, [1, 1, 2, 4]),
        ("2", 794665748, [0, 0, 0, 1]),
        ("3", 2123658480, [0, 1, 1, 3]),
        ("7", 3089270266, [1, 2, 2, 5]),
        ("42", 3236897169, [1, 2, 3, 6]),
        ("100", 411468821, [0, 0, 0, 0]),
    ];

    #[test]
    fn routing_hash_matches_the_reference_vectors() {
        for (key, hash, _) in VECTORS {
            assert_eq!(routing_hash(key), *hash, "hash of {key:?}");
        }
        assert_eq!(routing_hash(""), 0x38d3_94c2);
        assert_eq!(routing_hash("/stream-id-generator"), 2384619401);
        assert_eq!(routing_hash("/stream-id/7"), 2002545604);
        // The full XXH3-64 of "" is the published empty-input value; we keep its low half.
        assert_eq!(xxhash_rust::xxh3::xxh3_64(b""), 0x2d06_8005_38d3_94c2);
    }

    #[test]
    fn standalone_shards_route_the_reference_vectors() {
        for (column, n) in [2u32, 3, 4, 8].into_iter().enumerate() {
            let map = ShardMap::standalone(n, "127.0.0.1:6648").expect("valid");
            for (key, _, shards) in VECTORS {
                let shard = map.shard_for_key(key).expect("full coverage").id;
                assert_eq!(shard, shards[column], "key {key:?} with {n} shards");
            }
        }
    }

    #[test]
    fn standalone_ranges_match_the_reference_table() {
        let ranges = |n| -> Vec<(u32, u32)> {
            ShardMap::standalone(n, "h:1")
                .expect("valid")
                .shards()
                .iter()
                .map(|s| (s.range.min, s.range.max))
                .collect()
        };
        assert_eq!(ranges(1), vec![(0, 4294967295)]);
        assert_eq!(ranges(2), vec![(0, 2147483647), (2147483648, 4294967295)]);
        assert_eq!(ranges(3), vec![(0, 1431655765), (1431655766, 2863311531), (2863311532, 4294967295)]);
        assert_eq!(
            ranges(4),
            vec![
                (0, 1073741823),
                (1073741824, 2147483647),
                (2147483648, 3221225471),
                (3221225472, 4294967295)
            ]
        );
    }

    /// Standalone ranges tile the whole hash space without gaps or overlaps, for any shard
    /// count, so every hash has exactly one shard.
    #[test]
    fn standalone_ranges_tile_the_hash_space() {
        for n in 1..=64u32 {
            let map = ShardMap::standalone(n, "h:1").expect("valid");
            let shards = map.shards();
            assert_eq!(shards.len(), n as usize);
            assert_eq!(shards.first().map(|s| s.range.min), Some(0), "n = {n}");
            assert_eq!(shards.last().map(|s| s.range.max), Some(u32::MAX), "n = {n}");
            for pair in shards.windows(2) {
                assert_eq!(u64::from(pair[0].range.max) + 1, u64::from(pair[1].range.min), "n = {n}");
            }
            for shard in shards {
                for hash in [shard.range.min, shard.range.max] {
                    assert_eq!(
                        map.shard_for_hash(hash).map(|s| s.id),
                        Some(shard.id),
                        "n = {n}, hash {hash}"
                    );
                }
            }
        }
        assert!(ShardMap::standalone(0, "h:1").is_err());
    }

    #[test]
    fn both_ends_of_a_range_are_inclusive() {
        let map = ShardMap::standalone(2, "h:1").expect("valid");
        assert_eq!(map.shard_for_hash(2147483647).map(|s| s.id), Some(0));
        assert_eq!(map.shard_for_hash(2147483648).map(|s| s.id), Some(1));
        assert_eq!(map.shard_for_hash(0).map(|s| s.id), Some(0));
        assert_eq!(map.shard_for_hash(u32::MAX).map(|s| s.id), Some(1));
    }

    fn shard(id: ShardId, min: u32, max: u32, leader: &str) -> ShardAssignment {
        ShardAssignment {
            shard: id,
            leader: leader.to_owned(),
            shard_boundaries: Some(ShardBoundaries::Int32HashRange(Int32HashRange {
                min_hash_inclusive: min,
                max_hash_inclusive: max,
            })),
        }
    }

    fn message(
        namespace: &str,
        router: ShardKeyRouter,
        assignments: Vec<ShardAssignment>,
    ) -> ShardAssignments {
        ShardAssignments {
            namespaces: HashMap::from([(
                namespace.to_owned(),
                NamespaceShardsAssignment { assignments, shard_key_router: router as i32 },
            )]),
            allowed_authorities: Vec::new(),
        }
    }

    #[test]
    fn assignments_message_becomes_a_map() {
        let msg = message(
            "default",
            ShardKeyRouter::Xxhash3,
            vec![shard(7, 2147483648, u32::MAX, "b:2"), shard(3, 0, 2147483647, "a:1")],
        );
        let map = ShardMap::from_assignments(&msg, "default").expect("valid");
        assert_eq!(map.shards().iter().map(|s| s.id).collect::<Vec<_>>(), vec![3, 7]);
        assert_eq!(map.shard_for_key("bar").map(|s| s.leader.as_str()), Some("b:2"));
        assert_eq!(map.shard(3).map(|s| s.leader.as_str()), Some("a:1"));
    }

    /// During an election the coordinator announces the shard with an empty leader, in the
    /// same message as every other shard's current leader: the map keeps the others (and the
    /// leaderless shard's range, so its keys still route to it).
    #[test]
    fn a_shard_without_a_leader_leaves_the_rest_of_the_map_usable() {
        let msg = message(
            "default",
            ShardKeyRouter::Xxhash3,
            vec![shard(0, 0, 2147483647, ""), shard(1, 2147483648, u32::MAX, "b:2")],
        );
        let map = ShardMap::from_assignments(&msg, "default").expect("usable");
        assert_eq!(map.shard(0).map(|s| s.leader.as_str()), Some(""));
        assert_eq!(map.shard_for_key("foo").map(|s| s.id), Some(0));
        assert_eq!(map.shard_for_key("bar").map(|s| s.leader.as_str()), Some("b:2"));
    }

    #[test]
    fn unusable_assignments_are_rejected_with_the_reason() {
        let ok = || vec![shard(0, 0, u32::MAX, "a:1")];
        let cases = vec![
            (
                message("other", ShardKeyRouter::Xxhash3, ok()),
                AssignmentError::NamespaceMissing("default".into()),
            ),
            (
                message("default", ShardKeyRouter::Unknown, ok()),
                AssignmentError::UnsupportedRouter { namespace: "default".into(), router: 0 },
            ),
            (
                message("default", ShardKeyRouter::Xxhash3, vec![]),
                AssignmentError::NoShards("default".into()),
            ),
            (
                message(
                    "default",
                    ShardKeyRouter::Xxhash3,
                    vec![ShardAssignment { shard: 4, leader: "a:1".into(), shard_boundaries: None }],
                ),
                AssignmentError::MissingRange(4),
            ),
            (
                message("default", ShardKeyRouter::Xxhash3, vec![shard(1, 10, 5, "a:1")]),
                AssignmentError::EmptyRange { shard: 1, min: 10, max: 5 },
            ),
            (
                message(
                    "default",
                    ShardKeyRouter::Xxhash3,
                    vec![shard(1, 0, 10, "a:1"), shard(2, 10, 20, "a:1")],
                ),
                AssignmentError::Overlap { first: 1, second: 2, hash: 10 },
            ),
            (
                message(
                    "default",
                    ShardKeyRouter::Xxhash3,
                    vec![shard(1, 0, 10, "a:1"), shard(1, 11, 20, "a:1")],
                ),
                AssignmentError::DuplicateShard(1),
            ),
        ];
        for (msg, expected) in cases {
            assert_eq!(ShardMap::from_assignments(&msg, "default"), Err(expected));
        }
        let bad_leader = message("default", ShardKeyRouter::Xxhash3, vec![shard(0, 0, u32::MAX, "nohost")]);
        assert!(matches!(
            ShardMap::from_assignments(&bad_leader, "default"),
            Err(AssignmentError::BadLeader { shard: 0, .. })
        ));
    }

    #[test]
    fn a_hash_in_a_gap_has_no_shard() {
        let map = ShardMap::new(vec![
            Shard { id: 1, leader: "a:1".into(), range: HashRange { min: 0, max: 9 } },
            Shard { id: 2, leader: "a:1".into(), range: HashRange { min: 20, max: 29 } },
        ])
        .expect("valid");
        assert_eq!(map.shard_for_hash(15), None);
        assert_eq!(map.shard_for_hash(30), None);
        assert_eq!(map.shard_for_hash(20).map(|s| s.id), Some(2));
    }

    #[test]
    fn a_split_replaces_the_old_shard_and_moves_are_detected() {
        let before = ShardMap::new(vec![
            Shard { id: 0, leader: "a:1".into(), range: HashRange { min: 0, max: u32::MAX / 2 } },
            Shard { id: 1, leader: "b:1".into(), range: HashRange { min: u32::MAX / 2 + 1, max: u32::MAX } },
        ])
        .expect("valid");
        // Shard 0 split into 2 and 3; shard 1 changed leader.
        let after = ShardMap::new(vec![
            Shard { id: 2, leader: "a:1".into(), range: HashRange { min: 0, max: 1000 } },
            Shard { id: 3, leader: "a:1".into(), range: HashRange { min: 1001, max: u32::MAX / 2 } },
            Shard { id: 1, leader: "c:1".into(), range: HashRange { min: u32::MAX / 2 + 1, max: u32::MAX } },
        ])
        .expect("valid");
        assert_eq!(before.moved_or_removed(&after), vec![0, 1]);
        assert_eq!(after.moved_or_removed(&after), Vec::<ShardId>::new());
        assert_eq!(after.shard_for_hash(5).map(|s| s.id), Some(2));
    }
}
