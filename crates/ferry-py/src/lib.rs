//! `ferry` for Python: communicators with point-to-point messages and collectives on numpy
//! arrays, and the data layer with containers exposed as numpy views (I4).
//!
//! The extension module is `ferry._ferry`; `python/ferry/__init__.py` re-exports it. Errors of
//! the library become `ferry.FerryError` (a `RuntimeError`) whose message names the rank, the
//! operation and the cause, with the same facts as attributes (`rank`, `op`, `peer`, `kind`).

mod buf;
mod comm;
mod data;
mod kvs;

use pyo3::create_exception;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

create_exception!(
    ferry,
    FerryError,
    PyRuntimeError,
    "An error of the ferry library; `rank`, `op`, `peer` and `kind` name where and why."
);

/// A ferry error as a Python exception carrying its facts as attributes.
pub(crate) fn to_py(e: ferry::Error) -> PyErr {
    let err = FerryError::new_err(e.to_string());
    Python::attach(|py| {
        let v = err.value(py);
        // Setting attributes on a fresh exception object cannot fail short of memory
        // exhaustion, where the message alone still tells the story.
        let _ = v.setattr("rank", e.rank());
        let _ = v.setattr("peer", e.peer());
        let _ = v.setattr("op", e.op());
        let _ = v.setattr("kind", format!("{:?}", e.kind()));
    });
    err
}

#[pymodule]
fn _ferry(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("FerryError", m.py().get_type::<FerryError>())?;
    m.add_function(wrap_pyfunction!(comm::init, m)?)?;
    m.add_class::<comm::Comm>()?;
    m.add_class::<data::Space>()?;
    m.add_class::<data::Partitioner>()?;
    m.add_class::<data::Partitioning>()?;
    m.add_class::<data::Group>()?;
    m.add_class::<data::Container>()?;
    m.add_class::<kvs::Kvs>()?;
    Ok(())
}
