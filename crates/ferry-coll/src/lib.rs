//! ferry collectives (M4). Implementation in progress.
