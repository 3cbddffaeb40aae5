//! Reduction operators: built-in Sum/Prod/Min/Max over the numeric [`Element`] types and
//! user-defined operators over typed slices (M4, D4).

use std::any::TypeId;
use std::fmt;
use std::sync::Arc;

use ferry_core::{Element, Error, ErrorKind, Result};

/// A user-defined reduction: `f(acc, x)` must set `acc[i] = acc[i] op x[i]` for every `i`
/// (`acc` is the *left* operand). Both slices have the same length. The operator is applied
/// element-wise to arbitrary sub-ranges (pipelined and ring algorithms cut the data into
/// segments), so `acc[i]` may depend only on `acc[i]` and `x[i]`; values that belong together
/// go into one composite [`Element`] type.
pub type CustomOp<T> = Arc<dyn Fn(&mut [T], &[T]) + Send + Sync>;

/// How values of the ranks are combined.
///
/// Every algorithm combines the ranks' contributions in group-index order (lower index on the
/// left); only the parenthesisation differs between algorithms (see [`crate::ReduceOrder`]).
/// A custom operator therefore only needs to be associative; commutativity is not assumed,
/// except by [`crate::Algorithm::Ring`], which refuses custom operators.
///
/// Integer `Sum` and `Prod` wrap on overflow (two's complement), so they never panic and are
/// associative and commutative; float `Min`/`Max` ignore a NaN operand (`f64::min` rules).
pub enum ReduceOp<T> {
    /// Addition (wrapping for integers).
    Sum,
    /// Multiplication (wrapping for integers).
    Prod,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// A user-defined associative operator, see [`CustomOp`].
    Custom(CustomOp<T>),
}

impl<T> Clone for ReduceOp<T> {
    fn clone(&self) -> Self {
        match self {
            ReduceOp::Sum => ReduceOp::Sum,
            ReduceOp::Prod => ReduceOp::Prod,
            ReduceOp::Min => ReduceOp::Min,
            ReduceOp::Max => ReduceOp::Max,
            ReduceOp::Custom(f) => ReduceOp::Custom(Arc::clone(f)),
        }
    }
}

impl<T> fmt::Debug for ReduceOp<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReduceOp::Sum => "Sum",
            ReduceOp::Prod => "Prod",
            ReduceOp::Min => "Min",
            ReduceOp::Max => "Max",
            ReduceOp::Custom(_) => "Custom",
        })
    }
}

impl<T: Element> ReduceOp<T> {
    /// A user-defined operator from a closure `f(acc, x)` computing `acc = acc op x`.
    pub fn custom(f: impl Fn(&mut [T], &[T]) + Send + Sync + 'static) -> ReduceOp<T> {
        ReduceOp::Custom(Arc::new(f))
    }

    /// Whether the operator may be applied with its operands swapped without changing the
    /// result bits. True for the built-ins, false for custom operators.
    pub fn is_commutative(&self) -> bool {
        !matches!(self, ReduceOp::Custom(_))
    }

    /// Checks that the operator can be applied to `T` (built-ins need a numeric type).
    pub fn check(&self, op: &'static str) -> Result<()> {
        if matches!(self, ReduceOp::Custom(_)) || numeric_kind::<T>().is_some() {
            Ok(())
        } else {
            Err(Error::new(ErrorKind::Unsupported, op).with_detail(format!(
                "built-in reduction {self:?} is not defined for element type {}; use ReduceOp::Custom",
                T::NAME
            )))
        }
    }

    /// `acc[i] = acc[i] op x[i]` (`acc` is the left operand), for callers outside the
    /// collectives that combine contributions themselves (the data layer's switches), so that
    /// one definition of every operator serves all layers. Lengths must agree and the operator
    /// must have passed [`ReduceOp::check`]; otherwise `acc` is left unchanged.
    pub fn combine(&self, acc: &mut [T], x: &[T]) {
        if acc.len() == x.len() {
            self.apply(acc, x);
        }
    }

    /// The neutral element of a built-in operator for `T`: 0 for Sum, 1 for Prod, the largest
    /// value for Min and the smallest for Max (floats use the infinities). Custom operators
    /// have no known neutral element and give an error naming `op`.
    pub fn identity(&self, op: &'static str) -> Result<T> {
        self.check(op)?;
        if matches!(self, ReduceOp::Custom(_)) {
            return Err(Error::invalid(
                op,
                "a custom reduction has no known neutral element",
            ));
        }
        let mut v = [T::default()];
        macro_rules! set {
            ($t:ty, $zero:expr, $one:expr, $max:expr, $min:expr) => {
                if let Some(s) = cast_mut::<T, $t>(&mut v) {
                    s[0] = match self {
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
        Err(Error::new(ErrorKind::Unsupported, op)
            .with_detail(format!("no neutral element for {}", T::NAME)))
    }

    /// `acc[i] = acc[i] op x[i]`. The caller guarantees equal lengths and a checked operator.
    pub(crate) fn apply(&self, acc: &mut [T], x: &[T]) {
        debug_assert_eq!(acc.len(), x.len());
        match self {
            ReduceOp::Custom(f) => f(acc, x),
            builtin => apply_builtin(builtin, acc, x),
        }
    }

    /// `acc[i] = x[i] op acc[i]`: combines with `acc` as the *right* operand, keeping the
    /// group-index order when the left partial arrived from a lower-indexed peer.
    pub(crate) fn apply_left(&self, x: &[T], acc: &mut [T], scratch: &mut Vec<T>) {
        if self.is_commutative() {
            // The built-ins give the same bits either way round.
            self.apply(acc, x);
        } else {
            scratch.clear();
            scratch.extend_from_slice(x);
            self.apply(scratch, acc);
            acc.copy_from_slice(scratch);
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Int,
    Float,
}

fn numeric_kind<T: 'static>() -> Option<Kind> {
    let id = TypeId::of::<T>();
    macro_rules! any_of {
        ($($t:ty),*) => { false $(|| id == TypeId::of::<$t>())* };
    }
    if any_of!(u8, i8, u16, i16, u32, i32, u64, i64, usize, isize) {
        Some(Kind::Int)
    } else if any_of!(f32, f64) {
        Some(Kind::Float)
    } else {
        None
    }
}

/// Reinterprets `&mut [T]` as `&mut [U]` when `T` and `U` are the same type.
fn cast_mut<T: 'static, U: 'static>(s: &mut [T]) -> Option<&mut [U]> {
    if TypeId::of::<T>() == TypeId::of::<U>() {
        // SAFETY: T and U are the same type (equal TypeIds), so layout and length agree.
        Some(unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<U>(), s.len()) })
    } else {
        None
    }
}

fn cast<T: 'static, U: 'static>(s: &[T]) -> Option<&[U]> {
    if TypeId::of::<T>() == TypeId::of::<U>() {
        // SAFETY: T and U are the same type (equal TypeIds), so layout and length agree.
        Some(unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<U>(), s.len()) })
    } else {
        None
    }
}

fn apply_builtin<T: Element>(op: &ReduceOp<T>, acc: &mut [T], x: &[T]) {
    macro_rules! ints {
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
    macro_rules! floats {
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
    match numeric_kind::<T>() {
        Some(Kind::Float) => {
            floats!(f64, f32);
        }
        Some(Kind::Int) => {
            ints!(i32, i64, u64, u32, usize, isize, u8, i8, u16, i16);
        }
        // Unreachable after `check`; leaving `acc` untouched is the harmless choice.
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_on_ints_and_floats() {
        let mut a = vec![1i32, 5, i32::MAX];
        ReduceOp::Sum.apply(&mut a, &[2, -5, 1]);
        assert_eq!(a, vec![3, 0, i32::MIN]);
        let mut f = vec![1.5f64, 2.0];
        ReduceOp::Prod.apply(&mut f, &[2.0, 0.5]);
        assert_eq!(f, vec![3.0, 1.0]);
        let mut m = vec![3u8, 9];
        ReduceOp::Min.apply(&mut m, &[4, 1]);
        assert_eq!(m, vec![3, 1]);
        ReduceOp::Max.apply(&mut m, &[4, 1]);
        assert_eq!(m, vec![4, 1]);
        let mut g = vec![f32::NAN, 1.0];
        ReduceOp::Max.apply(&mut g, &[2.0, f32::NAN]);
        assert_eq!(g, vec![2.0, 1.0]);
    }

    #[test]
    fn custom_op_is_left_fold_and_apply_left_keeps_order() {
        // Non-commutative: keeps the left operand's first element, concatenation-like.
        let op = ReduceOp::<u64>::custom(|acc, x| {
            for (a, b) in acc.iter_mut().zip(x) {
                *a = *a * 10 + *b;
            }
        });
        assert!(!op.is_commutative());
        let mut acc = vec![1u64];
        op.apply(&mut acc, &[2]);
        assert_eq!(acc, vec![12]);
        let mut right = vec![3u64];
        let mut scratch = Vec::new();
        op.apply_left(&acc, &mut right, &mut scratch);
        assert_eq!(right, vec![123]);
    }

    #[derive(Clone, Copy, Default, PartialEq, Debug)]
    #[repr(C)]
    struct Pair(u32, u32);
    // SAFETY: two u32 fields, no padding, every bit pattern valid.
    unsafe impl Element for Pair {
        const NAME: &'static str = "Pair";
    }

    #[test]
    fn builtins_refuse_non_numeric_types() {
        assert!(ReduceOp::<Pair>::Sum.check("allreduce").is_err());
        assert!(ReduceOp::<Pair>::custom(|_, _| {})
            .check("allreduce")
            .is_ok());
        assert!(ReduceOp::<f64>::Sum.check("allreduce").is_ok());
    }
}
