//! The seeded generator of the suites, the project's one (`lakestream_meta::test_rng`): kill
//! points, reset decisions and payload filler come from a printed seed, so a failing run names
//! the seed that made its choices (`LAKESTREAM_TEST_SEED` replays it).

pub use lakestream_meta::test_rng::{Seed, TestRng as Rng};
