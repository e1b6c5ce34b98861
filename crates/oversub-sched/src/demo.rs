//! The paper's example (Figs. 5-8) scaled to a machine's store, as `oversub demo` runs it.

use std::path::PathBuf;

use crate::{Bandwidths, System, Work};

/// The paper's example as shipped in examples/paper.toml.
pub const PAPER_TOML: &str = include_str!("../../../examples/paper.toml");

/// Length of one of the paper's slots, seconds.
const SLOT_S: f64 = 0.5;

/// The paper's example scaled to a store, with what the scaling chose.
#[derive(Debug, Clone)]
pub struct DemoSystem {
    pub system: System,
    /// Bytes of each component's one unit of memory (a multiple of 1 MiB).
    pub unit_bytes: u64,
    /// Factor applied to every time of the table (1.0 unless the unit had to be capped).
    pub time_scale: f64,
}

/// The paper's example scaled to this store: one unit of memory per component, sized so one swap (a unit out
/// and a unit in, at the speeds `bw`) takes `share` of a 500 ms slot. The paper's 1 GiB at 4 GiB/s fills the
/// whole slot (share 1.0). If the unit had to be capped below that size (`max_unit`), time shrinks with it so
/// paging still fills the same share of a slot.
pub fn scale_paper(
    paper: &System,
    bw: Bandwidths,
    share: f64,
    max_unit: u64,
    stores: &[PathBuf],
) -> DemoSystem {
    let swap_target_s = share * SLOT_S;
    let swap_s_per_byte = 1.0 / bw.read_bytes_per_s + 1.0 / bw.write_bytes_per_s;
    let ideal_unit = (swap_target_s / swap_s_per_byte) as u64;
    let unit = (ideal_unit.min(max_unit) >> 20).max(1) << 20;
    let time_scale = if (unit as f64) < ideal_unit as f64 * 0.95 {
        (unit as f64 * swap_s_per_byte / swap_target_s).min(1.0)
    } else {
        1.0
    };
    let mut system = paper.clone();
    for c in &mut system.components {
        for b in &mut c.buffers {
            b.size_bytes = unit;
        }
        c.budget_s *= time_scale;
        c.period_s *= time_scale;
        // The work is an accelerator kernel the CPU waits for (so the two CPUs stay free for paging and checks) and
        // fills 60% of the budget: the rest is for verifying and rewriting the unit's checksum (about 0.1 s for
        // 500 MiB here), so synchronous paging inside the slot has no room, as in the paper, where each component
        // needs its whole budget.
        c.work = Work::Sleep {
            compute_s: c.budget_s * 0.6,
        };
    }
    system.table.hyperperiod_s *= time_scale;
    for s in &mut system.table.slots {
        s.start_s *= time_scale;
        s.length_s *= time_scale;
    }
    system.platform.capacity_bytes = 4 * unit;
    system.platform.stores = stores.to_vec();
    DemoSystem {
        system,
        unit_bytes: unit,
        time_scale,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paper() -> System {
        crate::parse_system(PAPER_TOML, "examples/paper.toml").unwrap()
    }

    #[test]
    fn unit_fills_the_share_of_a_slot() {
        let gib = (1u64 << 30) as f64;
        let d = scale_paper(
            &paper(),
            Bandwidths::direct(4.0 * gib, 4.0 * gib),
            1.0,
            1 << 40,
            &[],
        );
        assert_eq!(d.unit_bytes, 1 << 30);
        assert_eq!(d.time_scale, 1.0);
        assert_eq!(d.system.platform.capacity_bytes, 4 << 30);
        assert!(d
            .system
            .components
            .iter()
            .flat_map(|c| &c.buffers)
            .all(|b| b.size_bytes == 1 << 30));
    }

    #[test]
    fn capped_unit_shrinks_time() {
        let gib = (1u64 << 30) as f64;
        let p = paper();
        let d = scale_paper(
            &p,
            Bandwidths::direct(4.0 * gib, 4.0 * gib),
            1.0,
            256 << 20,
            &[],
        );
        assert_eq!(d.unit_bytes, 256 << 20);
        assert!((d.time_scale - 0.25).abs() < 1e-9);
        assert!((d.system.table.hyperperiod_s - p.table.hyperperiod_s * 0.25).abs() < 1e-9);
    }
}
