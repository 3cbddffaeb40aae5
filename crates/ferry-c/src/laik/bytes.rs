//! Containers of element types a program registers (`laik_type_register`): ferry moves their
//! elements as opaque bytes.

use std::collections::HashMap;

use ferry_core::{Error, Result};
use ferry_data::{Partitioning, Space, TaskRange};

use crate::typed::RawMap;

/// A container of a registered type of `size` bytes is a byte container over a space whose
/// dimension 0 is `size` times longer: element `i` is bytes `[i*size, (i+1)*size)`, so every
/// range of the program's partitionings becomes a byte range of whole elements and the data
/// layer moves them unchanged. Each partitioning gets one byte twin (cached by id), so the
/// container's plans are cached per transition as for any other container.
pub(crate) struct Bytes {
    pub(crate) size: usize,
    pub(crate) space: Space,
    twins: HashMap<u64, Partitioning>,
}

impl Bytes {
    pub(crate) fn new(space: &Space, size: usize, op: &'static str) -> Result<Bytes> {
        let r = space.range();
        let s = size as i64;
        let (from, to) = (r.from()[0], r.to()[0]);
        let (Some(f), Some(t)) = (from.checked_mul(s), to.checked_mul(s)) else {
            return Err(Error::invalid(
                op,
                format!("a space of {} elements of {size} bytes", to - from),
            ));
        };
        Ok(Bytes {
            size,
            space: Space::from_range(r.with_dim(0, f, t))?,
            twins: HashMap::new(),
        })
    }

    /// The byte twin of `p`.
    pub(crate) fn twin(&mut self, p: &Partitioning) -> Result<Partitioning> {
        if let Some(t) = self.twins.get(&p.id()) {
            return Ok(t.clone());
        }
        let s = self.size as i64;
        let ranges = p
            .ranges()
            .iter()
            .map(|tr| TaskRange {
                task: tr.task,
                range: tr
                    .range
                    .with_dim(0, tr.range.from()[0] * s, tr.range.to()[0] * s),
                group: tr.group,
            })
            .collect();
        let t = Partitioning::from_ranges(&self.space, p.group(), p.name(), ranges)?;
        self.twins.insert(p.id(), t.clone());
        Ok(t)
    }

    /// A byte mapping described in elements (the address stays that of its first byte).
    pub(crate) fn to_elements(&self, mut raw: RawMap) -> RawMap {
        let s = self.size as i64;
        raw.from[0] = raw.from[0].div_euclid(s);
        raw.to[0] = raw.to[0].div_euclid(s);
        for d in 1..raw.strides.len() {
            raw.strides[d] /= self.size;
        }
        raw
    }
}
