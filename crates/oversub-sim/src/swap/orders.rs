//! Arrival orders. All tasks start at t = 0 (the paper's "execute all tasks at the same time", Sec. IV-A), so their
//! first requests reach the FIFO queues at the same instant, and the engine breaks such ties by task index. Which
//! task a simultaneous start serves first is something the paper's model does not say, and in Fig. 6, whose tasks
//! differ by microseconds, it decided Baseline's one swap and with it Alg. 1's victim: the listing order chose
//! the victim. A multi-task run is therefore simulated under every arrival order of the tasks and each task's
//! response time is its mean over those orders, so the listing order changes nothing and the victim is decided by
//! what the tasks are.

use super::model::{System, Task};
use super::sim::{simulate, Mode, Outcome};
use super::SwapSimError;

/// Up to this many tasks every one of the n! arrival orders is run (720 runs at 6); beyond it, the 2n rotations
/// of the canonical order and of its reverse (each task first once and last once), which a listing's order cannot
/// change either. Four tasks, every scenario of the paper, take 24 runs.
pub const ALL_ORDERS_UP_TO: usize = 6;

/// The tasks' indices sorted by what they are (name, working set, compute times, given weight), so that the same
/// tasks listed in any order give the same sequence; fully identical tasks are interchangeable.
pub fn canonical_order(tasks: &[Task]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..tasks.len()).collect();
    idx.sort_by(|&a, &b| {
        let (x, y) = (&tasks[a], &tasks[b]);
        x.name
            .cmp(&y.name)
            .then(x.memory_bytes.cmp(&y.memory_bytes))
            .then_with(|| x.compute_ns.cmp(&y.compute_ns))
            .then_with(|| match (x.weight, y.weight) {
                (Some(p), Some(q)) => p.total_cmp(&q),
                (p, q) => p.is_some().cmp(&q.is_some()),
            })
    });
    idx
}

/// The arrival orders a run of `tasks` is simulated under, each a list of task indices (position 0 arrives
/// first); the first is the canonical order.
pub fn arrival_orders(tasks: &[Task]) -> Vec<Vec<usize>> {
    let canon = canonical_order(tasks);
    let n = canon.len();
    if n <= ALL_ORDERS_UP_TO {
        let mut out = Vec::new();
        permutations(
            &canon,
            &mut Vec::with_capacity(n),
            &mut vec![false; n],
            &mut out,
        );
        out
    } else {
        let mut out = Vec::with_capacity(2 * n);
        let rev: Vec<usize> = canon.iter().rev().copied().collect();
        for base in [&canon, &rev] {
            for r in 0..n {
                out.push((0..n).map(|k| base[(k + r) % n]).collect());
            }
        }
        out
    }
}

fn permutations(
    items: &[usize],
    cur: &mut Vec<usize>,
    used: &mut [bool],
    out: &mut Vec<Vec<usize>>,
) {
    if cur.len() == items.len() {
        out.push(cur.clone());
        return;
    }
    for k in 0..items.len() {
        if !used[k] {
            used[k] = true;
            cur.push(items[k]);
            permutations(items, cur, used, out);
            cur.pop();
            used[k] = false;
        }
    }
}

/// `mode` with its per-task vectors in the order `ord`.
fn mode_in_order(mode: &Mode, ord: &[usize]) -> Mode {
    let pick = |v: &[usize]| ord.iter().map(|&i| v[i]).collect::<Vec<_>>();
    let pick_u64 = |v: &[u64]| ord.iter().map(|&i| v[i]).collect::<Vec<_>>();
    match mode {
        Mode::Baseline => Mode::Baseline,
        Mode::Mat => Mode::Mat,
        Mode::Proposed {
            ranks,
            direct_bytes,
        } => Mode::Proposed {
            ranks: pick(ranks),
            direct_bytes: pick_u64(direct_bytes),
        },
        Mode::PriorityOnly { ranks } => Mode::PriorityOnly { ranks: pick(ranks) },
        Mode::DirectOnly {
            ranks,
            direct_bytes,
        } => Mode::DirectOnly {
            ranks: pick(ranks),
            direct_bytes: pick_u64(direct_bytes),
        },
    }
}

/// `o`, simulated with the tasks in the order `ord`, with every per-task record put back in the listing's order.
fn relabel(o: Outcome, ord: &[usize]) -> Outcome {
    let n = ord.len();
    let back = |v: &[u32]| {
        let mut out = vec![0; n];
        for (k, &i) in ord.iter().enumerate() {
            out[i] = v[k];
        }
        out
    };
    let mut response_ns = vec![0; n];
    let mut memory_bytes = vec![0; n];
    let mut completions = vec![Vec::new(); n];
    for (k, &i) in ord.iter().enumerate() {
        response_ns[i] = o.response_ns[k];
        memory_bytes[i] = o.memory_bytes[k];
        completions[i] = o.completions[k].clone();
    }
    let mut servers = o.servers;
    for s in &mut servers {
        for b in &mut s.busy {
            b.task = ord[b.task];
        }
    }
    let mut sm_dispatches = o.sm_dispatches;
    for d in &mut sm_dispatches {
        d.task = ord[d.task];
    }
    Outcome {
        swap_outs: back(&o.swap_outs),
        swap_ins: back(&o.swap_ins),
        response_ns,
        memory_bytes,
        completions,
        servers,
        sm_dispatches,
        ..o
    }
}

/// A run over every arrival order.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderedRuns {
    /// Each task's response time summed over the orders (ns), in the listing's order.
    pub response_sum_ns: Vec<u128>,
    /// How many orders were run.
    pub orders: u64,
    /// The run in the canonical order, its records in the listing's order: what a single run shows (swap counts,
    /// the servers' logs).
    pub canonical: Outcome,
}

impl OrderedRuns {
    /// Each task's mean response time over the orders, in seconds.
    pub fn response_s(&self) -> Vec<f64> {
        self.response_sum_ns
            .iter()
            .map(|&s| s as f64 / self.orders as f64 / 1e9)
            .collect()
    }

    /// Each task's mean response time less `alone_ns[i]`, in seconds.
    pub fn lengthened_s(&self, alone_ns: &[u64]) -> Vec<f64> {
        let n = self.orders as i128;
        self.response_sum_ns
            .iter()
            .zip(alone_ns)
            .map(|(&s, &a)| (s as i128 - n * i128::from(a)) as f64 / n as f64 / 1e9)
            .collect()
    }
}

/// Simulates `tasks` under `mode` in every arrival order ([`arrival_orders`]); `check` runs the conservation
/// checks on every run.
pub fn simulate_orders(
    system: &System,
    tasks: &[Task],
    mode: &Mode,
    check: bool,
) -> Result<OrderedRuns, SwapSimError> {
    let orders = arrival_orders(tasks);
    let mut sum = vec![0u128; tasks.len()];
    let mut canonical = None;
    for ord in &orders {
        let listed: Vec<Task> = ord.iter().map(|&i| tasks[i].clone()).collect();
        let o = simulate(system, &listed, &mode_in_order(mode, ord))?;
        if check {
            o.check()?;
        }
        for (k, &i) in ord.iter().enumerate() {
            sum[i] += u128::from(o.response_ns[k]);
        }
        if canonical.is_none() {
            canonical = Some(relabel(o, ord));
        }
    }
    let canonical = canonical.ok_or_else(|| SwapSimError::invalid("", "no tasks to simulate"))?;
    Ok(OrderedRuns {
        response_sum_ns: sum,
        orders: orders.len() as u64,
        canonical,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn task(name: &str) -> Task {
        Task {
            name: name.into(),
            memory_bytes: 1,
            compute_ns: vec![1],
            weight: None,
        }
    }

    #[test]
    fn every_order_up_to_six_tasks_and_rotations_beyond() {
        let four: Vec<Task> = ["d", "b", "a", "c"].iter().map(|n| task(n)).collect();
        let orders = arrival_orders(&four);
        assert_eq!(orders.len(), 24);
        assert_eq!(orders[0], vec![2, 1, 3, 0], "canonical first: a, b, c, d");
        let mut sorted = orders.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 24);
        let eight: Vec<Task> = (0..8).map(|i| task(&format!("t{i}"))).collect();
        let orders = arrival_orders(&eight);
        assert_eq!(orders.len(), 16);
        for i in 0..8 {
            assert_eq!(orders.iter().filter(|o| o[0] == i).count(), 2);
        }
    }
}
