//! Fulcrum's L4 data plane: an XDP load balancer for IPv4 TCP and UDP
//! services, with NAT and direct server return, and its control plane.
//!
//! The program (`bpf/lb.bpf.c`, compiled by clang in `build.rs`) hashes each
//! flow's 5-tuple ([`flow`]), indexes the service's consistent-hash table and
//! forwards; an LRU conntrack map (behind a small per-CPU flow cache) keeps
//! established flows on their backend, its entries ageing by protocol and
//! TCP state ([`conntrack`]).
//! The control plane builds the tables with fulcrum-balance's Maglev or
//! rendezvous code ([`table`]), writes the maps ([`dataplane::Dataplane`]),
//! pins them in bpffs and attaches the program to interfaces. [`spec`] parses
//! loxicmd-style service descriptions; [`testrun`] and [`packet`] run the
//! program on crafted frames through `BPF_PROG_TEST_RUN`. Like Katran's, the
//! program is small and dumb and userspace does the thinking.

mod batch;
pub mod conntrack;
pub mod dataplane;
mod error;
pub mod fixture;
pub mod fleet;
pub mod flow;
pub mod maps;
pub mod netns;
pub mod packet;
pub mod spec;
pub mod table;
pub mod testrun;

pub use dataplane::{Dataplane, Loaded};
pub use error::Error;
