//! Legacy (v1/v2) index value parser and the version detection: never panic.
#![no_main]

use lakestream_format::legacy::{self, LegacyIndexValue};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if LegacyIndexValue::parse(data).is_ok() {
        assert!(
            legacy::check_not_legacy_index_value(data).is_err(),
            "a parsed legacy value is detected as legacy"
        );
    }
    let _ = legacy::check_not_legacy_wal_object(data);
});
