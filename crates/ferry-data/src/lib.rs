//! ferry data layer (D1-D9). Implementation in progress.

pub mod kvs;
