//! A fixed-length heap buffer held by raw pointer, so that a started persistent collective can
//! lend byte ranges of it to a posted exchange while the collective itself is moved around by
//! its owner (a `Box` or `Vec` field would assert unique access on every move).

use std::ops::Range;
use std::ptr::NonNull;

use ferry_core::Element;

/// `len` elements of `T` on the heap, freed on drop.
pub(crate) struct RawBuf<T: Element> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: a RawBuf is the unique owner of its allocation (like a Box<[T]>), and `T: Element`
// is Send + Sync plain data.
unsafe impl<T: Element> Send for RawBuf<T> {}
// SAFETY: shared access only reads (`as_slice`, `bytes`), as for a Box<[T]>.
unsafe impl<T: Element> Sync for RawBuf<T> {}

impl<T: Element> RawBuf<T> {
    /// Takes over the elements of `v`.
    pub fn from_vec(v: Vec<T>) -> RawBuf<T> {
        let b: Box<[T]> = v.into_boxed_slice();
        let len = b.len();
        // A boxed slice's pointer is never null (dangling but aligned when empty).
        let raw = Box::into_raw(b) as *mut T;
        RawBuf {
            ptr: NonNull::new(raw).unwrap_or(NonNull::dangling()),
            len,
        }
    }

    /// `n` default elements, or `None` when they cannot be allocated.
    pub fn zeroed(n: usize) -> Option<RawBuf<T>> {
        let mut v = Vec::new();
        v.try_reserve_exact(n).ok()?;
        v.resize(n, T::default());
        Some(RawBuf::from_vec(v))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `ptr` points to `len` initialised elements owned by `self`; the shared
        // borrow of `self` keeps them alive and unwritten through `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as `as_slice`, and the unique borrow of `self` makes this view unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Byte range `r` of the buffer, for an exchange that outlives any borrow of `self`.
    ///
    /// # Safety
    /// `r` lies within the buffer's bytes; the caller keeps the buffer alive and writes no byte
    /// of `r` until the returned slice is gone.
    pub unsafe fn bytes(&self, r: Range<usize>) -> &'static [u8] {
        debug_assert!(r.start <= r.end && r.end <= std::mem::size_of::<T>() * self.len);
        // SAFETY: by the caller's contract the range is inside the allocation, which stays
        // alive and unwritten while the slice lives; `T: Element` has no padding, so every
        // byte is initialised.
        unsafe {
            std::slice::from_raw_parts((self.ptr.as_ptr() as *const u8).add(r.start), r.len())
        }
    }

    /// Byte range `r` of the buffer, writable, for an exchange that outlives any borrow.
    ///
    /// # Safety
    /// As [`RawBuf::bytes`], and no other view of any byte of `r` is used until the returned
    /// slice is gone.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut(&self, r: Range<usize>) -> &'static mut [u8] {
        debug_assert!(r.start <= r.end && r.end <= std::mem::size_of::<T>() * self.len);
        // SAFETY: by the caller's contract the range is inside the live allocation and this
        // is the only view of it; every bit pattern is a valid `T` (`Element`).
        unsafe {
            std::slice::from_raw_parts_mut((self.ptr.as_ptr() as *mut u8).add(r.start), r.len())
        }
    }
}

impl<T: Element> Drop for RawBuf<T> {
    fn drop(&mut self) {
        let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        // SAFETY: `ptr`/`len` came from `Box::into_raw` of a boxed slice of exactly `len`
        // elements, and this is the only place that frees it, once.
        drop(unsafe { Box::from_raw(slice) });
    }
}
