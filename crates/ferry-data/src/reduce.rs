//! Applying reductions of a switch (D4): combining two slices and the neutral element used by
//! the `Init` data flow.
//!
//! The operator type is the collectives' [`ReduceOp`], so one value describes a reduction at
//! every layer. Built-in operators are defined for the primitive numeric element types; other
//! element types need [`ReduceOp::Custom`]. Integer sums and products wrap (never panic);
//! float min/max follow `f64::min`/`f64::max` (a NaN operand is ignored), the same rules as
//! `ferry-coll`, so a value reduced by a switch and one reduced by a collective agree bitwise.

use ferry_coll::ReduceOp;
use ferry_core::{Element, Error, Result};

/// Checks that `op` can be applied to `T`; `init` additionally requires a neutral element
/// (built-ins only: a custom operator has no known identity).
pub fn check<T: Element>(op: &ReduceOp<T>, init: bool) -> Result<()> {
    op.check("switch")?;
    if init && matches!(op, ReduceOp::Custom(_)) {
        return Err(Error::invalid(
            "switch",
            "the Init data flow needs a built-in reduction (a custom operator has no known \
             neutral element); initialise with Container::fill instead",
        ));
    }
    Ok(())
}

/// `acc[i] = acc[i] op x[i]` (acc is the left operand), with the collectives' definition of
/// every operator. Lengths must agree; the operator must have passed [`check`].
pub fn combine<T: Element>(op: &ReduceOp<T>, acc: &mut [T], x: &[T]) {
    debug_assert_eq!(acc.len(), x.len());
    op.combine(acc, x);
}

/// The neutral element of a built-in operator for `T` (0 for Sum, 1 for Prod, the largest
/// value for Min, the smallest for Max; floats use the infinities).
pub fn identity<T: Element>(op: &ReduceOp<T>) -> Result<T> {
    check(op, true)?;
    op.identity("switch")
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
