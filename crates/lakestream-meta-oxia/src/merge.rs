//! Merging per-shard results in Oxia's key order (oxia.md §7.5, §9).
//!
//! Results are sorted within one shard only. A client that lists a range on several shards
//! must merge them with the server's comparator, not bytewise. Lakestream keeps its ordered
//! reads inside one partition, so merging is used only by [`crate::OxiaClient::list_all_shards`]
//! (e.g. listing every log's registration). The comparator is
//! [`lakestream_meta::key_order::compare`], the v0.15+ hierarchical order every backend uses;
//! Lakestream's key set sorts the same under the older slash-aware order (oxia.md §9.4).

use std::cmp::Ordering;

use lakestream_meta::key_order::compare as compare_keys;

/// A key ordered by Oxia's key order, smallest first out of a max-heap.
#[derive(PartialEq, Eq)]
struct HeapEntry {
    key: String,
    list: usize,
}

impl Ord for HeapEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed so that the std max-heap yields the smallest key; ties by list index keep
        // the merge deterministic.
        compare_keys(&other.key, &self.key).then_with(|| other.list.cmp(&self.list))
    }
}

impl PartialOrd for HeapEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Merges lists that are each sorted in Oxia's key order into one sorted list.
pub fn merge_sorted(lists: Vec<Vec<String>>) -> Vec<String> {
    let total = lists.iter().map(Vec::len).sum();
    let mut iters: Vec<std::vec::IntoIter<String>> = lists.into_iter().map(Vec::into_iter).collect();
    let mut heap = std::collections::BinaryHeap::with_capacity(iters.len());
    for (list, iter) in iters.iter_mut().enumerate() {
        if let Some(key) = iter.next() {
            heap.push(HeapEntry { key, list });
        }
    }
    let mut merged = Vec::with_capacity(total);
    while let Some(HeapEntry { key, list }) = heap.pop() {
        merged.push(key);
        if let Some(next) = iters.get_mut(list).and_then(Iterator::next) {
            heap.push(HeapEntry { key: next, list });
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(keys: &[&str]) -> Vec<String> {
        let mut keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        keys.sort_by(|a, b| compare_keys(a, b));
        keys
    }

    /// oxia.md §9.4, the hierarchical column.
    #[test]
    fn hierarchical_order_matches_the_reference_table() {
        assert_eq!(
            sorted(&["/xyz/A/1/a", "/xyz/B/1", "/xyz/A/2", "/xyz/A/1", "/xyz/C", "/xyz/B", "/xyz/A"]),
            ["/xyz/A", "/xyz/B", "/xyz/C", "/xyz/A/1", "/xyz/A/2", "/xyz/B/1", "/xyz/A/1/a"]
        );
        assert_eq!(sorted(&["a/b/c", "b/z"]), ["b/z", "a/b/c"]);
        assert_eq!(sorted(&["/a", "a/b"]), ["a/b", "/a"]);
        assert_eq!(sorted(&["/a/b", "/a/", "/ab", "/a"]), ["/a", "/ab", "/a/", "/a/b"]);
    }

    /// oxia.md §9.4: Lakestream's key set — index keys bytewise, then other `/`-free keys,
    /// then the `/…` records.
    #[test]
    fn lakestream_keys_sort_index_keys_first() {
        let index7 = "00000000000000000007-00000000000000000003-00000000000000000008";
        let index42 = "00000000000000000042-00000000000000000001-00000000000000000001";
        assert_eq!(
            sorted(&[
                "/stream-write-leases/7/u",
                "/stream-write-fences/7",
                "/stream-id/7",
                "/mark-deleted-offsets/7",
                "/first-uncompacted-offset/7",
                "ursa-wal-cleanup-lock",
                index42,
                index7,
            ]),
            [
                index7,
                index42,
                "ursa-wal-cleanup-lock",
                "/first-uncompacted-offset/7",
                "/mark-deleted-offsets/7",
                "/stream-id/7",
                "/stream-write-fences/7",
                "/stream-write-leases/7/u",
            ]
        );
    }

    #[test]
    fn merging_shard_results_gives_one_sorted_list() {
        let shard_a = sorted(&["/stream-id/1", "/stream-id/4", "/stream-id/7"]);
        let shard_b = sorted(&["/stream-id/2", "/stream-id/3", "/stream-id/9"]);
        let shard_c = sorted(&["/stream-id/10"]);
        let mut everything: Vec<String> = shard_a.iter().chain(&shard_b).chain(&shard_c).cloned().collect();
        everything.sort_by(|a, b| compare_keys(a, b));
        assert_eq!(merge_sorted(vec![shard_a, Vec::new(), shard_b, shard_c]), everything);
        assert_eq!(merge_sorted(Vec::new()), Vec::<String>::new());
    }
}
