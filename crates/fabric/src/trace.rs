//! A debugging trace of one flow's sender, for comparing it with the same
//! flow in ns-3 (`bench/ns3/`, whose instrumented large-scale program writes
//! the same kind of lines from ns-3's socket trace sources).
//!
//! Debug builds only (the calls are compiled out of release builds, so the
//! hot path does not pay for them): with `FULCRUM_TRACE_FLOW=N` in the
//! environment, every segment flow N sends, every ACK it receives and every
//! timeout print one line to stderr,
//! `t_ns,event,seq,cwnd_bytes,ssthresh_bytes,pipe_bytes,state,alpha,rto_ns`;
//! the receiver prints `t_ns,rx,seq,ce,ack,ece` for each data segment it
//! answers and `t_ns,rx-unanswered,seq,ce` for one it drops without an
//! answer, and each of the flow's packets a queue discipline drops prints
//! `t_ns,drop,seq,kind,port` (ns-3's side: `bench/ns3/mq-trace.patch`), or
//! `t_ns,drop,seq,kind,departure` when a rule drops it leaving the queue
//! (CoDel's drop and ECN modes).

use std::sync::OnceLock;

use crate::packet::Nanos;
use crate::tcp::Sender;

/// Whether flow `f` is the one `FULCRUM_TRACE_FLOW` names.
pub fn traced(f: usize) -> bool {
    static FLOW: OnceLock<Option<usize>> = OnceLock::new();
    *FLOW.get_or_init(|| std::env::var("FULCRUM_TRACE_FLOW").ok().and_then(|v| v.parse().ok())) == Some(f)
}

/// One line: `event` about segment (or ACK number) `seq` of `s`, at `now`.
pub fn event(now: Nanos, event: &str, seq: u32, s: &Sender, mss: u32) {
    eprintln!("{now},{event},{seq},{}", s.describe(mss));
}

/// One line about flow `f` that is not the sender's: `now`, then `what`.
pub fn note(f: usize, now: Nanos, what: std::fmt::Arguments) {
    if traced(f) {
        eprintln!("{now},{what}");
    }
}
