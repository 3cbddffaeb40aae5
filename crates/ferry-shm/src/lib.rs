//! ferry shared-memory backend (seed 001). Implementation in progress.
