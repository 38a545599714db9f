//! Discrete-event simulator (see issue 3).
