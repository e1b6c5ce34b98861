//! Simulators (trace-driven and discrete-event) for choosing and checking oversub's policies without the hardware.
//!
//! [`uvm`] reproduces the study of page-migration policies for unified memory under oversubscription
//! (Chang, Kumar & Sivasubramaniam, SYSTOR 2021, "DynaMap"): a stream of cache-line accesses from a trace file or a
//! workload generator goes through a GPU L2 model, a page table with GPU-resident, host-mapped and unmapped pages,
//! and one migration policy; counted events are turned into an estimated run time with the paper's cost model.
//!
//! [`swap`] reproduces contention-aware swap space management for several tasks sharing one memory (Yang & Chen,
//! "Memory Contention Aware Swap Space Management"): a discrete-event model of tasks issuing subtasks through one
//! memory controller, one SSD and a GPU's SMs, under Baseline (LRU swapping), MaT (SM throttling) and the proposed
//! policy (Alg. 1 priorities, Alg. 2 direct storage access), with the lengthened latency of every task.
//!
//! Nothing here prints; the `oversub sim` command formats the results.
#![forbid(unsafe_code)]

/// The deterministic generator of the workloads (oversub's one RNG, from `oversub-base`).
pub use oversub_base::rng;
pub mod swap;
pub mod uvm;
