//! Recognising what an existing file or block device holds before `open` writes to it.
//!
//! # The blank rule
//!
//! Reading a whole device to prove it empty would take minutes, so the check is bounded (at most 2 MiB are
//! read). A file or device is *blank* when
//!
//! 1. it is empty, or
//! 2. `lseek(SEEK_DATA)` finds no data at all (`ENXIO`): ext4, XFS and tmpfs all report holes and
//!    fallocated-but-never-written (unwritten) extents this way, so a freshly `fallocate`d file is blank, or
//! 3. its first [`SCAN_BYTES`] (1 MiB) read as zeros (this covers every signature offset below, the farthest
//!    being btrfs at 65600 and swap on 64 KiB pages), **and**, when the first data extent starts past that MiB
//!    (a sparse file), the first MiB of that extent reads as zeros too.
//!
//! A file that is zero-filled for its first MiB but holds data further on, in an extent that begins within that
//! MiB, counts as blank; that is the price of the bound. Anything that is not blank is either oversub's own
//! store (its [header](super::header)) or foreign: a known signature is named, anything else "holds data not
//! written by oversub".

use std::os::fd::RawFd;

use super::header::{Decoded, Header};
use super::sys::pread_full;
use crate::error::IoError;

/// Bytes read from the start (and from the first data extent) by the blank rule.
pub(crate) const SCAN_BYTES: u64 = 1 << 20;

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
    let matches = |&(off, magic): &(usize, &[u8])| head.get(off..off + magic.len()) == Some(magic);
    if let Some(sig) = SIGNATURES.iter().find(|s| s.at.iter().all(matches)) {
        return Some(Verdict::Foreign(format!("it holds {}", sig.what)));
    }
    head.iter().position(|&b| b != 0).map(|i| {
        Verdict::Foreign(format!(
            "it holds data not written by oversub (a non-zero byte at offset {i})"
        ))
    })
}

/// Applies the blank rule (module docs) to `len` bytes of `fd`, reading in multiples of `alignment` (the fd
/// may be O_DIRECT).
pub(crate) fn inspect(fd: RawFd, len: u64, alignment: usize) -> Result<Verdict, IoError> {
    if len == 0 {
        return Ok(Verdict::Blank);
    }
    let first_data = match seek(fd, 0, libc::SEEK_DATA) {
        Ok(off) => off,
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Ok(Verdict::Blank),
        // No SEEK_DATA support reads as "data everywhere", which the scan of the first MiB covers.
        Err(_) => 0,
    };
    let head = pread_full(fd, 0, len.min(SCAN_BYTES), alignment)?;
    if let Some(v) = classify(&head) {
        return Ok(v);
    }
    if first_data >= SCAN_BYTES && first_data < len {
        let start = first_data - first_data % alignment as u64;
        let end = seek(fd, start, libc::SEEK_HOLE)
            .unwrap_or(len)
            .min(len)
            .min(start + SCAN_BYTES);
        if end > start {
            let bytes = pread_full(fd, start, end - start, alignment)?;
            if let Some(i) = bytes.iter().position(|&b| b != 0) {
                return Ok(Verdict::Foreign(format!(
                    "it holds data not written by oversub (a non-zero byte at offset {})",
                    start + i as u64
                )));
            }
        }
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
