//! Positions of live members and the two overlays built on them: the agreement's binomial tree
//! and the flood's log-distance neighbours. All lookups cost O(dead) per position, so a view
//! change at 10,000 ranks with a handful of failures costs O(f log N), not O(N).

use std::collections::BTreeSet;

/// The live members of a view: `members` (sorted, distinct) minus `dead`, in member order.
pub(crate) struct Live<'a> {
    members: &'a [u32],
    /// Member indices of the dead, ascending.
    dead: Vec<usize>,
}

impl<'a> Live<'a> {
    /// `dead` may name ranks that are not members; they are ignored.
    pub fn new(members: &'a [u32], dead: &BTreeSet<u32>) -> Live<'a> {
        let dead = dead
            .iter()
            .filter_map(|r| members.binary_search(r).ok())
            .collect();
        Live { members, dead }
    }

    /// Number of live members.
    pub fn len(&self) -> usize {
        self.members.len() - self.dead.len()
    }

    /// Live position of `rank`, None if it is dead or not a member.
    pub fn position(&self, rank: u32) -> Option<usize> {
        let m = self.members.binary_search(&rank).ok()?;
        match self.dead.binary_search(&m) {
            Ok(_) => None,
            Err(before) => Some(m - before),
        }
    }

    /// The rank at live position `j` (< len()).
    pub fn rank_at(&self, j: usize) -> Option<u32> {
        let mut m = j;
        for &d in &self.dead {
            if d <= m {
                m += 1;
            } else {
                break;
            }
        }
        self.members.get(m).copied()
    }

    /// Parent of live position `i` in the binomial tree rooted at position 0: `i` without its
    /// highest set bit.
    pub fn parent(&self, i: usize) -> Option<u32> {
        if i == 0 {
            return None;
        }
        let high = usize::BITS - 1 - i.leading_zeros();
        self.rank_at(i & !(1 << high))
    }

    /// Children of live position `i`: `i + 2^k` for every `2^k > i` below len(), nearest first.
    pub fn children(&self, i: usize) -> Vec<u32> {
        let n = self.len();
        let mut out = Vec::new();
        let mut step = if i == 0 {
            1
        } else {
            1usize << (usize::BITS - i.leading_zeros())
        };
        while let Some(c) = i.checked_add(step).filter(|&c| c < n) {
            if let Some(r) = self.rank_at(c) {
                out.push(r);
            }
            match step.checked_mul(2) {
                Some(s) => step = s,
                None => break,
            }
        }
        out
    }

    /// The flood neighbours of live position `i`: the live members at distances 1, 2, 4, ...
    /// after it, cyclically, without itself and without repeats.
    pub fn neighbours(&self, i: usize) -> Vec<u32> {
        let n = self.len();
        let mut out: Vec<u32> = Vec::new();
        let mut step = 1usize;
        while step < n {
            if let Some(r) = self.rank_at((i + step) % n) {
                if !out.contains(&r) {
                    out.push(r);
                }
            }
            step *= 2;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(r: &[u32]) -> BTreeSet<u32> {
        r.iter().copied().collect()
    }

    /// Every live member but the root has exactly one parent, which lists it as a child, and
    /// the depth is at most ceil(log2 n).
    #[test]
    fn binomial_tree_spans_the_live_members() {
        let members: Vec<u32> = (0..70).map(|i| i * 3 + 1).collect();
        for dead in [set(&[]), set(&[1]), set(&[1, 4, 100, 208]), set(&[5, 7])] {
            let live = Live::new(&members, &dead);
            let n = live.len();
            let mut seen_as_child = BTreeSet::new();
            for i in 0..n {
                let me = live.rank_at(i).unwrap();
                assert!(!dead.contains(&me));
                assert_eq!(live.position(me), Some(i));
                for c in live.children(i) {
                    let ci = live.position(c).unwrap();
                    assert_eq!(live.parent(ci), Some(me));
                    assert!(seen_as_child.insert(c));
                }
                let mut depth = 0;
                let mut at = i;
                while let Some(p) = live.parent(at) {
                    at = live.position(p).unwrap();
                    depth += 1;
                }
                assert!(depth <= 7, "depth {depth} at {i}");
            }
            assert_eq!(seen_as_child.len(), n - 1);
            for d in &dead {
                assert_eq!(live.position(*d), None);
            }
        }
    }

    #[test]
    fn neighbours_skip_the_dead_and_cover_log_distances() {
        let members: Vec<u32> = (0..10).collect();
        let live = Live::new(&members, &set(&[1, 2]));
        // Live: 0 3 4 5 6 7 8 9 (8 members); from 0: distances 1, 2, 4.
        assert_eq!(live.neighbours(0), vec![3, 4, 6]);
        assert_eq!(live.neighbours(7), vec![0, 3, 5]);
        let alone = Live::new(&members, &(1..10).collect());
        assert!(alone.neighbours(0).is_empty());
        assert!(alone.children(0).is_empty());
    }
}
