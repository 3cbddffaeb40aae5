//! What several collective test files share.

use ferry_coll::Algorithm;

/// The algorithms the collective suites and property tests run each case with: every
/// algorithm of [`Algorithm::ALL`] in its order but Pairwise and Chain (which `backends.rs`
/// covers).
pub fn allreduce_algs() -> Vec<Algorithm> {
    Algorithm::ALL
        .into_iter()
        .filter(|a| !matches!(a, Algorithm::Pairwise | Algorithm::Chain))
        .collect()
}
