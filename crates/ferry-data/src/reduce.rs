//! Applying reductions of a switch (D4): combining two slices and the neutral element used by
//! the `Init` data flow.
//!
//! The operator type is the collectives' [`ReduceOp`], so one value describes a reduction at
//! every layer. Built-in operators are defined for the primitive numeric element types; other
//! element types need [`ReduceOp::Custom`]. Integer sums and products wrap (never panic);
//! float min/max follow `f64::min`/`f64::max` (a NaN operand is ignored), the same rules as
//! `ferry-coll`, so a value reduced by a switch and one reduced by a collective agree bitwise.

use std::any::TypeId;

use ferry_coll::ReduceOp;
use ferry_core::{Element, Error, ErrorKind, Result};

/// Checks that `op` can be applied to `T`; `init` additionally requires a neutral element
/// (built-ins only: a custom operator has no known identity).
pub fn check<T: Element>(op: &ReduceOp<T>, init: bool) -> Result<()> {
    let builtin = !matches!(op, ReduceOp::Custom(_));
    if builtin && !is_numeric::<T>() {
        return Err(
            Error::new(ErrorKind::Unsupported, "switch").with_detail(format!(
            "built-in reduction {op:?} is not defined for element type {}; use ReduceOp::Custom",
            T::NAME
        )),
        );
    }
    if init && !builtin {
        return Err(Error::invalid(
            "switch",
            "the Init data flow needs a built-in reduction (a custom operator has no known \
             neutral element); initialise with Container::fill instead",
        ));
    }
    Ok(())
}

/// `acc[i] = acc[i] op x[i]` (acc is the left operand). Lengths must agree; the operator must
/// have passed [`check`].
pub fn combine<T: Element>(op: &ReduceOp<T>, acc: &mut [T], x: &[T]) {
    debug_assert_eq!(acc.len(), x.len());
    if let ReduceOp::Custom(f) = op {
        f(acc, x);
        return;
    }
    macro_rules! float {
        ($($t:ty),*) => { $(
            if let (Some(a), Some(b)) = (cast_mut::<T, $t>(acc), cast::<T, $t>(x)) {
                match op {
                    ReduceOp::Sum => a.iter_mut().zip(b).for_each(|(a, b)| *a += *b),
                    ReduceOp::Prod => a.iter_mut().zip(b).for_each(|(a, b)| *a *= *b),
                    ReduceOp::Min => a.iter_mut().zip(b).for_each(|(a, b)| *a = a.min(*b)),
                    ReduceOp::Max => a.iter_mut().zip(b).for_each(|(a, b)| *a = a.max(*b)),
                    ReduceOp::Custom(_) => {}
                }
                return;
            }
        )* };
    }
    macro_rules! int {
        ($($t:ty),*) => { $(
            if let (Some(a), Some(b)) = (cast_mut::<T, $t>(acc), cast::<T, $t>(x)) {
                match op {
                    ReduceOp::Sum => a.iter_mut().zip(b).for_each(|(a, b)| *a = a.wrapping_add(*b)),
                    ReduceOp::Prod => a.iter_mut().zip(b).for_each(|(a, b)| *a = a.wrapping_mul(*b)),
                    ReduceOp::Min => a.iter_mut().zip(b).for_each(|(a, b)| *a = (*a).min(*b)),
                    ReduceOp::Max => a.iter_mut().zip(b).for_each(|(a, b)| *a = (*a).max(*b)),
                    ReduceOp::Custom(_) => {}
                }
                return;
            }
        )* };
    }
    float!(f64, f32);
    int!(i64, i32, u64, u32, u8, i8, u16, i16, usize, isize);
}

/// The neutral element of a built-in operator for `T` (0 for Sum, 1 for Prod, the largest
/// value for Min, the smallest for Max; floats use the infinities).
pub fn identity<T: Element>(op: &ReduceOp<T>) -> Result<T> {
    check(op, true)?;
    let mut v = [T::default()];
    macro_rules! set {
        ($t:ty, $zero:expr, $one:expr, $max:expr, $min:expr) => {
            if let Some(s) = cast_mut::<T, $t>(&mut v) {
                s[0] = match op {
                    ReduceOp::Sum => $zero,
                    ReduceOp::Prod => $one,
                    ReduceOp::Min => $max,
                    ReduceOp::Max => $min,
                    ReduceOp::Custom(_) => $zero,
                };
                return Ok(v[0]);
            }
        };
    }
    set!(f64, 0.0, 1.0, f64::INFINITY, f64::NEG_INFINITY);
    set!(f32, 0.0, 1.0, f32::INFINITY, f32::NEG_INFINITY);
    macro_rules! ints {
        ($($t:ty),*) => { $( set!($t, 0, 1, <$t>::MAX, <$t>::MIN); )* };
    }
    ints!(i64, i32, u64, u32, u8, i8, u16, i16, usize, isize);
    Err(Error::new(ErrorKind::Unsupported, "switch")
        .with_detail(format!("no neutral element for {}", T::NAME)))
}

fn is_numeric<T: 'static>() -> bool {
    let id = TypeId::of::<T>();
    macro_rules! any_of {
        ($($t:ty),*) => { false $(|| id == TypeId::of::<$t>())* };
    }
    any_of!(f64, f32, i64, i32, u64, u32, u8, i8, u16, i16, usize, isize)
}

fn cast_mut<T: 'static, U: 'static>(s: &mut [T]) -> Option<&mut [U]> {
    if TypeId::of::<T>() == TypeId::of::<U>() {
        // SAFETY: equal TypeIds: T and U are the same type, so layout and length agree.
        Some(unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<U>(), s.len()) })
    } else {
        None
    }
}

fn cast<T: 'static, U: 'static>(s: &[T]) -> Option<&[U]> {
    if TypeId::of::<T>() == TypeId::of::<U>() {
        // SAFETY: equal TypeIds: T and U are the same type, so layout and length agree.
        Some(unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<U>(), s.len()) })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_and_identities() {
        let mut a = vec![1.0f64, 2.0];
        combine(&ReduceOp::Sum, &mut a, &[0.5, 0.25]);
        assert_eq!(a, vec![1.5, 2.25]);
        let mut i = vec![i32::MAX];
        combine(&ReduceOp::Sum, &mut i, &[1]);
        assert_eq!(i, vec![i32::MIN]);
        assert_eq!(identity::<f64>(&ReduceOp::Min).unwrap(), f64::INFINITY);
        assert_eq!(identity::<u8>(&ReduceOp::Max).unwrap(), 0);
        assert_eq!(identity::<i64>(&ReduceOp::Prod).unwrap(), 1);
        let custom = ReduceOp::<f64>::custom(|a, b| a.iter_mut().zip(b).for_each(|(a, b)| *a -= b));
        assert!(identity(&custom).is_err());
        let mut c = vec![5.0];
        combine(&custom, &mut c, &[2.0]);
        assert_eq!(c, vec![3.0]);
    }

    #[derive(Clone, Copy, Default, PartialEq, Debug)]
    #[repr(C)]
    struct P2(u32, u32);
    // SAFETY: two u32, no padding, every bit pattern valid.
    unsafe impl Element for P2 {
        const NAME: &'static str = "P2";
    }

    #[test]
    fn non_numeric_needs_custom() {
        assert!(check::<P2>(&ReduceOp::Sum, false).is_err());
        assert!(check::<P2>(&ReduceOp::custom(|_, _| {}), false).is_ok());
    }
}
