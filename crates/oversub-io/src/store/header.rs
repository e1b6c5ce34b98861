//! The header oversub writes at the start of every swap store, so that a later `open` can tell its own store
//! from anything else before writing to it.
//!
//! The header fills the first `header_bytes = max(alignment, 4096)` bytes of the file or device; the data area
//! (every slot) starts right after it. Integers are little-endian:
//!
//! | offset | bytes | field                                                                       |
//! |-------:|------:|-----------------------------------------------------------------------------|
//! |      0 |     8 | magic `\x89OVERSUB` (a high first byte, so no text file starts with it)     |
//! |      8 |     4 | format version, [`VERSION`]                                                 |
//! |     12 |     4 | header bytes: file offset of the data area                                  |
//! |     16 |     4 | owner: effective uid of the process that wrote the header                   |
//! |     20 |     4 | reserved, 0                                                                 |
//! |     24 |     8 | capacity: bytes of the data area                                            |
//! |     32 |     8 | creation time, seconds since the Unix epoch (kept when the store is reopened) |
//! |     40 |     8 | scrub end: file offset below which the data area may hold swapped bytes (version 2) |
//! |     48 |     4 | CRC-32 (IEEE 802.3, as zlib's `crc32`) of bytes 0..48                       |
//! |     52 |  rest | zero, up to header bytes                                                    |
//!
//! `open` rewrites the header every time (capacity and header bytes may change with the device's alignment):
//! slots do not outlive their store, so nothing in the data area depends on the old values. The scrub end is
//! what survives a crash: it is raised (and written) before any slot past it is handed out, lowered to the data
//! offset once a scrub at close has run, and never lowered by a reopen, so the store that next opens the file
//! scrubs whatever a killed store left, even past its own, smaller capacity.
//!
//! Version 1 (written before 2026-11-27) had the CRC at 40 over bytes 0..40 and no scrub end; it is still read,
//! its scrub end taken as the end of its data area.

/// First bytes of every oversub swap store.
pub(crate) const MAGIC: [u8; 8] = *b"\x89OVERSUB";
/// Format version written by this build; higher versions are refused.
pub(crate) const VERSION: u32 = 2;
/// Bytes of the header that carry fields (the rest of `header_bytes` is zero).
pub(crate) const ENCODED_LEN: usize = 52;
/// Bytes of a version-1 header.
const ENCODED_LEN_V1: usize = 44;

/// The fields of a store header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// File offset of the data area.
    pub header_bytes: u32,
    /// Effective uid of the writer.
    pub owner_uid: u32,
    /// Bytes of the data area.
    pub capacity: u64,
    /// Creation time, Unix seconds.
    pub created: u64,
    /// File offset below which the data area may hold swapped bytes (see the module docs).
    pub scrub_end: u64,
}

/// What the first bytes of a file say about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// No oversub magic.
    NotOurs,
    /// A valid header.
    Ours(Header),
    /// The magic is there but the rest cannot be trusted (why).
    Unreadable(String),
}

impl Header {
    /// Writes the fields into `out[..ENCODED_LEN]`; the caller passes a zeroed buffer of `header_bytes`.
    /// A shorter buffer gets nothing (never the case: header bytes are at least 4096).
    pub fn encode_into(&self, out: &mut [u8]) {
        let Some(out) = out.get_mut(..ENCODED_LEN) else {
            return;
        };
        out[0..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&self.header_bytes.to_le_bytes());
        out[16..20].copy_from_slice(&self.owner_uid.to_le_bytes());
        out[20..24].fill(0);
        out[24..32].copy_from_slice(&self.capacity.to_le_bytes());
        out[32..40].copy_from_slice(&self.created.to_le_bytes());
        out[40..48].copy_from_slice(&self.scrub_end.to_le_bytes());
        let crc = crc32(&out[..48]);
        out[48..52].copy_from_slice(&crc.to_le_bytes());
    }

    /// Reads a header from the first bytes of a file.
    pub fn decode(bytes: &[u8]) -> Decoded {
        if bytes.get(..8) != Some(&MAGIC[..]) {
            return Decoded::NotOurs;
        }
        let Some(b) = bytes.get(..ENCODED_LEN_V1) else {
            return Decoded::Unreadable("its oversub header is cut short".into());
        };
        let u32_at = |b: &[u8], o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |b: &[u8], o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        // The version first: a newer format may checksum differently.
        let version = u32_at(b, 8);
        let (b, crc_at) = match version {
            1 => (b, 40),
            VERSION => match bytes.get(..ENCODED_LEN) {
                Some(b) => (b, 48),
                None => return Decoded::Unreadable("its oversub header is cut short".into()),
            },
            _ => {
                return Decoded::Unreadable(format!(
                    "it is an oversub swap store of format version {version}, which this build (version {VERSION}) \
                     does not know"
                ))
            }
        };
        if crc32(&b[..crc_at]) != u32_at(b, crc_at) {
            return Decoded::Unreadable("its oversub header is damaged (checksum mismatch)".into());
        }
        let header_bytes = u32_at(b, 12);
        let capacity = u64_at(b, 24);
        Decoded::Ours(Header {
            header_bytes,
            owner_uid: u32_at(b, 16),
            capacity,
            created: u64_at(b, 32),
            scrub_end: if version == 1 {
                u64::from(header_bytes).saturating_add(capacity)
            } else {
                u64_at(b, 40)
            },
        })
    }
}

/// CRC-32 (IEEE 802.3, reflected, as zlib). Bitwise: it runs over 40 bytes per open, so no table.
pub(crate) fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_zlib() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn round_trip_and_damage() {
        let h = Header {
            header_bytes: 4096,
            owner_uid: 1000,
            capacity: 1 << 30,
            created: 1_700_000_000,
            scrub_end: 4096 + (1 << 20),
        };
        let mut buf = vec![0u8; 4096];
        h.encode_into(&mut buf);
        assert_eq!(Header::decode(&buf), Decoded::Ours(h));
        assert!(buf[ENCODED_LEN..].iter().all(|&b| b == 0));
        buf[17] ^= 1;
        assert!(matches!(Header::decode(&buf), Decoded::Unreadable(_)));
        buf[8] = 3;
        assert!(
            matches!(Header::decode(&buf), Decoded::Unreadable(why) if why.contains("version 3"))
        );
        assert_eq!(Header::decode(&[0u8; 4096]), Decoded::NotOurs);
        assert!(matches!(Header::decode(&MAGIC), Decoded::Unreadable(_)));
    }

    /// A version-1 header (no scrub end) from an earlier build still opens; its whole data area counts as used.
    #[test]
    fn version_1_headers_are_read() {
        let mut buf = vec![0u8; 4096];
        buf[..8].copy_from_slice(&MAGIC);
        buf[8..12].copy_from_slice(&1u32.to_le_bytes());
        buf[12..16].copy_from_slice(&4096u32.to_le_bytes());
        buf[16..20].copy_from_slice(&7u32.to_le_bytes());
        buf[24..32].copy_from_slice(&(8u64 << 20).to_le_bytes());
        buf[32..40].copy_from_slice(&99u64.to_le_bytes());
        let crc = crc32(&buf[..40]);
        buf[40..44].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            Header::decode(&buf),
            Decoded::Ours(Header {
                header_bytes: 4096,
                owner_uid: 7,
                capacity: 8 << 20,
                created: 99,
                scrub_end: 4096 + (8 << 20),
            })
        );
    }
}
