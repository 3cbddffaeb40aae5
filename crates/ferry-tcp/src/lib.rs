//! ferry TCP backend (seed 000). Implementation in progress.
