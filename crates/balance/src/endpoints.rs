//! Bookkeeping every balancer shares: the endpoint list, per-endpoint
//! in-flight counts and algorithm state, ticket issue and settlement, and
//! state-preserving updates of the set.
//!
//! [`EndpointTable`] is public so that an algorithm outside this crate
//! keeps its endpoints as the built-ins do: [`EndpointTable::issue`] is how
//! a [`Ticket`] is made, [`EndpointTable::settle`] how it is taken back.

use std::collections::HashMap;

use crate::{BuildError, Endpoint, EndpointId, Ticket};

/// The endpoint set of one balancer with per-endpoint state `S`.
#[derive(Debug, Clone)]
pub struct EndpointTable<S> {
    /// The set as given, for names and listings (not read on the hot path).
    endpoints: Vec<Endpoint>,
    /// Per slot, everything a pick or a settlement reads, in one record.
    slots: Vec<Slot<S>>,
    /// Sum of the slots' `active`.
    pub(crate) total_active: u64,
    /// Starts at 1: a ticket's incarnation is never zero.
    next_incarnation: u64,
    slot_of: HashMap<EndpointId, usize>,
}

/// One endpoint's hot fields. They sit together, aligned to a cache line,
/// because a balancer with many endpoints reaches them at a random slot:
/// kept in separate arrays, every pick and settlement missed the cache once
/// per array. With Peak-EWMA's estimate the record is exactly 64 bytes.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub struct Slot<S> {
    id: EndpointId,
    /// Set whenever the endpoint (re-)enters the set, never reused within a
    /// table, so a ticket from an earlier membership is recognised as stale
    /// and a matching one proves its slot.
    incarnation: u64,
    pub(crate) weight: f64,
    /// Requests picked and not yet settled.
    pub(crate) active: u32,
    /// Algorithm-specific state.
    pub(crate) state: S,
}

// One cache line per endpoint, with Peak-EWMA's estimate as with no state.
const _: () = assert!(std::mem::size_of::<Slot<crate::peak_ewma::RttEstimate>>() == 64);
const _: () = assert!(std::mem::size_of::<Slot<()>>() == 64);

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

impl<S> Slot<S> {
    /// The endpoint's id.
    pub fn id(&self) -> EndpointId {
        self.id
    }

    /// Requests picked and not yet settled.
    pub fn active(&self) -> u32 {
        self.active
    }

    /// The algorithm's state.
    pub fn state(&self) -> &S {
        &self.state
    }
}

impl<S> EndpointTable<S> {
    /// A table over `endpoints` with fresh state for each.
    pub fn new(endpoints: &[Endpoint], fresh: impl FnMut(&Endpoint) -> S) -> Result<Self, BuildError> {
        let mut table = EndpointTable {
            endpoints: Vec::new(),
            slots: Vec::new(),
            total_active: 0,
            next_incarnation: 1,
            slot_of: HashMap::new(),
        };
        table.replace(endpoints, fresh)?;
        Ok(table)
    }

    /// Replace the set, keeping `active` and `state` of ids that remain.
    pub fn replace(&mut self, endpoints: &[Endpoint], mut fresh: impl FnMut(&Endpoint) -> S) -> Result<(), BuildError> {
        validate(endpoints)?;
        let mut old: Vec<Option<Slot<S>>> = std::mem::take(&mut self.slots).into_iter().map(Some).collect();
        let mut slots = Vec::with_capacity(endpoints.len());
        let mut slot_of = HashMap::with_capacity(endpoints.len());
        for (slot, e) in endpoints.iter().enumerate() {
            slot_of.insert(e.id, slot);
            match self.slot_of.get(&e.id).and_then(|&o| old[o].take()) {
                Some(kept) => slots.push(Slot { weight: e.weight, ..kept }),
                None => {
                    slots.push(Slot {
                        id: e.id,
                        incarnation: self.next_incarnation,
                        weight: e.weight,
                        active: 0,
                        state: fresh(e),
                    });
                    self.next_incarnation += 1;
                }
            }
        }
        self.total_active = slots.iter().map(|s| s.active as u64).sum();
        self.endpoints = endpoints.to_vec();
        self.slots = slots;
        self.slot_of = slot_of;
        Ok(())
    }

    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    #[inline]
    pub fn weight(&self, slot: usize) -> f64 {
        self.slots[slot].weight
    }

    /// Requests picked from `slot` and not yet settled.
    #[inline]
    pub fn active(&self, slot: usize) -> u32 {
        self.slots[slot].active
    }

    /// Requests picked and not yet settled, over all endpoints.
    #[inline]
    pub fn total_active(&self) -> u64 {
        self.total_active
    }

    /// The algorithm's state of `slot`.
    #[inline]
    pub fn state(&self, slot: usize) -> &S {
        &self.slots[slot].state
    }

    /// The algorithm's state of `slot`, to change.
    #[inline]
    pub fn state_mut(&mut self, slot: usize) -> &mut S {
        &mut self.slots[slot].state
    }

    /// Per endpoint, its in-flight count (and no latency estimate).
    pub fn loads(&self) -> Vec<crate::EndpointLoad> {
        self.endpoints
            .iter()
            .zip(&self.slots)
            .map(|(e, s)| crate::EndpointLoad { id: e.id, active: s.active, latency_estimate: None })
            .collect()
    }

    /// The hot record of `slot`: its in-flight count, weight and state.
    #[inline]
    pub(crate) fn slot_mut(&mut self, slot: usize) -> &mut Slot<S> {
        &mut self.slots[slot]
    }

    /// Per slot, in endpoint order.
    pub fn slots(&self) -> &[Slot<S>] {
        &self.slots
    }

    /// True when every endpoint has the same weight.
    pub fn uniform_weights(&self) -> bool {
        self.endpoints.windows(2).all(|w| w[0].weight == w[1].weight)
    }

    /// Record a pick of `slot` and return its ticket.
    #[inline]
    pub fn issue(&mut self, slot: usize) -> Ticket {
        let s = &mut self.slots[slot];
        s.active += 1;
        self.total_active += 1;
        let incarnation = std::num::NonZeroU64::new(s.incarnation).expect("incarnations start at 1");
        Ticket { endpoint: s.id, slot: slot as u32, incarnation }
    }

    /// Settle a ticket: the slot it refers to now, or `None` when its
    /// endpoint has left the set since the pick.
    #[inline]
    pub fn settle(&mut self, ticket: &Ticket) -> Option<usize> {
        let fast = ticket.slot as usize;
        // An incarnation belongs to one membership of one id, so a match
        // at the ticket's slot proves it without reading the id.
        let slot = match self.slots.get(fast) {
            Some(s) if s.incarnation == ticket.incarnation.get() => fast,
            _ => {
                let slot = *self.slot_of.get(&ticket.endpoint)?;
                if self.slots[slot].incarnation != ticket.incarnation.get() {
                    return None;
                }
                slot
            }
        };
        let s = &mut self.slots[slot];
        if s.active == 0 {
            return None;
        }
        s.active -= 1;
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
        assert_eq!(t.slots().iter().map(|s| s.state).collect::<Vec<_>>(), vec![30, 20, 400]);
        assert_eq!(t.slots().iter().map(|s| s.active).collect::<Vec<_>>(), vec![0, 1, 0]);
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
        assert_eq!(t.slots().iter().map(|s| s.active).collect::<Vec<_>>(), vec![1, 0]);
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
