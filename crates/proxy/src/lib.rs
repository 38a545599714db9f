//! Reverse proxy (issue 4).
pub mod config;
