//! The random fill of the benchmarks' buffers, from the lab's harness (one copy).

pub use oversub_lab::harness::memory::fill_random;
