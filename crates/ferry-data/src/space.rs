//! Index spaces and ranges of 1 to 3 dimensions (D1).
//!
//! A [`Space`] is the set of global indexes a container is defined over: a box `[from, to)` per
//! dimension. A [`Range`] is a box inside a space; partitionings hand out ranges to tasks and
//! transitions are computed as set operations on ranges. Dimension 0 is x, 1 is y, 2 is z
//! (examples.md conventions). Unused dimensions of a lower-dimensional range are `[0, 1)`, so
//! that sizes, intersections and loops work the same for every dimension count.

use std::fmt;

use ferry_core::{Error, Result};

/// Highest number of dimensions of an index space.
pub const MAX_DIMS: usize = 3;

/// A global index; unused dimensions are 0.
pub type Index = [i64; MAX_DIMS];

/// A half-open box `[from, to)` in 1, 2 or 3 dimensions (D1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Range {
    dims: u8,
    from: Index,
    to: Index,
}

impl Range {
    /// The 1d range `[from, to)`.
    pub fn new1(from: i64, to: i64) -> Range {
        Range {
            dims: 1,
            from: [from, 0, 0],
            to: [to, 1, 1],
        }
    }

    /// The 2d box `[x0, x1) x [y0, y1)`.
    pub fn new2(x0: i64, x1: i64, y0: i64, y1: i64) -> Range {
        Range {
            dims: 2,
            from: [x0, y0, 0],
            to: [x1, y1, 1],
        }
    }

    /// The 3d box `[x0, x1) x [y0, y1) x [z0, z1)`.
    pub fn new3(x0: i64, x1: i64, y0: i64, y1: i64, z0: i64, z1: i64) -> Range {
        Range {
            dims: 3,
            from: [x0, y0, z0],
            to: [x1, y1, z1],
        }
    }

    /// A box of `dims` dimensions from corner arrays; entries beyond `dims` are normalised to
    /// `[0, 1)`. Fails for a dimension count outside 1..=3.
    pub fn from_corners(dims: usize, from: Index, to: Index) -> Result<Range> {
        if !(1..=MAX_DIMS).contains(&dims) {
            return Err(Error::invalid(
                "range",
                format!("{dims} dimensions; index spaces have 1 to {MAX_DIMS}"),
            ));
        }
        let mut r = Range {
            dims: dims as u8,
            from,
            to,
        };
        for d in dims..MAX_DIMS {
            r.from[d] = 0;
            r.to[d] = 1;
        }
        Ok(r)
    }

    /// Number of dimensions (1 to 3).
    pub fn dims(&self) -> usize {
        self.dims as usize
    }

    /// Lower corner (inclusive).
    pub fn from(&self) -> Index {
        self.from
    }

    /// Upper corner (exclusive).
    pub fn to(&self) -> Index {
        self.to
    }

    /// Extent in dimension `d` (0 when empty in that dimension).
    pub fn extent(&self, d: usize) -> u64 {
        (self.to[d] - self.from[d]).max(0) as u64
    }

    /// Extents of all three dimensions.
    pub fn extents(&self) -> [u64; MAX_DIMS] {
        [self.extent(0), self.extent(1), self.extent(2)]
    }

    /// Number of indexes in the box.
    pub fn size(&self) -> u64 {
        self.extent(0) * self.extent(1) * self.extent(2)
    }

    /// Whether the box holds no index.
    pub fn is_empty(&self) -> bool {
        (0..MAX_DIMS).any(|d| self.to[d] <= self.from[d])
    }

    /// Whether `idx` lies inside.
    pub fn contains(&self, idx: &Index) -> bool {
        (0..MAX_DIMS).all(|d| self.from[d] <= idx[d] && idx[d] < self.to[d])
    }

    /// Whether `other` lies completely inside (an empty `other` always does).
    pub fn contains_range(&self, other: &Range) -> bool {
        other.is_empty()
            || (0..MAX_DIMS).all(|d| self.from[d] <= other.from[d] && other.to[d] <= self.to[d])
    }

    /// The common part of two boxes, `None` if it is empty.
    pub fn intersect(&self, other: &Range) -> Option<Range> {
        let mut r = *self;
        for d in 0..MAX_DIMS {
            r.from[d] = self.from[d].max(other.from[d]);
            r.to[d] = self.to[d].min(other.to[d]);
            if r.to[d] <= r.from[d] {
                return None;
            }
        }
        Some(r)
    }

    /// The smallest box holding both (bounding box).
    pub fn union_box(&self, other: &Range) -> Range {
        let mut r = *self;
        for d in 0..MAX_DIMS {
            r.from[d] = self.from[d].min(other.from[d]);
            r.to[d] = self.to[d].max(other.to[d]);
        }
        r
    }

    /// Appends the parts of `self` not covered by `cut` to `out`, as at most `2 * dims`
    /// disjoint boxes (slabs peeled off dimension by dimension, z first, so that the pieces
    /// stay long in x, the contiguous dimension).
    pub fn subtract_into(&self, cut: &Range, out: &mut Vec<Range>) {
        let Some(inner) = self.intersect(cut) else {
            if !self.is_empty() {
                out.push(*self);
            }
            return;
        };
        let mut rest = *self;
        for d in (0..MAX_DIMS).rev() {
            if rest.from[d] < inner.from[d] {
                let mut low = rest;
                low.to[d] = inner.from[d];
                out.push(low);
                rest.from[d] = inner.from[d];
            }
            if inner.to[d] < rest.to[d] {
                let mut high = rest;
                high.from[d] = inner.to[d];
                out.push(high);
                rest.to[d] = inner.to[d];
            }
        }
    }

    /// The box grown by `depth` in every used dimension, clipped to `bound`.
    pub fn grow_clipped(&self, depth: i64, bound: &Range) -> Range {
        let mut r = *self;
        for d in 0..self.dims() {
            r.from[d] = (self.from[d] - depth).max(bound.from[d]);
            r.to[d] = (self.to[d] + depth).min(bound.to[d]);
        }
        r
    }

    /// Replaces the extent of dimension `d` by `[from, to)`.
    pub fn with_dim(mut self, d: usize, from: i64, to: i64) -> Range {
        if d < MAX_DIMS {
            self.from[d] = from;
            self.to[d] = to;
        }
        self
    }
}

impl fmt::Debug for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {})", self.from[0], self.to[0])?;
        for d in 1..self.dims() {
            write!(f, " x [{}, {})", self.from[d], self.to[d])?;
        }
        Ok(())
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// An index space: the box of all valid global indexes of containers defined over it (D1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Space {
    range: Range,
}

impl Space {
    /// The 1d space `[0, n)`.
    pub fn new1(n: u64) -> Result<Space> {
        Space::from_range(Range::new1(0, to_i64(n)?))
    }

    /// The 2d space `[0, nx) x [0, ny)`.
    pub fn new2(nx: u64, ny: u64) -> Result<Space> {
        Space::from_range(Range::new2(0, to_i64(nx)?, 0, to_i64(ny)?))
    }

    /// The 3d space `[0, nx) x [0, ny) x [0, nz)`.
    pub fn new3(nx: u64, ny: u64, nz: u64) -> Result<Space> {
        Space::from_range(Range::new3(0, to_i64(nx)?, 0, to_i64(ny)?, 0, to_i64(nz)?))
    }

    /// A space over an arbitrary box (negative bounds allowed). Fails for an empty box: a
    /// container over no index cannot be distributed.
    pub fn from_range(range: Range) -> Result<Space> {
        if range.is_empty() {
            return Err(Error::invalid(
                "space",
                format!("index space {range:?} is empty"),
            ));
        }
        Ok(Space { range })
    }

    /// Number of dimensions.
    pub fn dims(&self) -> usize {
        self.range.dims()
    }

    /// The box of all indexes.
    pub fn range(&self) -> Range {
        self.range
    }

    /// Number of indexes.
    pub fn size(&self) -> u64 {
        self.range.size()
    }
}

fn to_i64(n: u64) -> Result<i64> {
    i64::try_from(n).map_err(|_| Error::invalid("space", format!("extent {n} too large")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn basic_box_ops() {
        let a = Range::new2(0, 10, 0, 10);
        let b = Range::new2(5, 15, 5, 15);
        assert_eq!(a.intersect(&b), Some(Range::new2(5, 10, 5, 10)));
        assert_eq!(a.size(), 100);
        assert!(Range::new1(3, 3).is_empty());
        assert_eq!(Range::new1(0, 4).intersect(&Range::new1(4, 8)), None);
        let g = Range::new2(0, 4, 0, 4).grow_clipped(1, &a);
        assert_eq!(g, Range::new2(0, 5, 0, 5));
        assert!(Space::new1(0).is_err());
        assert!(Range::from_corners(4, [0; 3], [1; 3]).is_err());
    }

    fn arb_range() -> impl Strategy<Value = Range> {
        (0i64..8, 0i64..8, 0i64..8, 1i64..6, 1i64..6, 1i64..6)
            .prop_map(|(x, y, z, a, b, c)| Range::new3(x, x + a, y, y + b, z, z + c))
    }

    proptest! {
        /// `a \ b` plus `a ∩ b` covers `a` exactly once.
        #[test]
        fn subtract_partitions_the_box(a in arb_range(), b in arb_range()) {
            let mut parts = Vec::new();
            a.subtract_into(&b, &mut parts);
            if let Some(i) = a.intersect(&b) { parts.push(i); }
            let total: u64 = parts.iter().map(|p| p.size()).sum();
            prop_assert_eq!(total, a.size());
            for (i, p) in parts.iter().enumerate() {
                prop_assert!(a.contains_range(p));
                for q in &parts[i + 1..] {
                    prop_assert!(p.intersect(q).is_none());
                }
            }
        }
    }
}
