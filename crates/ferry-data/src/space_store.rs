//! Named index spaces shared by the processes of a group (D8, LAIK's space store).
//!
//! A [`SpaceStore`] maps names to [`Space`]s. Like the key-value store it is built on
//! ([`KvStore`]), changes are local until every member calls [`SpaceStore::sync`]; afterwards
//! all members see the same spaces. Conflicting definitions of one name in the same round are
//! resolved as in the key-value store: the member with the highest group index wins.
//!
//! A space travels as 1 byte of dimension count followed by `from` and `to` of every used
//! dimension as little-endian `i64`, so negative bounds survive (spacestest moves the 1d space
//! to `[-100, 1000)`).

use ferry_coll::Group;
use ferry_core::{Error, ErrorKind, Result, Transport};

use crate::kvs::{KvStore, SyncReport};
use crate::space::{Range, Space, MAX_DIMS};

/// Names of spaces are stored under this prefix in the underlying key-value store, so a space
/// store could share a store with other users without collisions.
const PREFIX: &str = "space/";

/// Named spaces replicated over the members of a group.
#[derive(Debug, Clone)]
pub struct SpaceStore {
    kvs: KvStore,
}

impl Default for SpaceStore {
    fn default() -> Self {
        SpaceStore::new()
    }
}

impl SpaceStore {
    /// An empty store.
    pub fn new() -> SpaceStore {
        SpaceStore {
            kvs: KvStore::new("spaces"),
        }
    }

    /// Defines or changes the space `name` locally; visible to others after the next sync.
    pub fn set(&mut self, name: &str, space: &Space) -> Result<()> {
        self.kvs
            .set(&format!("{PREFIX}{name}"), &encode(space))
            .map_err(|e| e.context(format!("space store set `{name}`")))
    }

    /// The space called `name`, as this process sees it now. An entry that does not decode
    /// (which only a foreign writer of the underlying store could produce) is an error.
    pub fn get(&self, name: &str) -> Result<Option<Space>> {
        match self.kvs.get(&format!("{PREFIX}{name}")) {
            None => Ok(None),
            Some(bytes) => decode(bytes).map(Some).map_err(|why| {
                Error::new(ErrorKind::Protocol, "space store get")
                    .with_detail(format!("space `{name}`: {why}"))
            }),
        }
    }

    /// Removes the space `name` (everywhere after the next sync). Returns whether it existed.
    pub fn remove(&mut self, name: &str) -> Result<bool> {
        self.kvs.remove(&format!("{PREFIX}{name}"))
    }

    /// Names of all spaces in ascending byte order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.kvs.iter().filter_map(|(k, _)| k.strip_prefix(PREFIX))
    }

    /// Number of spaces.
    pub fn len(&self) -> usize {
        self.names().count()
    }

    /// Whether no space is defined.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Collective over `group`: makes every member's changes visible to all members.
    pub fn sync(&mut self, t: &mut dyn Transport, group: &Group) -> Result<SyncReport> {
        self.kvs
            .sync(t, group)
            .map_err(|e| e.context("space store sync"))
    }
}

fn encode(space: &Space) -> Vec<u8> {
    let r = space.range();
    let dims = r.dims();
    let mut out = Vec::with_capacity(1 + 16 * dims);
    out.push(dims as u8);
    for d in 0..dims {
        out.extend_from_slice(&r.from()[d].to_le_bytes());
        out.extend_from_slice(&r.to()[d].to_le_bytes());
    }
    out
}

fn decode(bytes: &[u8]) -> std::result::Result<Space, String> {
    let (&dims, rest) = bytes.split_first().ok_or("empty entry")?;
    let dims = dims as usize;
    if !(1..=MAX_DIMS).contains(&dims) || rest.len() != 16 * dims {
        return Err(format!(
            "{} bytes do not encode a space of {dims} dimensions",
            bytes.len()
        ));
    }
    let mut from = [0i64; MAX_DIMS];
    let mut to = [1i64; MAX_DIMS];
    for d in 0..dims {
        let at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&rest[16 * d + o..16 * d + o + 8]);
            i64::from_le_bytes(b)
        };
        from[d] = at(0);
        to[d] = at(8);
    }
    let range = Range::from_corners(dims, from, to).map_err(|e| e.to_string())?;
    Space::from_range(range).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::mem::MemTransport;

    #[test]
    fn spaces_round_trip_with_negative_bounds() {
        for s in [
            Space::new1(100).unwrap(),
            Space::from_range(Range::new1(-100, 1000)).unwrap(),
            Space::from_range(Range::new2(-200, 2000, -300, 3000)).unwrap(),
            Space::new3(400, 500, 600).unwrap(),
        ] {
            assert_eq!(decode(&encode(&s)).unwrap(), s);
        }
        assert!(decode(&[]).is_err());
        assert!(decode(&[4]).is_err());
        assert!(decode(&[1, 0, 0]).is_err());
        // An empty box is not a space.
        let mut empty = vec![1u8];
        empty.extend_from_slice(&5i64.to_le_bytes());
        empty.extend_from_slice(&5i64.to_le_bytes());
        assert!(decode(&empty).is_err());
    }

    #[test]
    fn spaces_sync_across_ranks() {
        let out = MemTransport::run(3, |mut t| {
            let g = Group::world(3);
            let mut st = SpaceStore::new();
            if t.rank() == 0 {
                st.set("1d", &Space::new1(100).unwrap()).unwrap();
            }
            st.set("3d", &Space::new3(4, 5, 6).unwrap()).unwrap();
            st.sync(&mut t, &g).unwrap();
            st.set("1d", &Space::from_range(Range::new1(-100, 1000)).unwrap())
                .unwrap();
            st.sync(&mut t, &g).unwrap();
            (
                st.get("1d").unwrap().unwrap().range(),
                st.get("3d").unwrap().unwrap().size(),
                st.names().map(str::to_string).collect::<Vec<_>>(),
            )
        });
        for o in out {
            assert_eq!(o.0, Range::new1(-100, 1000));
            assert_eq!(o.1, 120);
            assert_eq!(o.2, vec!["1d".to_string(), "3d".to_string()]);
        }
    }
}
