//! The figures Vesely et al. (ISPASS 2016) measured on an AMD A10-7850K APU (Kaveri), printed beside ours. Their
//! GPU is an integrated one whose faults the CPU services through the IOMMU; the closest thing on a CPU-only
//! machine is a fault serviced by a user-space handler (userfaultfd).

/// CPU TLB-miss latency (Table 3): (477 − 134) µs / (15,938 − 1,412) misses.
pub const CPU_TLB_MISS_S: f64 = 0.023e-6;
/// GPU TLB-miss latency (Table 3): (18,444 − 12,707) µs / (10,010 − 166) misses.
pub const GPU_TLB_MISS_S: f64 = 0.58e-6;
/// Concurrent GPU page walks the IOMMU supports before latency climbs (Fig. 2).
pub const GPU_CONCURRENT_WALKS: usize = 16;
/// CPU page-fault latency, single thread (Sec. V-A).
pub const CPU_PAGE_FAULT_S: f64 = 1.7e-6;
/// GPU page-fault latency with 1 outstanding fault (Fig. 6).
pub const GPU_PAGE_FAULT_MIN_S: f64 = 5e-6;
/// GPU page-fault latency with 64 outstanding faults (Fig. 6: 100-140 µs).
pub const GPU_PAGE_FAULT_MAX_S: f64 = 140e-6;
/// GPU page faults serviced per second at 64 workitems (Fig. 6: 260 per ms); throughput stops growing past 32.
pub const GPU_FAULTS_PER_S_AT_64: f64 = 260e3;
/// Single-entry GPU TLB shootdown (Table 4).
pub const GPU_SHOOTDOWN_SINGLE_S: f64 = 4.234e-6;
/// All-entry GPU TLB shootdown (Table 4).
pub const GPU_SHOOTDOWN_ALL_S: f64 = 4.409e-6;
/// Unsorted over sorted lookups with 4 KiB pages (Fig. 4): XSBench 6×, BPT 26×.
pub const UNSORTED_SLOWDOWN_4K: (f64, f64) = (6.0, 26.0);
/// The same with 1 GiB pages, TLB misses gone (Fig. 4): XSBench 1.5×, BPT 7×.
pub const UNSORTED_SLOWDOWN_HUGE: (f64, f64) = (1.5, 7.0);
