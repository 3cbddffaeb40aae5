//! Containers of a C element type chosen at run time: one enum over the typed containers of the
//! data layer, with the few operations the C layers need.

use std::ffi::{c_int, c_void};

use ferry_core::{Element, Result, Transport};
use ferry_data::{
    Container, DataFlow, Index, Instance, LayoutOrder, Partitioning, ReduceOp, Space,
};

/// Element types of C containers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    F64,
    F32,
    I64,
    I32,
    U64,
    U32,
    I8,
    U8,
}

impl Elem {
    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            Elem::F64 | Elem::I64 | Elem::U64 => 8,
            Elem::F32 | Elem::I32 | Elem::U32 => 4,
            Elem::I8 | Elem::U8 => 1,
        }
    }
}

/// Reduction operations of the C layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Sum,
    Prod,
    Min,
    Max,
    /// Bitwise and of integer elements (LAIK's `LAIK_RO_And`).
    And,
    /// Bitwise or of integer elements (LAIK's `LAIK_RO_Or`).
    Or,
    /// A program's reduction over opaque elements (LAIK's `laik_type_set_reduce`).
    Bytes(ByteReduce),
}

/// `void reduce(void* out, const void* in1, const void* in2, int count, int op)` of a C
/// program (LAIK's `laik_reduce_t`, the operation passed as its enum value).
pub type ReduceFn = extern "C" fn(*mut c_void, *const c_void, *const c_void, c_int, c_int);

/// A program's reduction function applied to elements of `size` bytes with operation `code`.
#[derive(Clone, Copy, Debug)]
pub struct ByteReduce {
    pub f: ReduceFn,
    pub size: usize,
    pub code: c_int,
}

impl PartialEq for ByteReduce {
    fn eq(&self, o: &Self) -> bool {
        std::ptr::fn_addr_eq(self.f, o.f) && self.size == o.size && self.code == o.code
    }
}

impl Eq for ByteReduce {}

impl Op {
    /// The data layer's operation for element type `T`.
    pub fn typed<T: Element>(self) -> ReduceOp<T> {
        match self {
            Op::Sum => ReduceOp::Sum,
            Op::Prod => ReduceOp::Prod,
            Op::Min => ReduceOp::Min,
            Op::Max => ReduceOp::Max,
            // Bitwise operations on the bytes of an integer are those on the integer: the
            // callers admit them for integer element types only (LAIK defines them for its
            // integer types and refuses them for float and double).
            Op::And => ReduceOp::custom(|acc: &mut [T], x: &[T]| {
                let (a, b) = (
                    ferry_core::element::as_bytes_mut(acc),
                    ferry_core::element::as_bytes(x),
                );
                a.iter_mut().zip(b).for_each(|(a, b)| *a &= *b);
            }),
            Op::Or => ReduceOp::custom(|acc: &mut [T], x: &[T]| {
                let (a, b) = (
                    ferry_core::element::as_bytes_mut(acc),
                    ferry_core::element::as_bytes(x),
                );
                a.iter_mut().zip(b).for_each(|(a, b)| *a |= *b);
            }),
            Op::Bytes(b) => ReduceOp::custom(move |acc: &mut [T], x: &[T]| {
                // The data layer folds whole rows of element-aligned byte ranges (see
                // laik::reduce), so both operands hold whole elements.
                let count = std::mem::size_of_val(acc) / b.size;
                let out = acc.as_mut_ptr();
                (b.f)(
                    out.cast(),
                    out.cast_const().cast(),
                    x.as_ptr().cast(),
                    count as c_int,
                    b.code,
                );
            }),
        }
    }
}

/// A container of one of the [`Elem`] types.
pub enum AnyContainer {
    F64(Container<f64>),
    F32(Container<f32>),
    I64(Container<i64>),
    I32(Container<i32>),
    U64(Container<u64>),
    U32(Container<u32>),
    I8(Container<i8>),
    U8(Container<u8>),
}

macro_rules! each {
    ($self:expr, $c:ident => $body:expr) => {
        match $self {
            AnyContainer::F64($c) => $body,
            AnyContainer::F32($c) => $body,
            AnyContainer::I64($c) => $body,
            AnyContainer::I32($c) => $body,
            AnyContainer::U64($c) => $body,
            AnyContainer::U32($c) => $body,
            AnyContainer::I8($c) => $body,
            AnyContainer::U8($c) => $body,
        }
    };
}

/// One mapping as C sees it: the first element's address, the box it covers and its strides.
#[derive(Clone, Copy, Debug)]
pub struct RawMap {
    pub base: *mut u8,
    pub from: Index,
    pub to: Index,
    pub strides: [usize; 3],
}

impl AnyContainer {
    /// A new container of `elem` over `space`.
    pub fn new(inst: &mut Instance, elem: Elem, name: &str, space: &Space) -> AnyContainer {
        match elem {
            Elem::F64 => AnyContainer::F64(Container::new(inst, name, space)),
            Elem::F32 => AnyContainer::F32(Container::new(inst, name, space)),
            Elem::I64 => AnyContainer::I64(Container::new(inst, name, space)),
            Elem::I32 => AnyContainer::I32(Container::new(inst, name, space)),
            Elem::U64 => AnyContainer::U64(Container::new(inst, name, space)),
            Elem::U32 => AnyContainer::U32(Container::new(inst, name, space)),
            Elem::I8 => AnyContainer::I8(Container::new(inst, name, space)),
            Elem::U8 => AnyContainer::U8(Container::new(inst, name, space)),
        }
    }

    /// Switches to `to` (see `Container::switch_to`).
    pub fn switch_to(
        &mut self,
        t: &mut dyn Transport,
        to: &Partitioning,
        flow: DataFlow,
        op: Option<Op>,
    ) -> Result<()> {
        each!(self, c => {
            let op = op.map(|o| o.typed());
            c.switch_to(t, to, flow, op.as_ref())
        })
    }

    /// The current partitioning.
    pub fn partitioning(&self) -> Option<&Partitioning> {
        each!(self, c => c.partitioning())
    }

    /// Number of mappings on this rank.
    pub fn num_mappings(&self) -> usize {
        each!(self, c => c.num_mappings())
    }

    /// Mapping `i` as raw memory (valid until the next switch), described by the box of
    /// the ranges it holds: when the container lays two partitionings over shared, larger
    /// boxes (a partitioning and its halo), the address is that of the first held element and
    /// the strides are those of the larger allocation, as LAIK describes such mappings.
    pub fn raw_map(&mut self, i: usize) -> Result<RawMap> {
        each!(self, c => {
            let lay = c.layout();
            let mut held: Option<ferry_data::Range> = None;
            for (r, &m) in lay.ranges.iter().zip(&lay.range_mapping) {
                if m == i {
                    held = Some(held.map_or(*r, |h| h.union_box(r)));
                }
            }
            let dims = c.space().dims();
            let m = c.mapping_mut(i)?;
            let (afrom, ato) = (m.range.from(), m.range.to());
            let (from, to) = held.map_or((afrom, ato), |h| (h.from(), h.to()));
            let mut off = 0usize;
            for d in 0..dims {
                off += (from[d] - afrom[d]).max(0) as usize * m.strides[d];
            }
            let len = m.data.len();
            let base = m.data[off.min(len)..].as_mut_ptr().cast::<u8>();
            Ok(RawMap {
                base,
                from,
                to,
                strides: m.strides,
            })
        })
    }

    /// Sets every byte of every mapping's memory to `byte` (the neutral element of a bitwise
    /// reduction for the Init data flow: all bits set for and, none for or).
    pub fn fill_bytes(&mut self, byte: u8) -> Result<()> {
        each!(self, c => {
            for i in 0..c.num_mappings() {
                ferry_core::element::as_bytes_mut(c.mapping_mut(i)?.data).fill(byte);
            }
            Ok(())
        })
    }

    /// Sizes the buffers for `parts` (D6).
    pub fn reserve(&mut self, parts: &[&Partitioning]) -> Result<()> {
        each!(self, c => c.reserve(parts))
    }

    /// Lays two partitionings (one the halo of the other) over shared boxes (D6).
    pub fn share_layout(&mut self, a: &Partitioning, b: &Partitioning) -> Result<bool> {
        each!(self, c => c.share_layout(a, b))
    }

    /// Memory layout of future partitionings.
    pub fn set_layout_order(&mut self, order: LayoutOrder) -> Result<()> {
        each!(self, c => c.set_layout_order(order))
    }
}
