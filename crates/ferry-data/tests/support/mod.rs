//! Helpers shared by ferry-data's integration tests.

pub mod churn;
