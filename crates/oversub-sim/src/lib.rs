//! Trace-driven simulators for choosing and checking oversub's policies without the hardware.
//!
//! [`uvm`] reproduces the study of page-migration policies for unified memory under oversubscription
//! (Chang, Kumar & Sivasubramaniam, SYSTOR 2021, "DynaMap"): a stream of cache-line accesses from a trace file or a
//! workload generator goes through a GPU L2 model, a page table with GPU-resident, host-mapped and unmapped pages,
//! and one migration policy; counted events are turned into an estimated run time with the paper's cost model.
//!
//! Nothing here prints; the `oversub sim` command formats the results.

pub mod rng;
pub mod swap;
pub mod uvm;
