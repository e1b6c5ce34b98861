#![allow(dead_code)]
//! Systems built in code for the planner tests.

use oversub_sched::{BufferSpec, Component, DeviceKind, Platform, Slot, System, Table, Work};

pub const GIB: u64 = 1 << 30;

/// The paper's example (Figs. 5-8): A, B, C (500 ms) on CPU 0, D, E (750 ms) on CPU 1, period 1500 ms, one
/// unit of memory each, capacity for `capacity_units`.
pub fn paper(unit: u64, capacity_units: u64) -> System {
    let comp = |name: &str, budget_s: f64, cpu: usize| Component {
        name: name.into(),
        budget_s,
        period_s: 1.5,
        cpus: vec![cpu],
        gpus: if cpu == 0 { vec![0] } else { vec![] },
        buffers: vec![BufferSpec {
            name: "state".into(),
            size_bytes: unit,
            read_only: false,
        }],
        work: Work::Spin {
            compute_s: budget_s * 0.6,
        },
    };
    let components = vec![
        comp("A", 0.5, 0),
        comp("B", 0.5, 0),
        comp("C", 0.5, 0),
        comp("D", 0.75, 1),
        comp("E", 0.75, 1),
    ];
    let slot = |c: usize, start_s: f64, length_s: f64, cpu: usize| Slot {
        component: c,
        start_s,
        length_s,
        cpu,
        gpu: (cpu == 0).then_some(0),
    };
    let mut slots = vec![
        slot(0, 0.0, 0.5, 0),
        slot(3, 0.0, 0.75, 1),
        slot(1, 0.5, 0.5, 0),
        slot(4, 0.75, 0.75, 1),
        slot(2, 1.0, 0.5, 0),
    ];
    slots.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    System {
        platform: Platform {
            capacity_bytes: capacity_units * unit,
            stores: Vec::new(),
            device: DeviceKind::Host,
            cpus: 2,
            gpus: 1,
        },
        components,
        table: Table {
            hyperperiod_s: 1.5,
            slots,
        },
    }
}

/// Scales every time in `sys` by `factor`: the table, the components' budgets and periods, and the compute of a
/// spinning component (other work is the caller's to set, usually from the scaled budget).
pub fn scale_time(sys: &mut System, factor: f64) {
    sys.table.hyperperiod_s *= factor;
    for s in &mut sys.table.slots {
        s.start_s *= factor;
        s.length_s *= factor;
    }
    for c in &mut sys.components {
        c.budget_s *= factor;
        c.period_s *= factor;
        if let Work::Spin { compute_s } = &mut c.work {
            *compute_s *= factor;
        }
    }
}
