//! Bookkeeping every balancer shares: the endpoint list, per-endpoint
//! in-flight counts and algorithm state, ticket issue and settlement, and
//! state-preserving updates of the set.

use std::collections::HashMap;

use crate::{BuildError, Endpoint, EndpointId, Ticket};

/// The endpoint set of one balancer with per-endpoint state `S`.
#[derive(Debug, Clone)]
pub(crate) struct EndpointTable<S> {
    endpoints: Vec<Endpoint>,
    /// Requests picked and not yet settled, per slot.
    pub(crate) active: Vec<u32>,
    /// Sum of `active`.
    pub(crate) total_active: u64,
    /// Algorithm-specific state per slot.
    pub(crate) state: Vec<S>,
    /// Bumped whenever an endpoint (re-)enters the set, so that a ticket from
    /// an earlier membership of the same id is recognised as stale.
    incarnation: Vec<u64>,
    next_incarnation: u64,
    slot_of: HashMap<EndpointId, usize>,
}

/// Check an endpoint list: weights finite and positive, ids unique.
pub(crate) fn validate(endpoints: &[Endpoint]) -> Result<(), BuildError> {
    let mut seen = HashMap::with_capacity(endpoints.len());
    for e in endpoints {
        if !(e.weight.is_finite() && e.weight > 0.0) {
            return Err(BuildError::InvalidWeight { name: e.name.clone(), weight: e.weight });
        }
        if seen.insert(e.id, ()).is_some() {
            return Err(BuildError::DuplicateId { id: e.id.0, name: e.name.clone() });
        }
    }
    Ok(())
}

impl<S> EndpointTable<S> {
    /// A table over `endpoints` with fresh state for each.
    pub(crate) fn new(endpoints: &[Endpoint], fresh: impl FnMut(&Endpoint) -> S) -> Result<Self, BuildError> {
        let mut table = EndpointTable {
            endpoints: Vec::new(),
            active: Vec::new(),
            total_active: 0,
            state: Vec::new(),
            incarnation: Vec::new(),
            next_incarnation: 0,
            slot_of: HashMap::new(),
        };
        table.replace(endpoints, fresh)?;
        Ok(table)
    }

    /// Replace the set, keeping `active` and `state` of ids that remain.
    pub(crate) fn replace(
        &mut self,
        endpoints: &[Endpoint],
        mut fresh: impl FnMut(&Endpoint) -> S,
    ) -> Result<(), BuildError> {
        validate(endpoints)?;
        let mut old_state: Vec<Option<S>> = std::mem::take(&mut self.state).into_iter().map(Some).collect();
        let mut active = Vec::with_capacity(endpoints.len());
        let mut state = Vec::with_capacity(endpoints.len());
        let mut incarnation = Vec::with_capacity(endpoints.len());
        let mut slot_of = HashMap::with_capacity(endpoints.len());
        for (slot, e) in endpoints.iter().enumerate() {
            slot_of.insert(e.id, slot);
            match self.slot_of.get(&e.id).and_then(|&old| old_state[old].take().map(|s| (old, s))) {
                Some((old, s)) => {
                    active.push(self.active[old]);
                    state.push(s);
                    incarnation.push(self.incarnation[old]);
                }
                None => {
                    active.push(0);
                    state.push(fresh(e));
                    incarnation.push(self.next_incarnation);
                    self.next_incarnation += 1;
                }
            }
        }
        self.total_active = active.iter().map(|&a| a as u64).sum();
        self.endpoints = endpoints.to_vec();
        self.active = active;
        self.state = state;
        self.incarnation = incarnation;
        self.slot_of = slot_of;
        Ok(())
    }

    pub(crate) fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    pub(crate) fn len(&self) -> usize {
        self.endpoints.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    pub(crate) fn weight(&self, slot: usize) -> f64 {
        self.endpoints[slot].weight
    }

    /// True when every endpoint has the same weight.
    pub(crate) fn uniform_weights(&self) -> bool {
        self.endpoints.windows(2).all(|w| w[0].weight == w[1].weight)
    }

    /// Record a pick of `slot` and return its ticket.
    #[inline]
    pub(crate) fn issue(&mut self, slot: usize) -> Ticket {
        self.active[slot] += 1;
        self.total_active += 1;
        Ticket { endpoint: self.endpoints[slot].id, slot: slot as u32, incarnation: self.incarnation[slot] }
    }

    /// Settle a ticket: the slot it refers to now, or `None` when its
    /// endpoint has left the set since the pick.
    #[inline]
    pub(crate) fn settle(&mut self, ticket: &Ticket) -> Option<usize> {
        let fast = ticket.slot as usize;
        let slot = if self.endpoints.get(fast).map(|e| e.id) == Some(ticket.endpoint) {
            fast
        } else {
            *self.slot_of.get(&ticket.endpoint)?
        };
        if self.incarnation[slot] != ticket.incarnation || self.active[slot] == 0 {
            return None;
        }
        self.active[slot] -= 1;
        self.total_active -= 1;
        Some(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eps(ids: &[u64]) -> Vec<Endpoint> {
        ids.iter().map(|&i| Endpoint::new(i, format!("e{i}"))).collect()
    }

    #[test]
    fn state_follows_the_id_across_updates() {
        let mut t = EndpointTable::new(&eps(&[1, 2, 3]), |e| e.id.0 * 10).unwrap();
        let ticket = t.issue(1);
        t.replace(&eps(&[3, 2, 4]), |e| e.id.0 * 100).unwrap();
        assert_eq!(t.state, vec![30, 20, 400]);
        assert_eq!(t.active, vec![0, 1, 0]);
        assert_eq!(t.settle(&ticket), Some(1));
        assert_eq!(t.total_active, 0);
    }

    #[test]
    fn ticket_of_a_removed_and_readded_endpoint_is_ignored() {
        let mut t = EndpointTable::new(&eps(&[1, 2]), |_| ()).unwrap();
        let ticket = t.issue(0);
        t.replace(&eps(&[2]), |_| ()).unwrap();
        t.replace(&eps(&[1, 2]), |_| ()).unwrap();
        let fresh = t.issue(0);
        assert_eq!(t.settle(&ticket), None);
        assert_eq!(t.active, vec![1, 0]);
        assert_eq!(t.settle(&fresh), Some(0));
    }

    #[test]
    fn bad_weights_and_duplicates_are_rejected_without_change() {
        let mut t = EndpointTable::new(&eps(&[1]), |_| ()).unwrap();
        for w in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = t.replace(&[Endpoint::new(5, "bad").with_weight(w)], |_| ()).unwrap_err();
            assert!(matches!(err, BuildError::InvalidWeight { ref name, .. } if name == "bad"), "{err}");
        }
        let err = t.replace(&eps(&[7, 7]), |_| ()).unwrap_err();
        assert_eq!(err, BuildError::DuplicateId { id: 7, name: "e7".into() });
        assert_eq!(t.endpoints(), &eps(&[1])[..]);
    }
}
