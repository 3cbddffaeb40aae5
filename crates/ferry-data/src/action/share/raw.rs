//! Buffers that peers read while this rank works on them: raw-pointer access only.
//!
//! During an offer, readers copy cells out of this rank's current buffer through their own
//! mapping of it. In an in-place switch this rank writes its received cells into that same
//! buffer meanwhile (other cells than the ones read). Any reference spanning the buffer
//! (`&mut [T]`, or `&[T]` held across a write) would claim the readers' cells too: for ranks
//! that are threads of one process that is undefined behaviour (Stacked Borrows sees a peer's
//! read invalidate the reference), and for processes it is a promise Rust cannot check. So
//! while an offer stands every access to the buffer goes through the raw pointer derived
//! from the region, one box at a time, and touches only that box's cells.

use std::marker::PhantomData;

use ferry_core::Element;

use crate::action::{BoxCopy, Place};
use crate::storage::Storage;
use crate::MAX_DIMS;

/// `len` elements at `ptr` (see the module documentation for who else touches them).
#[derive(Clone, Copy)]
pub(super) struct Raw<T> {
    pub(super) ptr: *mut T,
    pub(super) len: usize,
}

impl<T> Raw<T> {
    /// A read-only view of a slice (the copies below never write a source).
    fn of(s: &[T]) -> Raw<T> {
        Raw {
            ptr: s.as_ptr().cast_mut(),
            len: s.len(),
        }
    }

    fn of_mut(s: &mut [T]) -> Raw<T> {
        Raw {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        }
    }
}

/// Highest element offset a place reaches for a box of extents `ext`, or None if it
/// overflows (places can come from a peer's message) or the box is empty.
pub(super) fn reach(p: &Place, ext: [usize; MAX_DIMS]) -> Option<usize> {
    let mut last = p.off;
    for (e, st) in ext.iter().zip(p.st) {
        last = last.checked_add(e.checked_sub(1)?.checked_mul(st)?)?;
    }
    Some(last)
}

/// Copies a box from `src` to `dst`, row by row; false (nothing copied) when a place reaches
/// beyond its buffer. An empty box copies nothing and succeeds.
///
/// # Safety
/// `src` must be readable and `dst` writable for their `len` elements during the call, the
/// two must not overlap, and nobody else may access the cells of the box in `dst` meanwhile.
pub(super) unsafe fn copy_raw<T: Element>(
    src: Raw<T>,
    s: Place,
    dst: Raw<T>,
    d: Place,
    ext: [usize; MAX_DIMS],
    generic: bool,
) -> bool {
    if ext.contains(&0) {
        return true;
    }
    let fits = |p: &Place, len: usize| reach(p, ext).is_some_and(|last| last < len);
    if !fits(&s, src.len) || !fits(&d, dst.len) {
        return false;
    }
    let [ex, ey, ez] = ext;
    for z in 0..ez {
        for y in 0..ey {
            let so = s.off + y * s.st[1] + z * s.st[2];
            let dof = d.off + y * d.st[1] + z * d.st[2];
            if !generic && s.st[0] == 1 && d.st[0] == 1 {
                // SAFETY: both rows are inside their buffers (the reach checks above) and the
                // buffers do not overlap (the caller's promise).
                unsafe { std::ptr::copy_nonoverlapping(src.ptr.add(so), dst.ptr.add(dof), ex) };
            } else {
                for x in 0..ex {
                    // SAFETY: as above, element by element.
                    unsafe {
                        dst.ptr
                            .add(dof + x * d.st[0])
                            .write(src.ptr.add(so + x * s.st[0]).read())
                    };
                }
            }
        }
    }
    true
}

/// The buffers of one execution: separate old and new (this rank's readers copy from `old`,
/// which nobody writes), or one buffer in place, which readers copy from while this rank
/// writes its received cells into it (see the module documentation).
pub(crate) struct Bufs<'a, T> {
    old: Raw<T>,
    new: Raw<T>,
    two: bool,
    _borrow: PhantomData<&'a mut [T]>,
}

impl<'a, T: Element> Bufs<'a, T> {
    /// Old and new in two buffers.
    pub(crate) fn two(old: &'a [T], new: &'a mut [T]) -> Bufs<'a, T> {
        Bufs {
            old: Raw::of(old),
            new: Raw::of_mut(new),
            two: true,
            _borrow: PhantomData,
        }
    }

    /// The first `total` elements of `storage`'s current buffer, in place (fewer if the
    /// buffer is shorter: the execution checks the length against its layouts).
    pub(crate) fn in_place(storage: &'a mut Storage<T>, total: usize) -> Bufs<'a, T> {
        let (ptr, len) = storage.cur_raw();
        let raw = Raw {
            ptr,
            len: len.min(total),
        };
        Bufs {
            old: raw,
            new: raw,
            two: false,
            _borrow: PhantomData,
        }
    }

    pub(super) fn old_len(&self) -> usize {
        self.old.len
    }

    pub(super) fn new_len(&self) -> usize {
        self.new.len
    }

    pub(super) fn is_two(&self) -> bool {
        self.two
    }

    /// Copies box `c` of the old buffer into a message buffer.
    pub(super) fn pack(&self, c: &BoxCopy, out: &mut [T], generic: bool) -> bool {
        // SAFETY: `old` lives for 'a and is only read (by this rank and its readers); `out`
        // is this rank's own message buffer.
        unsafe { copy_raw(self.old, c.src, Raw::of_mut(out), c.dst, c.ext, generic) }
    }

    /// Copies box `c` of a received message into the new buffer.
    pub(super) fn unpack(&mut self, msg: &[T], c: &BoxCopy, generic: bool) -> bool {
        // SAFETY: `new` is writable for 'a; the box's cells are this rank's received cells,
        // which no reader copies (readers copy cells this rank owned before the switch).
        unsafe { copy_raw(Raw::of(msg), c.src, self.new, c.dst, c.ext, generic) }
    }

    /// Copies a kept box from the old buffer to the new one (two buffers only).
    pub(super) fn local(&mut self, c: &BoxCopy, generic: bool) -> bool {
        // SAFETY: two distinct buffers (`two`), old only read, new this rank's alone.
        self.two && unsafe { copy_raw(self.old, c.src, self.new, c.dst, c.ext, generic) }
    }

    /// Copies a box out of a peer's memory (`len` elements at `src`) into the new buffer.
    ///
    /// # Safety
    /// `src` must be readable for `len` elements during the call, in memory this rank does
    /// not write.
    pub(super) unsafe fn pull(
        &mut self,
        src: *const T,
        len: usize,
        s: Place,
        c: &BoxCopy,
        generic: bool,
    ) -> bool {
        let src = Raw {
            ptr: src.cast_mut(),
            len,
        };
        // SAFETY: the caller's promise for `src`; `new` as in `unpack`.
        unsafe { copy_raw(src, s, self.new, c.dst, c.ext, generic) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::copy_box;

    #[test]
    fn places_from_a_peer_are_checked_without_overflow() {
        let p = Place {
            off: 3,
            st: [1, 10, 100],
        };
        assert_eq!(reach(&p, [4, 2, 1]), Some(3 + 3 + 10));
        let huge = Place {
            off: usize::MAX - 1,
            st: [1, 1, 1],
        };
        assert_eq!(reach(&huge, [3, 1, 1]), None);
        assert_eq!(reach(&p, [0, 1, 1]), None, "an empty box reaches nothing");
    }

    #[test]
    fn raw_box_copy_matches_the_slice_copy_and_refuses_out_of_bounds() {
        let src: Vec<u32> = (0..200).collect();
        let s = Place {
            off: 5,
            st: [1, 12, 60],
        };
        let d = Place {
            off: 2,
            st: [1, 7, 40],
        };
        for generic in [false, true] {
            let mut a = vec![0u32; 150];
            let mut b = vec![0u32; 150];
            copy_box(&src, s, &mut a, d, [6, 3, 2], generic);
            // SAFETY: two distinct vectors, alive for the call.
            assert!(unsafe {
                copy_raw(Raw::of(&src), s, Raw::of_mut(&mut b), d, [6, 3, 2], generic)
            });
            assert_eq!(a, b);
            assert!(a.iter().any(|&v| v != 0));
            let mut short = vec![0u32; 50];
            // SAFETY: as above.
            let ok = unsafe {
                copy_raw(
                    Raw::of(&src),
                    s,
                    Raw::of_mut(&mut short),
                    d,
                    [6, 3, 2],
                    generic,
                )
            };
            assert!(!ok, "the box reaches element 90 of 50");
            assert!(short.iter().all(|&v| v == 0), "nothing copied");
        }
    }
}
