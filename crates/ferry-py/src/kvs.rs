//! `ferry.Kvs`: the data layer's replicated key-value store (D8) for Python.
//!
//! Keys are strings, values bytes (a `str` value is stored as its UTF-8 bytes). Changes are
//! local until `sync(comm)`, which every member of the communicator calls together; the
//! highest rank wins a key written by several members in one round.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use ferry::data::kvs::KvStore;

use crate::comm::Comm;
use crate::to_py;

/// A key-value store replicated over the members of a communicator.
#[pyclass(module = "ferry")]
pub struct Kvs(KvStore);

fn value_bytes(v: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if v.is_instance_of::<PyString>() {
        return Ok(v.extract::<String>()?.into_bytes());
    }
    if let Ok(b) = v.downcast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    Err(PyTypeError::new_err(format!(
        "a value is bytes or str, not {}",
        v.get_type().name()?
    )))
}

#[pymethods]
impl Kvs {
    /// An empty store named `name` (the name appears in errors).
    #[new]
    fn new(name: &str) -> Kvs {
        Kvs(KvStore::new(name))
    }

    /// The store's name.
    #[getter]
    fn name(&self) -> &str {
        self.0.name()
    }

    /// Sets `key` to `value` (bytes or str) here; the others see it after the next `sync`.
    fn set(&mut self, key: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.0.set(key, &value_bytes(value)?).map_err(to_py)
    }

    /// The value of `key` as this process sees it now, or `None`.
    fn get<'py>(&self, py: Python<'py>, key: &str) -> Option<Bound<'py, PyBytes>> {
        self.0.get(key).map(|v| PyBytes::new(py, v))
    }

    /// Removes `key` here (everywhere after the next `sync`); whether it existed here.
    fn remove(&mut self, key: &str) -> PyResult<bool> {
        self.0.remove(key).map_err(to_py)
    }

    /// Makes every member's changes since the last sync visible to all members of `comm`
    /// (collective). Returns how many changes were applied.
    fn sync(&mut self, comm: &Bound<'_, Comm>) -> PyResult<usize> {
        let mut c = comm.borrow_mut();
        let inner = c.get()?;
        let rank = inner.world_rank();
        let (t, g) = inner.transport_and_group();
        self.0
            .sync(t, g)
            .map(|r| r.changes_applied)
            .map_err(|e| to_py(e.or_rank(rank)))
    }

    /// The keys in ascending order.
    fn keys(&self) -> Vec<String> {
        self.0.iter().map(|(k, _)| k.to_string()).collect()
    }

    /// `(key, value)` pairs in ascending key order.
    fn items<'py>(&self, py: Python<'py>) -> Vec<(String, Bound<'py, PyBytes>)> {
        self.0
            .iter()
            .map(|(k, v)| (k.to_string(), PyBytes::new(py, v)))
            .collect()
    }

    fn __len__(&self) -> usize {
        self.0.len()
    }

    fn __contains__(&self, key: &str) -> bool {
        self.0.get(key).is_some()
    }

    fn __getitem__<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyBytes>> {
        self.get(py, key)
            .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(key.to_string()))
    }

    fn __setitem__(&mut self, key: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.set(key, value)
    }
}
