//! Test backends and load generator (issue 4).
