//! Taking packets off the front of the model's FIFOs (queue disciplines,
//! device queues, links, delay stages) so that their memory stays warm.
//!
//! A `VecDeque` is a ring: its head walks around the whole allocation
//! whatever its length, so a FIFO that once held 250 packets (10 KB) keeps
//! writing each new packet to a line it has not touched for a while, even
//! when it holds two. Most of the model's FIFOs empty often; moving the
//! head back to the start of the allocation when one does keeps a short
//! queue on the same few cache lines. It changes no packet's order.

use std::collections::VecDeque;

/// `fifo`'s front element, the ring's head moved back to the start of
/// its allocation when that empties it.
#[inline]
pub fn pop_front<T>(fifo: &mut VecDeque<T>) -> Option<T> {
    let front = fifo.pop_front();
    if fifo.is_empty() {
        // `clear` on an empty deque only resets its head.
        fifo.clear();
    }
    front
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_order_and_rewinds_when_empty() {
        let mut q: VecDeque<u32> = VecDeque::with_capacity(8);
        let cap = q.capacity() as u32;
        // Walk the head to the last slot, emptying the ring on the way.
        q.extend(0..cap - 1);
        let popped: Vec<u32> = std::iter::from_fn(|| pop_front(&mut q)).collect();
        assert_eq!(popped, (0..cap - 1).collect::<Vec<_>>());
        assert_eq!(pop_front(&mut q), None);
        // Emptied: the next packets start at the front of the allocation
        // instead of wrapping around its end.
        q.extend([7, 8]);
        assert_eq!(q.as_slices(), (&[7, 8][..], &[][..]));
        assert_eq!(q.capacity() as u32, cap);
    }
}
