//! Resize points: where a program lets the world change (D7, F7; LAIK's
//! `laik_allow_world_resize`, examples.md §0.3).
//!
//! An elastic program calls [`allow_world_resize`] at points where it can cope with a new
//! world: processes that asked to join are admitted, processes marked for removal leave, and
//! the program re-creates its partitionings over the returned group.
//!
//! Current behaviour: ferry's runtime cannot yet admit spares or apply removal requests (that
//! belongs to the fault-tolerance issue; `ferry run --spares` refuses to start such jobs). A
//! resize point therefore does what LAIK's single and MPI backends do: every member
//! synchronises with the others (a barrier, so that all agree the point was reached and a
//! diverging program fails here with an error naming the rank), the world stays the same, the
//! epoch is unchanged, and [`Resized::changed`] is `false`. Programs written against this API
//! (resize, vsum3) need no change once worlds can grow and shrink.

use ferry_coll::Group;
use ferry_core::{Result, Transport};

/// The world after a resize point.
#[derive(Debug)]
pub struct Resized {
    /// The (possibly new) world group; its parent is the group passed in.
    pub group: Group,
    /// This process's index in `group`; `None` if it was removed and must stop.
    pub my_index: Option<usize>,
    /// Number of world changes so far (LAIK's epoch).
    pub epoch: u32,
    /// Whether the world changed at this point (partitionings must then be re-created).
    pub changed: bool,
}

/// A resize point at `phase` for the members of `world` (collective over `world`).
///
/// `epoch` is the epoch of `world`. See the module docs for what happens today.
pub fn allow_world_resize(
    t: &mut dyn Transport,
    world: &Group,
    epoch: u32,
    phase: i64,
) -> Result<Resized> {
    let rank = t.rank();
    ferry_coll::barrier(t, world).map_err(|e| {
        e.or_rank(rank)
            .context(format!("resize point of phase {phase}"))
    })?;
    tracing::debug!(rank, phase, epoch, "resize point: world unchanged");
    Ok(Resized {
        group: world.clone(),
        my_index: world.index_of(rank),
        epoch,
        changed: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::mem::MemTransport;

    #[test]
    fn resize_point_keeps_the_world_and_synchronises() {
        let out = MemTransport::run(3, |mut t| {
            let g = Group::world(3);
            let r = allow_world_resize(&mut t, &g, 0, 1).unwrap();
            let r2 = allow_world_resize(&mut t, &r.group, r.epoch, 2).unwrap();
            (r2.my_index, r2.group.size(), r2.epoch, r2.changed)
        });
        for (i, o) in out.into_iter().enumerate() {
            assert_eq!(o, (Some(i), 3, 0, false));
        }
    }
}
