//! The discrete-event simulation core shared by Fulcrum's simulators (the
//! request simulator `fulcrum-sim` and the packet-level fabric simulator).
//!
//! A simulation is a [`Model`] (its state and what it does when an event
//! happens), a [`Queue`] of pending events in integer nanoseconds, and
//! [`run`], which pops events in time order and hands them to the model.
//! Time never goes backwards, events at the same instant come out in the
//! order they were scheduled, and every random choice comes from a seeded
//! [`Rng`] (see [`Streams`]), so a run is a pure function of the model's
//! input and seed: same scenario and seed, byte-identical output.
//!
//! The queue is a radix heap (Ahuja, Mehlhorn, Orlin and Tarjan, "Faster
//! algorithms for the shortest path problem", J. ACM 37(2), 1990), which
//! needs exactly the property a simulator's clock has: keys are integers and
//! never smaller than the last one popped. `benches/queue.rs` measures it
//! against a binary heap keyed by (time, sequence number). Events due a
//! constant delay after they are scheduled (a network hop of fixed
//! latency) can skip the heap: a [`Lane`] per delay is a FIFO merged with
//! it at pop time, in the same order.
//!
//! No clocks, no threads, no I/O: the only shared state is the optional
//! progress counter that [`run`] advances in coarse steps.

#![forbid(unsafe_code)]

mod queue;
mod run;
mod wheel;

pub use fulcrum_base::{Nanos, Rng, Streams};
pub use queue::{Lane, Queue};
pub use run::{run, Model, Pending, Ran, PROGRESS_EVENTS};
pub use wheel::{Wheel, HORIZON, SLOTS, SLOT_NS};
