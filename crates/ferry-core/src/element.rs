//! Plain-old-data element types that can travel as bytes.

/// A fixed-size, plain-old-data value that may be sent as its in-memory bytes.
///
/// # Safety
/// Implementors must have no padding, no pointers and every bit pattern of their size must be a
/// valid value (so that bytes from a peer can be reinterpreted safely).
pub unsafe trait Element:
    Copy + Send + Sync + Default + PartialEq + std::fmt::Debug + 'static
{
    /// Short type name for logs and error messages.
    const NAME: &'static str;
}

macro_rules! element {
    ($($t:ty),*) => { $(
        // SAFETY: primitive numeric types have no padding and every bit pattern is valid.
        unsafe impl Element for $t { const NAME: &'static str = stringify!($t); }
    )* };
}
element!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, usize, isize);

/// Views a slice of elements as bytes.
pub fn as_bytes<T: Element>(s: &[T]) -> &[u8] {
    // SAFETY: T is plain old data (Element's contract); the byte view covers exactly the slice.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
}

/// Views a mutable slice of elements as bytes.
pub fn as_bytes_mut<T: Element>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; any byte pattern written is a valid T (Element's contract).
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
}

/// Copies bytes into a vector of elements; `None` if the length is not a multiple of the
/// element size.
pub fn from_bytes<T: Element>(bytes: &[u8]) -> Option<Vec<T>> {
    let size = std::mem::size_of::<T>();
    if size == 0 || !bytes.len().is_multiple_of(size) {
        return None;
    }
    let mut out = vec![T::default(); bytes.len() / size];
    as_bytes_mut(&mut out).copy_from_slice(bytes);
    Some(out)
}

/// Copies bytes into an existing slice of elements; `false` if the lengths differ.
pub fn copy_from_bytes<T: Element>(dst: &mut [T], bytes: &[u8]) -> bool {
    let d = as_bytes_mut(dst);
    if d.len() != bytes.len() {
        return false;
    }
    d.copy_from_slice(bytes);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let v = [1.5f64, -2.0, 3.25];
        let b = as_bytes(&v);
        assert_eq!(b.len(), 24);
        assert_eq!(from_bytes::<f64>(b).unwrap(), v);
        assert!(from_bytes::<f64>(&b[..7]).is_none());
        let mut w = [0f64; 3];
        assert!(copy_from_bytes(&mut w, b));
        assert_eq!(w, v);
    }
}
