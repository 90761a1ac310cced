//! Kafka's default partitioner (`Utils.murmur2`), so that ingest picks the partition a Kafka
//! producer would for the same key (reference §5.5).

use crate::event::CloudEvent;

/// Kafka's `Utils.murmur2`: MurmurHash2, seed `0x9747b28c`, little-endian 4-byte blocks.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    // Kafka mixes the length in as a Java int; the truncation matches it.
    let mut h = SEED ^ (data.len() as u32);
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for (index, byte) in tail.iter().enumerate().rev() {
            h ^= u32::from(*byte) << (8 * index);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for a key:
/// `(murmur2(key) & 0x7fffffff) % partition_count`. `None` when `partition_count` is 0.
pub fn partition_for_key(key: &[u8], partition_count: u32) -> Option<u32> {
    let positive = (murmur2(key) & 0x7fff_ffff) as u32;
    positive.checked_rem(partition_count)
}

/// The partition of an event: by its record key (`partitionkey`, else `subject`) like Kafka,
/// else by its deduplication key, so that a retry of a keyless event lands on the same
/// partition. `None` when `partition_count` is 0.
pub fn partition_for_event(event: &CloudEvent, partition_count: u32) -> Option<u32> {
    match event.get("partitionkey").or_else(|| event.get("subject")) {
        Some(key) => partition_for_key(key.as_bytes(), partition_count),
        None => partition_for_key(&event.dedup_key(), partition_count),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafka_and_the_reference() {
        // Reference §5.5: the first six are Kafka's own UtilsTest values.
        for (key, hash, partitions, partition) in [
            ("21", -973_932_308, 10, 0),
            ("foobar", -790_332_482, 10, 6),
            ("a-little-bit-long-string", -985_981_536, 10, 2),
            ("a-little-bit-longer-string", -1_486_304_829, 10, 9),
            ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971, 10, 7),
            ("abc", 479_470_107, 10, 7),
            ("mykey", -623_406_844, 6, 4),
            ("/github/acme/repo", -752_602_326, 6, 2),
            // Cross-checked with kafka-clients 4.3.1 `Utils.murmur2`: the empty key and a
            // key whose length is not a multiple of 4, with multi-byte UTF-8.
            ("", 275_646_681, 6, 3),
            ("é😀xyz", 151_121_068, 6, 4),
        ] {
            assert_eq!(murmur2(key.as_bytes()), hash, "{key}");
            assert_eq!(partition_for_key(key.as_bytes(), partitions), Some(partition), "{key}");
        }
    }

    #[test]
    fn zero_partitions_is_none() {
        assert_eq!(partition_for_key(b"k", 0), None);
    }

    #[test]
    fn keyless_event_uses_its_dedup_key_and_keyed_event_its_key() {
        let keyless =
            crate::json::decode_event(br#"{"specversion":"1.0","id":"1","source":"/s","type":"t"}"#).unwrap();
        assert_eq!(partition_for_event(&keyless, 7), partition_for_key(&keyless.dedup_key(), 7));
        let keyed = crate::json::decode_event(
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","partitionkey":"mykey"}"#,
        )
        .unwrap();
        assert_eq!(partition_for_event(&keyed, 6), Some(4));
    }
}
