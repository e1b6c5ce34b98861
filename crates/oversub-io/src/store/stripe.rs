//! Striping: how a store over several members (files or block devices) lays its one logical data space over them.
//!
//! The logical space `[0, capacity)` is cut into stripe units of `unit` bytes, dealt to the members in turn: unit
//! `u` (bytes `[u * unit, (u + 1) * unit)`) lives on member `u % members`, as that member's unit `u / members`. So
//! logical offset `l` is member `(l / unit) % members` at member data offset `((l / unit) / members) * unit +
//! l % unit`. Every member holds the same number of units, so the capacity is `members` times the smallest member's
//! data area rounded down to whole units. With one member the map is the identity and nothing is cut (a store of
//! one file keeps its exact capacity and file offsets).
//!
//! A member's units are contiguous in the member, in logical order, so any logical range `[a, b)` puts on member
//! `m` exactly the member range `[member_bytes_below(a, m), member_bytes_below(b, m))`: one range per member,
//! which is what discards and the high-water marks use.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::IoError;

/// The logical-to-member map of a striped store (see the module docs). `Copy` and pure: it holds only the member
/// count and the stripe unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeMap {
    members: u64,
    unit: u64,
}

/// One piece of a logical range: a run of bytes on one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Index of the member (0-based, in the order the store was given its locations).
    pub member: usize,
    /// Offset in the member's data area (add the member's data offset for a file offset).
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

impl StripeMap {
    /// A map over `members` members (at least 1) with stripe units of `unit` bytes (at least 1).
    pub fn new(members: usize, unit: u64) -> Result<StripeMap, IoError> {
        if members == 0 || unit == 0 {
            return Err(IoError::InvalidArgument(format!(
                "a stripe needs at least one member and a non-zero unit (got {members} members, unit {unit})"
            )));
        }
        Ok(StripeMap {
            members: members as u64,
            unit,
        })
    }

    /// Number of members.
    pub fn members(&self) -> usize {
        self.members as usize
    }

    /// Stripe unit in bytes.
    pub fn unit(&self) -> u64 {
        self.unit
    }

    /// Logical capacity for members whose smallest data area is `min_member_bytes`: with one member, all of it;
    /// else `members` times it rounded down to whole units.
    pub fn capacity(&self, min_member_bytes: u64) -> u64 {
        if self.members == 1 {
            return min_member_bytes;
        }
        (min_member_bytes - min_member_bytes % self.unit).saturating_mul(self.members)
    }

    /// The member and member data offset of logical byte `l`.
    pub fn locate(&self, l: u64) -> (usize, u64) {
        if self.members == 1 {
            return (0, l);
        }
        let u = l / self.unit;
        (
            (u % self.members) as usize,
            (u / self.members) * self.unit + l % self.unit,
        )
    }

    /// How many bytes of member `m` lie below logical offset `l`; equally, the member offset where `m`'s part of
    /// any logical range starting at `l` begins.
    pub fn member_bytes_below(&self, l: u64, m: usize) -> u64 {
        let m = m as u64;
        if self.members == 1 {
            return if m == 0 { l } else { 0 };
        }
        let whole = l / self.unit;
        let rem = l % self.unit;
        let full = whole / self.members + u64::from(m < whole % self.members);
        let partial = if whole % self.members == m { rem } else { 0 };
        full * self.unit + partial
    }

    /// The pieces of the logical range `[offset, offset + len)`, cut at stripe-unit boundaries (never with one
    /// member), in logical order.
    pub fn pieces(&self, offset: u64, len: u64) -> Pieces {
        Pieces {
            map: *self,
            pos: offset,
            end: offset.saturating_add(len),
        }
    }
}

/// Iterator of [`StripeMap::pieces`].
#[derive(Debug, Clone)]
pub struct Pieces {
    map: StripeMap,
    pos: u64,
    end: u64,
}

impl Iterator for Pieces {
    type Item = Piece;

    fn next(&mut self) -> Option<Piece> {
        if self.pos >= self.end {
            return None;
        }
        let (member, offset) = self.map.locate(self.pos);
        let len = if self.map.members == 1 {
            self.end - self.pos
        } else {
            (self.map.unit - self.pos % self.map.unit).min(self.end - self.pos)
        };
        self.pos += len;
        Some(Piece {
            member,
            offset,
            len,
        })
    }
}

/// What a location names, for telling two of them apart before anything is opened.
#[derive(Debug, PartialEq, Eq)]
enum Identity {
    /// A block device (by device number, so two nodes of one device match).
    Device(u64),
    /// An existing file or directory.
    Node { dev: u64, ino: u64, dir: bool },
    /// A path that does not exist yet, made absolute through its (canonical) parent.
    New(PathBuf),
}

fn identity(path: &Path) -> Result<(Identity, Option<u64>), IoError> {
    match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_block_device() => {
            Ok((Identity::Device(m.rdev()), Some(m.rdev())))
        }
        Ok(m) => Ok((
            Identity::Node {
                dev: m.dev(),
                ino: m.ino(),
                dir: m.is_dir(),
            },
            Some(m.dev()),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            let dev = std::fs::metadata(&parent).ok().map(|m| m.dev());
            let parent = parent.canonicalize().unwrap_or(parent);
            let name = path.file_name().map(PathBuf::from).unwrap_or_default();
            Ok((Identity::New(parent.join(name)), dev))
        }
        Err(source) => Err(IoError::Member {
            path: path.to_path_buf(),
            source: Box::new(IoError::Io { op: "stat", source }),
        }),
    }
}

/// Refuses two locations naming the same file, device or directory (a directory twice would put two members on
/// one file system); warns when two members share a file system, where striping gains nothing.
pub(super) fn check_distinct(locations: &[PathBuf]) -> Result<(), IoError> {
    let mut seen: Vec<(&Path, Identity, Option<u64>)> = Vec::with_capacity(locations.len());
    for loc in locations {
        let (id, dev) = identity(loc)?;
        if let Some((earlier, id, _)) = seen.iter().find(|(_, other, _)| *other == id) {
            let what = match id {
                Identity::Device(_) => "block device",
                Identity::Node { dir: true, .. } => "directory",
                _ => "file",
            };
            return Err(IoError::InvalidArgument(format!(
                "swap store locations {} and {} name the same {what}; each member of a striped store needs a file                  or device of its own",
                earlier.display(),
                loc.display()
            )));
        }
        if let Some((earlier, _, _)) = seen
            .iter()
            .find(|(_, _, d)| d.is_some() && *d == dev && !matches!(id, Identity::Device(_)))
        {
            tracing::warn!(
                "swap store locations {} and {} are on the same file system: striping over them adds no bandwidth",
                earlier.display(),
                loc.display()
            );
        }
        seen.push((loc, id, dev));
    }
    Ok(())
}

/// The error of making the member at `location`, naming it unless it does already.
pub(super) fn name_location(location: &Path, e: IoError) -> IoError {
    match e {
        e @ (IoError::StoreBusy { .. } | IoError::StoreRefused { .. } | IoError::Member { .. }) => {
            e
        }
        e => IoError::Member {
            path: location.to_path_buf(),
            source: Box::new(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_documented_layout() {
        let m = StripeMap::new(3, 4).unwrap();
        let got: Vec<_> = (0..24).map(|l| m.locate(l)).collect();
        let want = [
            (0, 0),
            (0, 1),
            (0, 2),
            (0, 3),
            (1, 0),
            (1, 1),
            (1, 2),
            (1, 3),
            (2, 0),
            (2, 1),
            (2, 2),
            (2, 3),
            (0, 4),
            (0, 5),
            (0, 6),
            (0, 7),
            (1, 4),
            (1, 5),
            (1, 6),
            (1, 7),
            (2, 4),
            (2, 5),
            (2, 6),
            (2, 7),
        ];
        assert_eq!(got, want);
        assert_eq!(m.capacity(10), 24);
        assert_eq!(
            m.pieces(2, 8).collect::<Vec<_>>(),
            [
                Piece {
                    member: 0,
                    offset: 2,
                    len: 2
                },
                Piece {
                    member: 1,
                    offset: 0,
                    len: 4
                },
                Piece {
                    member: 2,
                    offset: 0,
                    len: 2
                },
            ]
        );
    }

    #[test]
    fn one_member_is_the_identity_and_never_cut() {
        let m = StripeMap::new(1, 4096).unwrap();
        assert_eq!(m.locate(123_456_789), (0, 123_456_789));
        assert_eq!(m.capacity(12_345), 12_345);
        assert_eq!(
            m.pieces(100, 1 << 30).collect::<Vec<_>>(),
            [Piece {
                member: 0,
                offset: 100,
                len: 1 << 30
            }]
        );
        assert!(StripeMap::new(0, 4096).is_err());
        assert!(StripeMap::new(2, 0).is_err());
    }

    proptest! {
        /// Every logical byte maps to exactly one (member, offset) inside that member's striped part, no two bytes
        /// to the same place; pieces agree with `locate`, cover the range in order and stay within one unit; and
        /// `member_bytes_below` counts each member's bytes below an offset.
        #[test]
        fn the_map_is_a_bijection_onto_the_members(
            members in 1usize..6,
            unit in 1u64..40,
            member_bytes in 0u64..200,
            start in 0u64..1000,
            len in 0u64..1000,
        ) {
            let map = StripeMap::new(members, unit).unwrap();
            let capacity = map.capacity(member_bytes);
            let used = if members == 1 { member_bytes } else { member_bytes - member_bytes % unit };
            prop_assert_eq!(capacity, used * members as u64);
            let mut seen = vec![vec![false; used as usize]; members];
            let mut count = vec![0u64; members];
            for l in 0..capacity {
                prop_assert_eq!(map.member_bytes_below(l, 0) + (1..members).map(|m| map.member_bytes_below(l, m)).sum::<u64>(), l);
                let (m, off) = map.locate(l);
                prop_assert!(m < members);
                prop_assert!(off < used, "byte {} maps to member {} offset {} past {}", l, m, off, used);
                prop_assert!(!seen[m][off as usize], "two logical bytes map to member {} offset {}", m, off);
                seen[m][off as usize] = true;
                // A member's bytes come in logical order, contiguous in the member.
                prop_assert_eq!(off, count[m]);
                count[m] += 1;
            }
            prop_assert!(seen.iter().all(|s| s.iter().all(|&b| b)));

            let mut pos = start;
            for p in map.pieces(start, len) {
                prop_assert!(p.len > 0);
                prop_assert_eq!((p.member, p.offset), map.locate(pos));
                if members > 1 {
                    prop_assert!(pos % unit + p.len <= unit, "piece crosses a unit boundary");
                }
                for k in 0..p.len {
                    prop_assert_eq!(map.locate(pos + k), (p.member, p.offset + k));
                }
                pos += p.len;
            }
            prop_assert_eq!(pos, start + len);
            for m in 0..members {
                let a = map.member_bytes_below(start, m);
                let b = map.member_bytes_below(start + len, m);
                let on_m: u64 = map.pieces(start, len).filter(|p| p.member == m).map(|p| p.len).sum();
                prop_assert_eq!(b - a, on_m);
            }
        }
    }
}
