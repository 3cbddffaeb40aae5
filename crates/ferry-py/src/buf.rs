//! numpy arrays as typed slices: dtype dispatch, contiguity checks, operators.

use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use ferry::coll::ReduceOp;
use ferry::data::DataFlow;

/// Runs `$body` with `$a` bound to `$obj` downcast to `PyArrayDyn<$T>` for the first numeric
/// element type that fits; a non-array or another dtype is a `TypeError`.
macro_rules! dispatch {
    ($obj:expr, $a:ident, $T:ident, $body:expr) => {
        dispatch!(@chain $obj, $a, $T, $body; f64 f32 i64 i32 i16 i8 u64 u32 u16 u8)
    };
    (@chain $obj:expr, $a:ident, $T:ident, $body:expr; $($ty:ident)*) => {{
        let obj: &pyo3::Bound<'_, pyo3::PyAny> = $obj;
        $(
            if let Ok($a) = obj.downcast::<numpy::PyArrayDyn<$ty>>() {
                #[allow(dead_code)]
                type $T = $ty;
                $body
            } else
        )* {
            Err($crate::buf::not_an_array(obj))
        }
    }};
}
pub(crate) use dispatch;

/// The error for an object that is not a numpy array of a supported element type.
pub(crate) fn not_an_array(obj: &Bound<'_, PyAny>) -> PyErr {
    let what = match obj.getattr("dtype") {
        Ok(d) => format!("a numpy array of dtype {d}"),
        Err(_) => format!(
            "a {}",
            obj.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "?".into())
        ),
    };
    PyTypeError::new_err(format!(
        "expected a numpy array of float64, float32, int64, int32, int16, int8, uint64, \
         uint32, uint16 or uint8, got {what}"
    ))
}

/// The elements of a C-contiguous array, read-only, without a copy.
pub(crate) fn with_slice<T, R>(
    a: &Bound<'_, PyArrayDyn<T>>,
    f: impl FnOnce(&[T]) -> PyResult<R>,
) -> PyResult<R>
where
    T: numpy::Element,
{
    let ro = a
        .try_readonly()
        .map_err(|e| PyValueError::new_err(format!("array is being written elsewhere: {e}")))?;
    let s = ro.as_slice().map_err(|_| {
        PyValueError::new_err("array must be contiguous (use numpy.ascontiguousarray)")
    })?;
    f(s)
}

/// The elements of a C-contiguous, writeable array, without a copy.
pub(crate) fn with_slice_mut<T, R>(
    a: &Bound<'_, PyArrayDyn<T>>,
    f: impl FnOnce(&mut [T]) -> PyResult<R>,
) -> PyResult<R>
where
    T: numpy::Element,
{
    if !a.is_c_contiguous() {
        return Err(PyValueError::new_err(
            "array must be C-contiguous (use numpy.ascontiguousarray)",
        ));
    }
    let mut rw = a.try_readwrite().map_err(|e| {
        PyValueError::new_err(format!("array is not writeable or already borrowed: {e}"))
    })?;
    let s = rw
        .as_slice_mut()
        .map_err(|_| PyValueError::new_err("array must be contiguous"))?;
    f(s)
}

/// A reduction operator by name: `sum`, `prod`, `min`, `max`.
pub(crate) fn op<T>(name: &str) -> PyResult<ReduceOp<T>> {
    match name {
        "sum" => Ok(ReduceOp::Sum),
        "prod" => Ok(ReduceOp::Prod),
        "min" => Ok(ReduceOp::Min),
        "max" => Ok(ReduceOp::Max),
        other => Err(PyValueError::new_err(format!(
            "unknown reduction `{other}`: one of sum, prod, min, max"
        ))),
    }
}

/// A data flow by name: `none`, `preserve`, `init`.
pub(crate) fn flow(name: &str) -> PyResult<DataFlow> {
    match name {
        "none" => Ok(DataFlow::None),
        "preserve" => Ok(DataFlow::Preserve),
        "init" => Ok(DataFlow::Init),
        other => Err(PyValueError::new_err(format!(
            "unknown data flow `{other}`: one of none, preserve, init"
        ))),
    }
}
