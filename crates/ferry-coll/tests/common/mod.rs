//! What several collective test files share.

use ferry_coll::Algorithm;

/// The algorithms the collective suites and property tests run each case with: every
/// algorithm but Pairwise and Chain (which `backends.rs` covers).
pub const ALLREDUCE_ALGS: [Algorithm; 10] = [
    Algorithm::Auto,
    Algorithm::Linear,
    Algorithm::Master,
    Algorithm::Direct,
    Algorithm::BinomialTree,
    Algorithm::RecursiveDoubling,
    Algorithm::Rabenseifner,
    Algorithm::Ring,
    Algorithm::Pipeline,
    Algorithm::Hierarchical,
];
