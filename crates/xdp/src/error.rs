//! The errors of the control plane, split into the user's mistakes
//! ([`Error::is_input`]) and failures of the system.

use std::path::PathBuf;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The service description cannot be used.
    #[error("{0}")]
    Spec(String),
    /// This binary was compiled without clang, so it carries no program.
    #[error("this fulcrum was built without the XDP program (clang was missing): run scripts/xdp-setup, then rebuild")]
    NotBuilt,
    /// Nothing is pinned yet.
    #[error("no data plane pinned in {0}: create a service first (fulcrum lb create …)")]
    NotCreated(PathBuf),
    /// The data plane holds no more services or backends.
    #[error("{0}")]
    Full(String),
    /// Something expected is not there.
    #[error("missing {0}")]
    Missing(String),
    /// Loading the object failed.
    #[error("{what}: {source}")]
    Load {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: Box<aya::EbpfError>,
    },
    /// A program operation failed.
    #[error("{what}: {source}")]
    Program {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    /// A map operation failed.
    #[error("{what}: {source}")]
    Map {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: Box<aya::maps::MapError>,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The user asked for something impossible (exit code 2), rather than
    /// the system failing (exit code 1).
    pub fn is_input(&self) -> bool {
        matches!(self, Error::Spec(_) | Error::NotCreated(_))
    }

    pub(crate) fn load(what: impl Into<String>, e: aya::EbpfError) -> Self {
        Error::Load { what: what.into(), source: Box::new(e) }
    }

    pub(crate) fn program(what: impl Into<String>, e: aya::programs::ProgramError) -> Self {
        Error::Program { what: what.into(), source: Box::new(e) }
    }

    pub(crate) fn map(what: impl Into<String>, e: aya::maps::MapError) -> Self {
        Error::Map { what: what.into(), source: Box::new(e) }
    }

    pub(crate) fn io(what: impl Into<String>, e: std::io::Error) -> Self {
        Error::Io { what: what.into(), source: e }
    }
}
