//! Recognising what an existing file or block device holds before `open` writes to it.
//!
//! # The blank rule
//!
//! Reading a whole device to prove it empty would take minutes, so the check samples it, skipping holes. A file
//! or device is *blank* when
//!
//! 1. it is empty, or
//! 2. `lseek(SEEK_DATA)` finds no data at all (`ENXIO`): ext4, XFS and tmpfs all report holes and
//!    fallocated-but-never-written (unwritten) extents this way, so a freshly `fallocate`d file is blank, or
//! 3. every byte it reads reads as zero: its first [`SCAN_BYTES`] (1 MiB, which covers every signature offset
//!    below, the farthest being btrfs at 65600 and swap on 64 KiB pages), the first [`SAMPLE_BYTES`] of every data
//!    extent, and [`SAMPLE_BYTES`] at every multiple of the stride inside a data extent. The stride is 1 MiB, or
//!    the length over [`MAX_SAMPLES`] (rounded up to a MiB) on a device or file larger than 1 GiB, so at most
//!    about 64 MiB are read (tens of milliseconds) however large it is. Holes are skipped with
//!    `SEEK_DATA`/`SEEK_HOLE`; a block device is one data extent.
//!
//! Partitions and file systems placed inside an image start on MiB boundaries, which the stride reads, so an ext4
//! placed at 1 MiB behind a wiped first MiB is named as such. Data between samples is missed: a file zero-filled
//! except for less than a stride between two samples counts as blank, which is the price of the bound. To limit
//! the harm of such a miss, a store scrubs only what it wrote itself ([`Scrub`](super::Scrub)). Anything that is
//! not blank is either oversub's own store (its [header](super::header)) or foreign: a known signature is named,
//! anything else "holds data not written by oversub".

use std::os::fd::RawFd;

use super::header::{Decoded, Header};
use super::sys::pread_full;
use crate::error::IoError;

/// Bytes read from the start by the blank rule.
pub(crate) const SCAN_BYTES: u64 = 1 << 20;
/// Bytes read at each sample point after the first MiB.
pub(crate) const SAMPLE_BYTES: u64 = 64 << 10;
/// Sample points past which the stride grows with the length (1 GiB at a 1 MiB stride).
pub(crate) const MAX_SAMPLES: u64 = 1024;
/// Extent starts sampled besides the stride points (a file fragmented past this is sampled on the stride only).
const MAX_EXTENT_SAMPLES: u64 = 1024;

/// What a file or device holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing worth keeping (see the module docs).
    Blank,
    /// An oversub store with this header.
    Ours(Header),
    /// Something else: the reason, as "it holds ...".
    Foreign(String),
}

/// A signature: every `(offset, bytes)` must match.
struct Signature {
    what: &'static str,
    at: &'static [(usize, &'static [u8])],
}

const BOOT_SIGNATURE: (usize, &[u8]) = (510, &[0x55, 0xAA]);

/// Checked in order: specific file systems before partition tables, because FAT and NTFS boot sectors and
/// hybrid ISO images also end their first sector with the MBR's 0x55AA, and GPT keeps a protective MBR.
const SIGNATURES: &[Signature] = &[
    Signature {
        what: "a LUKS encrypted volume",
        at: &[(0, b"LUKS\xba\xbe")],
    },
    Signature {
        what: "an XFS file system",
        at: &[(0, b"XFSB")],
    },
    Signature {
        what: "a squashfs file system",
        at: &[(0, b"hsqs")],
    },
    // mdraid 1.1 keeps its superblock at 0, 1.2 at 4096 (1.0 sits at the end of the device: not checked).
    Signature {
        what: "a Linux RAID (mdraid 1.x) member",
        at: &[(0, &[0xfc, 0x4e, 0x2b, 0xa9])],
    },
    Signature {
        what: "a Linux RAID (mdraid 1.x) member",
        at: &[(4096, &[0xfc, 0x4e, 0x2b, 0xa9])],
    },
    Signature {
        what: "a btrfs file system",
        at: &[(65600, b"_BHRfS_M")],
    },
    Signature {
        what: "an ext2/ext3/ext4 file system",
        at: &[(1080, &[0x53, 0xef])],
    },
    Signature {
        what: "an f2fs file system",
        at: &[(1024, &[0x10, 0x20, 0xf5, 0xf2])],
    },
    Signature {
        what: "an ISO 9660 file system",
        at: &[(32769, b"CD001")],
    },
    // The swap signature ends the first page; the page size of the machine that ran mkswap may differ from ours.
    Signature {
        what: "a Linux swap area",
        at: &[(4096 - 10, b"SWAPSPACE2")],
    },
    Signature {
        what: "a Linux swap area",
        at: &[(8192 - 10, b"SWAPSPACE2")],
    },
    Signature {
        what: "a Linux swap area",
        at: &[(16384 - 10, b"SWAPSPACE2")],
    },
    Signature {
        what: "a Linux swap area",
        at: &[(65536 - 10, b"SWAPSPACE2")],
    },
    Signature {
        what: "a Linux swap area",
        at: &[(4096 - 10, b"SWAP-SPACE")],
    },
    Signature {
        what: "an NTFS file system",
        at: &[(3, b"NTFS    ")],
    },
    Signature {
        what: "a FAT file system",
        at: &[(54, b"FAT"), BOOT_SIGNATURE],
    },
    Signature {
        what: "a FAT file system",
        at: &[(82, b"FAT"), BOOT_SIGNATURE],
    },
    // The LVM label may sit in any of the first four sectors; 512 is where pvcreate puts it.
    Signature {
        what: "an LVM physical volume",
        at: &[(512, b"LABELONE")],
    },
    Signature {
        what: "an LVM physical volume",
        at: &[(0, b"LABELONE")],
    },
    Signature {
        what: "an LVM physical volume",
        at: &[(1024, b"LABELONE")],
    },
    Signature {
        what: "an LVM physical volume",
        at: &[(1536, b"LABELONE")],
    },
    // The GPT header is in LBA 1: byte 512 or, on 4 KiB-sector devices, 4096.
    Signature {
        what: "a GPT partition table",
        at: &[(512, b"EFI PART")],
    },
    Signature {
        what: "a GPT partition table",
        at: &[(4096, b"EFI PART")],
    },
    Signature {
        what: "an MBR partition table",
        at: &[BOOT_SIGNATURE],
    },
];

/// Classifies the first bytes of a file: `None` when they are all zero (blank so far).
pub(crate) fn classify(head: &[u8]) -> Option<Verdict> {
    match Header::decode(head) {
        Decoded::Ours(h) => return Some(Verdict::Ours(h)),
        Decoded::Unreadable(why) => return Some(Verdict::Foreign(why)),
        Decoded::NotOurs => {}
    }
    classify_at(head, 0)
}

/// Classifies bytes read at `offset`: a signature found at their start is named with the offset (a file system
/// or partition table inside an image), any other non-zero byte by its offset; `None` when all are zero.
fn classify_at(bytes: &[u8], offset: u64) -> Option<Verdict> {
    let matches = |&(off, magic): &(usize, &[u8])| bytes.get(off..off + magic.len()) == Some(magic);
    if let Some(sig) = SIGNATURES.iter().find(|s| s.at.iter().all(matches)) {
        let at = if offset == 0 {
            String::new()
        } else {
            format!(" at offset {}", oversub_base::format_bytes(offset))
        };
        return Some(Verdict::Foreign(format!("it holds {}{at}", sig.what)));
    }
    bytes.iter().position(|&b| b != 0).map(|i| {
        Verdict::Foreign(format!(
            "it holds data not written by oversub (a non-zero byte at offset {})",
            offset + i as u64
        ))
    })
}

/// The distance between sample points for `len` bytes (module docs).
pub(crate) fn stride(len: u64) -> u64 {
    len.div_ceil(MAX_SAMPLES)
        .next_multiple_of(SCAN_BYTES)
        .max(SCAN_BYTES)
}

/// Applies the blank rule (module docs) to `len` bytes of `fd`, reading in multiples of `alignment` (the fd
/// may be O_DIRECT).
pub(crate) fn inspect(fd: RawFd, len: u64, alignment: usize) -> Result<Verdict, IoError> {
    if len == 0 {
        return Ok(Verdict::Blank);
    }
    let mut pos = match seek(fd, 0, libc::SEEK_DATA) {
        Ok(off) => off,
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Ok(Verdict::Blank),
        // No SEEK_DATA support reads as "data everywhere".
        Err(_) => 0,
    };
    let head = pread_full(fd, 0, len.min(SCAN_BYTES), alignment)?;
    if let Some(v) = classify(&head) {
        return Ok(v);
    }
    let align = alignment as u64;
    let stride = stride(len);
    let mut extent_samples = 0;
    pos = pos.max(SCAN_BYTES);
    while pos < len {
        // The data extent at or after `pos`: [start, end).
        let start = match seek(fd, pos, libc::SEEK_DATA) {
            Ok(off) => off,
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => break,
            Err(_) => pos,
        };
        if start >= len {
            break;
        }
        let end = seek(fd, start, libc::SEEK_HOLE)
            .unwrap_or(len)
            .clamp(start + 1, len);
        // Sample points in it: its start (rounded down to the alignment), then each multiple of the stride.
        let mut at = start - start % align;
        extent_samples += 1;
        if extent_samples > MAX_EXTENT_SAMPLES {
            at = at.next_multiple_of(stride);
        }
        while at < end {
            let n = SAMPLE_BYTES.min(len - at);
            let bytes = pread_full(fd, at, n, alignment)?;
            if let Some(v) = classify_at(&bytes, at) {
                return Ok(v);
            }
            at = (at + 1).next_multiple_of(stride);
        }
        pos = end;
    }
    Ok(Verdict::Blank)
}

fn seek(fd: RawFd, offset: u64, whence: libc::c_int) -> std::io::Result<u64> {
    let off = libc::off_t::try_from(offset)
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: plain syscall on an open fd; it moves the file position, which the store never uses (all I/O is
    // positioned).
    let r = unsafe { libc::lseek(fd, off, whence) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(parts: &[(usize, &[u8])]) -> Vec<u8> {
        let mut v = vec![0u8; 1 << 17];
        for &(off, bytes) in parts {
            v[off..off + bytes.len()].copy_from_slice(bytes);
        }
        v
    }

    fn reason(head: &[u8]) -> String {
        match classify(head) {
            Some(Verdict::Foreign(r)) => r,
            other => panic!("expected foreign, got {other:?}"),
        }
    }

    #[test]
    fn signatures_are_named_in_priority_order() {
        assert_eq!(classify(&[0u8; 4096]), None);
        assert!(reason(&with(&[(1080, &[0x53, 0xef])])).contains("ext4"));
        assert!(reason(&with(&[(510, &[0x55, 0xaa])])).contains("MBR"));
        // GPT carries a protective MBR: named GPT.
        assert!(reason(&with(&[(510, &[0x55, 0xaa]), (512, b"EFI PART")])).contains("GPT"));
        // FAT32 boot sector: named FAT, not MBR.
        assert!(reason(&with(&[(82, b"FAT32   "), (510, &[0x55, 0xaa])])).contains("FAT"));
        // "FAT" without the boot signature is just data.
        assert!(reason(&with(&[(82, b"FAT32   ")])).contains("not written by oversub"));
        assert!(reason(&with(&[(3, b"NTFS    "), (510, &[0x55, 0xaa])])).contains("NTFS"));
        assert!(reason(&with(&[(4086, b"SWAPSPACE2")])).contains("swap"));
        assert!(reason(&with(&[(65600, b"_BHRfS_M")])).contains("btrfs"));
        assert!(reason(&with(&[(7, &[1])])).contains("offset 7"));
        // A signature past the end of a short file is not read out of bounds.
        assert!(reason(&[0x53]).contains("not written by oversub"));
    }
}
