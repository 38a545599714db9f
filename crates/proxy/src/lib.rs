//! Reverse proxy (issue 4).
