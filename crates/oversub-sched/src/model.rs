//! The validated system model: platform, components with their buffers, and the slot table.

use std::path::PathBuf;

/// Index of a component in [`System::components`].
pub type ComponentId = usize;

/// A buffer of the whole system: (component, index in that component's buffer list) flattened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BufferId(pub usize);

/// One buffer a component needs resident during its slots.
#[derive(Debug, Clone, PartialEq)]
pub struct BufferSpec {
    /// Name, unique within the component.
    pub name: String,
    /// Size in bytes (> 0).
    pub size_bytes: u64,
    /// Contents never change: written to the store once.
    pub read_only: bool,
}

/// What a component does in each of its slots.
///
/// `Spin` and `Sleep` are built-in works (the executor verifies the buffers' checksums before them and changes the
/// read-write buffers after them); `User` is the caller's own code, registered by component name with
/// [`crate::Runtime::work`] (Rust) or `run_schedule(work={...})` (Python).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Work {
    /// Busy-loop on the CPU for this long.
    Spin {
        /// Seconds of computation per slot.
        compute_s: f64,
    },
    /// Sleep this long (an accelerator kernel the CPU only waits for).
    Sleep {
        /// Seconds per slot.
        compute_s: f64,
    },
    /// The caller's own code. The planner assumes it runs for `wcet_s` (its worst-case execution time: the
    /// configuration's `work = { wcet_ms = … }`, else the whole budget).
    User {
        /// Worst-case seconds per slot the planner budgets for it.
        wcet_s: f64,
    },
}

impl Work {
    /// Seconds of work per slot the planner assumes.
    pub fn compute_s(&self) -> f64 {
        match *self {
            Work::Spin { compute_s } | Work::Sleep { compute_s } => compute_s,
            Work::User { wcet_s } => wcet_s,
        }
    }

    /// Whether the executor can run this work itself (`Spin` or `Sleep`), without a registered closure.
    pub fn is_builtin(&self) -> bool {
        !matches!(self, Work::User { .. })
    }

    /// The same work, planned as taking `factor` times as long (interference, Sec. III-D).
    pub fn inflated(&self, factor: f64) -> Work {
        match *self {
            Work::Spin { compute_s } => Work::Spin {
                compute_s: compute_s * factor,
            },
            Work::Sleep { compute_s } => Work::Sleep {
                compute_s: compute_s * factor,
            },
            Work::User { wcet_s } => Work::User {
                wcet_s: wcet_s * factor,
            },
        }
    }
}

/// A component of the TimeWall model: it runs in slots of its budget, once per period.
#[derive(Debug, Clone, PartialEq)]
pub struct Component {
    /// Unique name.
    pub name: String,
    /// Time slice per period, seconds.
    pub budget_s: f64,
    /// Period, seconds.
    pub period_s: f64,
    /// CPUs it may run on (the first is used by derived tables).
    pub cpus: Vec<usize>,
    /// GPUs it uses (shown in timelines; slots on one GPU must not overlap).
    pub gpus: Vec<usize>,
    /// Its buffers.
    pub buffers: Vec<BufferSpec>,
    /// Its per-slot work.
    pub work: Work,
}

/// One entry of the table: a component runs on a CPU during [start_s, start_s + length_s) of each hyperperiod.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    /// The component.
    pub component: ComponentId,
    /// Offset in the hyperperiod, seconds.
    pub start_s: f64,
    /// Length, seconds (the component's budget unless the table says otherwise).
    pub length_s: f64,
    /// The CPU it runs on.
    pub cpu: usize,
    /// The GPU it uses, if any.
    pub gpu: Option<usize>,
}

impl Slot {
    /// End offset of the slot.
    pub fn end_s(&self) -> f64 {
        self.start_s + self.length_s
    }
}

/// The cyclic table: slots sorted by start, repeated every hyperperiod.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Length of one repetition, seconds.
    pub hyperperiod_s: f64,
    /// Slots sorted by start time.
    pub slots: Vec<Slot>,
}

/// Which device-memory backend runs the components' buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceKind {
    /// System DRAM (integrated-GPU model).
    #[default]
    Host,
}

/// The machine as the configuration describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Platform {
    /// Device memory the pool may use, bytes.
    pub capacity_bytes: u64,
    /// Swap store locations: each a file, a directory to create one in, or a block device; several stripe the
    /// store over them ([`oversub_io::StoreBuilder::build`]); empty = the system temp directory.
    pub stores: Vec<PathBuf>,
    /// Device-memory backend.
    pub device: DeviceKind,
    /// CPUs slots may use (0..cpus).
    pub cpus: usize,
    /// GPUs slots may use (0..gpus).
    pub gpus: usize,
}

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct System {
    /// The platform.
    pub platform: Platform,
    /// Components in declaration order.
    pub components: Vec<Component>,
    /// The slot table.
    pub table: Table,
}

impl System {
    /// Every buffer of the system with its owner, indexed by [`BufferId`].
    pub fn buffers(&self) -> Vec<(ComponentId, &BufferSpec)> {
        self.components
            .iter()
            .enumerate()
            .flat_map(|(c, comp)| comp.buffers.iter().map(move |b| (c, b)))
            .collect()
    }

    /// The buffer ids of a component.
    pub fn component_buffers(&self, component: ComponentId) -> Vec<BufferId> {
        let first: usize = self.components[..component]
            .iter()
            .map(|c| c.buffers.len())
            .sum();
        (first..first + self.components[component].buffers.len())
            .map(BufferId)
            .collect()
    }

    /// Total bytes of all buffers.
    pub fn demand_bytes(&self) -> u64 {
        self.buffers().iter().map(|(_, b)| b.size_bytes).sum()
    }

    /// A copy whose table is stretched to `period_s`: slot starts scale with the hyperperiod, lengths stay (the
    /// budgets do not change, the gaps between slots grow or shrink).
    pub fn with_hyperperiod(&self, hyperperiod_s: f64) -> System {
        let scale = hyperperiod_s / self.table.hyperperiod_s;
        let mut s = self.clone();
        s.table.hyperperiod_s = hyperperiod_s;
        for slot in &mut s.table.slots {
            slot.start_s *= scale;
        }
        s
    }

    /// A copy whose works take `factor` times as long as declared: the interference inflation of Sec. III-D (CPU
    /// work slowed by the paging's DRAM traffic; `oversub bench interference` measures it). Used for planning only;
    /// the executor runs the works as they are.
    pub fn with_work_inflation(&self, factor: f64) -> System {
        let mut s = self.clone();
        for c in &mut s.components {
            c.work = c.work.inflated(factor);
        }
        s
    }

    /// A copy with another pool capacity.
    pub fn with_capacity(&self, capacity_bytes: u64) -> System {
        let mut s = self.clone();
        s.platform.capacity_bytes = capacity_bytes;
        s
    }
}
