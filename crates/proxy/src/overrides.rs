//! Changes an operator makes to a cluster's endpoints at run time (through
//! the runtime API, [`crate::runtime`]): drain, weight, add, remove.
//!
//! They are kept as a layer over the endpoints the configuration file
//! resolves to, not written into them, so that re-resolving DNS keeps them
//! and a reload (which builds the cluster from the file again) drops them.
//! Draining follows HAProxy's `set server … state drain`: the endpoint stays
//! a member (health checks go on, requests in flight finish) but the
//! balancers are no longer given it, so it gets no new request.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

/// What a runtime change was refused for.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChangeError {
    /// The address is not one of the cluster's endpoints.
    #[error("no endpoint {0} in this cluster")]
    UnknownEndpoint(SocketAddr),
    /// Adding an address that is already an endpoint.
    #[error("{0} is already an endpoint of this cluster")]
    AlreadyMember(SocketAddr),
    /// Not a finite weight above 0.
    #[error("{0} is not a weight > 0")]
    BadWeight(f64),
}

/// The runtime layer of one cluster. Empty after a start or a reload.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    drained: HashSet<SocketAddr>,
    weights: HashMap<SocketAddr, f64>,
    added: Vec<SocketAddr>,
    removed: HashSet<SocketAddr>,
}

/// Per configured endpoint: the addresses it resolved to and its weight.
pub type FileEndpoints = [(Vec<SocketAddr>, f64)];

fn check_weight(weight: f64) -> Result<f64, ChangeError> {
    if weight.is_finite() && weight > 0.0 {
        Ok(weight)
    } else {
        Err(ChangeError::BadWeight(weight))
    }
}

impl Overrides {
    /// The members with their weights: the file's addresses (first
    /// occurrence of each) less the removed ones, then the added ones.
    pub fn apply(&self, file: &FileEndpoints) -> Vec<(SocketAddr, f64)> {
        let mut members: Vec<(SocketAddr, f64)> = Vec::new();
        let from_file = file.iter().flat_map(|(addrs, weight)| addrs.iter().map(move |a| (*a, *weight)));
        for (addr, weight) in from_file.chain(self.added.iter().map(|a| (*a, 1.0))) {
            if self.removed.contains(&addr) || members.iter().any(|(a, _)| *a == addr) {
                continue;
            }
            members.push((addr, self.weights.get(&addr).copied().unwrap_or(weight)));
        }
        members
    }

    /// Whether `addr` is draining.
    pub fn is_drained(&self, addr: SocketAddr) -> bool {
        self.drained.contains(&addr)
    }

    fn member(&self, file: &FileEndpoints, addr: SocketAddr) -> Result<(), ChangeError> {
        match self.apply(file).iter().any(|(a, _)| *a == addr) {
            true => Ok(()),
            false => Err(ChangeError::UnknownEndpoint(addr)),
        }
    }

    /// Drain `addr` (`on`) or put it back.
    pub fn drain(&mut self, file: &FileEndpoints, addr: SocketAddr, on: bool) -> Result<(), ChangeError> {
        self.member(file, addr)?;
        if on {
            self.drained.insert(addr);
        } else {
            self.drained.remove(&addr);
        }
        Ok(())
    }

    /// Give `addr` a new weight.
    pub fn set_weight(&mut self, file: &FileEndpoints, addr: SocketAddr, weight: f64) -> Result<(), ChangeError> {
        let weight = check_weight(weight)?;
        self.member(file, addr)?;
        self.weights.insert(addr, weight);
        Ok(())
    }

    /// Make `addr` an endpoint, with `weight` (default: the file's weight
    /// for an address the file names, else 1).
    pub fn add(&mut self, file: &FileEndpoints, addr: SocketAddr, weight: Option<f64>) -> Result<(), ChangeError> {
        let weight = weight.map(check_weight).transpose()?;
        if self.member(file, addr).is_ok() {
            return Err(ChangeError::AlreadyMember(addr));
        }
        if !self.removed.remove(&addr) {
            self.added.push(addr);
        }
        if let Some(w) = weight {
            self.weights.insert(addr, w);
        }
        Ok(())
    }

    /// Stop `addr` being an endpoint; a later add starts it afresh (not
    /// draining, default weight).
    pub fn remove(&mut self, file: &FileEndpoints, addr: SocketAddr) -> Result<(), ChangeError> {
        self.member(file, addr)?;
        if let Some(i) = self.added.iter().position(|a| *a == addr) {
            self.added.remove(i);
        } else {
            self.removed.insert(addr);
        }
        self.weights.remove(&addr);
        self.drained.remove(&addr);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn changes_layer_over_the_file_and_errors_name_the_address() {
        let file = vec![(vec![a("10.0.0.1:80"), a("10.0.0.2:80")], 2.0)];
        let mut o = Overrides::default();
        assert_eq!(o.apply(&file), vec![(a("10.0.0.1:80"), 2.0), (a("10.0.0.2:80"), 2.0)]);
        o.set_weight(&file, a("10.0.0.2:80"), 5.0).unwrap();
        o.add(&file, a("10.0.0.3:80"), None).unwrap();
        o.remove(&file, a("10.0.0.1:80")).unwrap();
        assert_eq!(o.apply(&file), vec![(a("10.0.0.2:80"), 5.0), (a("10.0.0.3:80"), 1.0)]);
        assert_eq!(o.add(&file, a("10.0.0.3:80"), None), Err(ChangeError::AlreadyMember(a("10.0.0.3:80"))));
        assert_eq!(o.drain(&file, a("10.0.0.1:80"), true), Err(ChangeError::UnknownEndpoint(a("10.0.0.1:80"))));
        assert_eq!(o.set_weight(&file, a("10.0.0.2:80"), -1.0), Err(ChangeError::BadWeight(-1.0)));
        assert!(o.set_weight(&file, a("10.0.0.2:80"), f64::NAN).is_err());
        // A removed file endpoint comes back with the file's weight; a removed added one is gone.
        o.add(&file, a("10.0.0.1:80"), None).unwrap();
        o.remove(&file, a("10.0.0.3:80")).unwrap();
        assert_eq!(o.apply(&file), vec![(a("10.0.0.1:80"), 2.0), (a("10.0.0.2:80"), 5.0)]);
    }

    #[test]
    fn draining_is_undone_by_undrain_and_by_removal() {
        let file = vec![(vec![a("10.0.0.1:80")], 1.0)];
        let mut o = Overrides::default();
        o.drain(&file, a("10.0.0.1:80"), true).unwrap();
        assert!(o.is_drained(a("10.0.0.1:80")));
        o.drain(&file, a("10.0.0.1:80"), false).unwrap();
        assert!(!o.is_drained(a("10.0.0.1:80")));
        o.drain(&file, a("10.0.0.1:80"), true).unwrap();
        o.remove(&file, a("10.0.0.1:80")).unwrap();
        o.add(&file, a("10.0.0.1:80"), Some(3.0)).unwrap();
        assert!(!o.is_drained(a("10.0.0.1:80")));
        assert_eq!(o.apply(&file), vec![(a("10.0.0.1:80"), 3.0)]);
    }
}
