//! Differential test: random operation sequences give identical answers (values, versions,
//! timestamps, errors) from the in-memory store (one shard) and the embedded store. The two
//! share the primitives' semantics, so this pins their key spaces: the BTreeMap and the redb
//! table must agree on every lookup, range and bound, in the hierarchical key order.

use std::sync::Arc;

use bytes::Bytes;
use lakestream_format::ManualClock;
use lakestream_meta::{Comparison, EmbeddedStore, InMemoryStore, MetaStore, PutCondition};
use proptest::prelude::*;

/// Keys that exercise the hierarchical order: depths 0–3, a trailing "//", and shared prefixes.
const KEYS: &[&str] =
    &["a", "a-1", "ab", "b", "/a", "/ab", "/a/", "/a/b", "/a//", "a/b", "/a/b/c", "p-00000000000000000001"];

#[derive(Debug, Clone)]
enum Op {
    Put(usize, u8),
    Get(usize, u8),
    Delete(usize),
    DeleteRange(usize, usize),
    List(usize, usize),
    Scan(usize, usize, usize),
    SequencedPut(bool, u64, u64),
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS.len();
    prop_oneof![
        (key.clone(), 0u8..4).prop_map(|(k, c)| Op::Put(k, c)),
        (key.clone(), 0u8..5).prop_map(|(k, c)| Op::Get(k, c)),
        key.clone().prop_map(Op::Delete),
        (key.clone(), key.clone()).prop_map(|(a, b)| Op::DeleteRange(a, b)),
        (key.clone(), key.clone()).prop_map(|(a, b)| Op::List(a, b)),
        (key.clone(), key, 0usize..4).prop_map(|(a, b, l)| Op::Scan(a, b, l)),
        (any::<bool>(), 0u64..3, 0u64..3).prop_map(|(p, d1, d2)| Op::SequencedPut(p, d1, d2)),
    ]
}

/// Runs one operation and renders its outcome, errors included.
async fn run(store: &dyn MetaStore, op: &Op, step: usize) -> String {
    let value = Bytes::from(step.to_string());
    match *op {
        Op::Put(k, c) => {
            let condition = match c {
                0 => PutCondition::None,
                1 => PutCondition::IfAbsent,
                2 => PutCondition::IfVersion(step as i64 / 2),
                _ => PutCondition::IfVersion(1),
            };
            format!("{:?}", store.put("p", KEYS[k], value, condition).await)
        }
        Op::Get(k, c) => {
            let cmp = [
                Comparison::Equal,
                Comparison::Floor,
                Comparison::Ceiling,
                Comparison::Lower,
                Comparison::Higher,
            ][usize::from(c)];
            format!("{:?}", store.get_cmp("p", KEYS[k], cmp).await)
        }
        Op::Delete(k) => format!("{:?}", store.delete("p", KEYS[k]).await),
        Op::DeleteRange(a, b) => format!("{:?}", store.delete_range("p", KEYS[a], KEYS[b]).await),
        Op::List(a, b) => format!("{:?}", store.list("p", KEYS[a], KEYS[b]).await),
        Op::Scan(a, b, limit) => {
            let limit = (limit > 0).then_some(limit);
            format!("{:?}", store.scan("p", KEYS[a], KEYS[b], limit).await)
        }
        Op::SequencedPut(second_prefix, d1, d2) => {
            let prefix = if second_prefix { "p" } else { "a" };
            format!("{:?}", store.sequenced_put("p", prefix, &[d1, d2], value).await)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn in_memory_and_embedded_stores_agree(ops in prop::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let clock = ManualClock::new(1_000);
            let memory = InMemoryStore::with_config(1, Arc::new(clock.clone())).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let embedded = EmbeddedStore::open_with_clock(dir.path().join("m.redb"), Arc::new(clock.clone())).await.unwrap();
            for (step, op) in ops.iter().enumerate() {
                clock.advance_ms(1);
                let expected = run(&memory, op, step).await;
                let actual = run(&embedded, op, step).await;
                prop_assert_eq!(&actual, &expected, "step {} {:?}", step, op);
            }
            Ok(())
        })?;
    }
}
