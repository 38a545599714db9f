//! Load-balancing schemes inside the fabric, each a pure component: state
//! plus decision functions that take the time, what the scheme observes and
//! random draws as arguments, so each decision rule is tested on its own.
//!
//! - [`conga`]: CONGA's DRE meters, leaf-to-leaf feedback and flowlets.
//! - [`clove`]: CLOVE-ECN's edge flowlets with ECN-weighted paths.
//! - [`flowbender`]: FlowBender's re-hash on a high ECN fraction.
//! - [`hermes`]: Hermes's path sensing and cautious rerouting.

pub mod clove;
pub mod conga;
pub mod flowbender;
pub mod hermes;
