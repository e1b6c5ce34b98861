//! Incompressible buffer contents for the experiments.

/// Fills `buf` with fast pseudo-random bytes (incompressible, like the paper's randomly filled buffer).
pub fn fill_random(buf: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}
