//! Consistent hashing with bounded loads (Mirrokni, Thorup & Zadimoghaddam,
//! 2018; Envoy's `hash_balance_factor`).
//!
//! An endpoint may hold at most `ceil(factor × (total_active + 1) × w / W)`
//! requests, its weighted share of the load after this pick times the
//! factor (≥ 1). A hash-based algorithm whose first choice is full passes the
//! key on along its own probe order, so the key still lands on the same
//! fallback every time.

use crate::endpoints::EndpointTable;
use crate::BuildError;

/// The bounded-load rule for one balancer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BoundedLoad {
    factor: f64,
}

impl BoundedLoad {
    /// Validate `factor` (≥ 1.0), or no bound when `None`.
    pub(crate) fn new(factor: Option<f64>) -> Result<Option<Self>, BuildError> {
        match factor {
            None => Ok(None),
            Some(f) if f.is_finite() && f >= 1.0 => Ok(Some(BoundedLoad { factor: f })),
            Some(f) => Err(BuildError::InvalidParameter {
                field: "bounded_load",
                value: f.to_string(),
                expected: "a factor ≥ 1.0 (1.25 is a common choice), or leave it out",
            }),
        }
    }

    /// True when `slot` may take one more request.
    #[inline]
    pub(crate) fn admits<S>(&self, table: &EndpointTable<S>, slot: usize, total_weight: f64) -> bool {
        let share = table.weight(slot) / total_weight;
        let capacity = (self.factor * (table.total_active + 1) as f64 * share).ceil();
        (table.active(slot) as f64) < capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Endpoint;

    #[test]
    fn factor_below_one_is_rejected() {
        assert!(BoundedLoad::new(Some(0.9)).unwrap_err().to_string().contains("bounded_load"));
        assert!(BoundedLoad::new(Some(f64::NAN)).is_err());
        assert!(BoundedLoad::new(None).unwrap().is_none());
    }

    #[test]
    fn capacity_is_the_weighted_share_times_factor() {
        let eps: Vec<Endpoint> = (0..4).map(|i| Endpoint::new(i, format!("e{i}"))).collect();
        let mut t = EndpointTable::new(&eps, |_| ()).unwrap();
        let b = BoundedLoad::new(Some(1.0)).unwrap().unwrap();
        // 0 active: capacity ceil(1 × 1 × 0.25) = 1, so every slot admits.
        assert!(b.admits(&t, 0, 4.0));
        let _held: Vec<_> = (0..3).map(|_| t.issue(0)).collect();
        // 3 active on slot 0: capacity ceil(4 × 0.25) = 1 < 3.
        assert!(!b.admits(&t, 0, 4.0));
        assert!(b.admits(&t, 1, 4.0));
    }
}
