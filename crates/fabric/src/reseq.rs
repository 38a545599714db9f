//! A receiver's resequencing buffer, for per-packet load balancing (DRB,
//! Presto, DRILL): data segments that arrive ahead of a gap wait below
//! TCP for the gap to fill, so reordering by the fabric does not turn into
//! duplicate ACKs and spurious fast retransmits; if the gap stays open for
//! `timeout`, everything held goes up to TCP anyway (the segment was
//! probably lost and TCP must see the duplicate ACKs).
//!
//! After the original's `TcpResequenceBuffer` (ns3-ecn-sharp, used by its
//! load-balancing experiments with an out-of-order timeout of 100 µs):
//! segments at or below the next expected one go up at once, filling a gap
//! releases the held segments that follow it, and a timeout flushes all of
//! them and moves the expected segment past the last one flushed. Two
//! simplifications, both documented: the original also batches in-order
//! segments for a few microseconds before handing them up (GRO-like; it
//! only delays them), which is not modelled; and its out-of-order timer is
//! a periodic check every 10 µs of the time since the buffer last made
//! progress, while here the timeout runs from the moment a gap opens and
//! restarts whenever the held segments move up.

use crate::packet::{Nanos, Packet};

/// One flow's resequencing state.
#[derive(Clone, Debug, Default)]
pub struct Resequencer {
    /// Next segment TCP has not been handed.
    next: u32,
    /// Segments held behind a gap, in sequence order, no duplicates.
    held: Vec<Packet>,
    /// When the current wait started (valid while `held` is not empty).
    since: Nanos,
}

impl Resequencer {
    /// Data segment `p` arrived at `now`: the segments to hand to TCP now,
    /// in order, are appended to `out`.
    pub fn arrive(&mut self, now: Nanos, p: Packet, out: &mut Vec<Packet>) {
        if p.seq < self.next {
            out.push(p);
        } else if p.seq == self.next {
            out.push(p);
            self.next += 1;
            let mut ready = 0;
            while self.held.get(ready).is_some_and(|h| h.seq == self.next) {
                self.next += 1;
                ready += 1;
            }
            out.extend(self.held.drain(..ready));
            self.since = now;
        } else if let Err(at) = self.held.binary_search_by_key(&p.seq, |h| h.seq) {
            if self.held.is_empty() {
                self.since = now;
            }
            self.held.insert(at, p);
        }
    }

    /// When the held segments must go up if nothing changes (`timeout`
    /// after the wait started), if any are held.
    pub fn deadline(&self, timeout: Nanos) -> Option<Nanos> {
        (!self.held.is_empty()).then_some(self.since + timeout)
    }

    /// The timeout passed: every held segment goes up, in order.
    pub fn flush(&mut self, out: &mut Vec<Packet>) {
        if let Some(last) = self.held.last() {
            self.next = self.next.max(last.seq + 1);
        }
        out.append(&mut self.held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lb::testing::data;

    fn seqs(out: &[Packet]) -> Vec<u32> {
        out.iter().map(|p| p.seq).collect()
    }

    #[test]
    fn a_gap_holds_what_follows_until_it_fills() {
        let mut r = Resequencer::default();
        let mut out = Vec::new();
        for (t, s) in [(0, 0), (1, 2), (2, 3), (3, 1), (4, 4)] {
            r.arrive(t, data(0, s, 1), &mut out);
        }
        assert_eq!(seqs(&out), [0, 1, 2, 3, 4], "2 and 3 waited for 1");
        assert_eq!(r.deadline(100), None);
        // A duplicate of something handed up goes straight through.
        out.clear();
        r.arrive(5, data(0, 2, 1), &mut out);
        assert_eq!(seqs(&out), [2]);
    }

    #[test]
    fn a_timeout_flushes_everything_held() {
        let mut r = Resequencer::default();
        let mut out = Vec::new();
        r.arrive(0, data(0, 0, 1), &mut out);
        r.arrive(10, data(0, 3, 1), &mut out);
        r.arrive(20, data(0, 2, 1), &mut out);
        r.arrive(25, data(0, 3, 1), &mut out);
        assert_eq!((seqs(&out), r.deadline(100)), (vec![0], Some(110)), "the wait runs from the gap's opening");
        out.clear();
        r.flush(&mut out);
        assert_eq!(seqs(&out), [2, 3], "segment 1 was lost: TCP sees 2 and 3 now");
        out.clear();
        r.arrive(500, data(0, 1, 1), &mut out);
        r.arrive(501, data(0, 4, 1), &mut out);
        assert_eq!(seqs(&out), [1, 4], "the retransmission and what follows the flush go up at once");
    }
}
