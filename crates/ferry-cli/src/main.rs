//! The `ferry` command. Implementation in progress.
fn main() {}
