//! placeholder
pub struct HybridTransport;
