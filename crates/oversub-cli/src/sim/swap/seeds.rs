//! `oversub sim swap` over many seeds (the default): tables of medians, quartiles and win shares, the JSON
//! document, and one figure per scenario with every seed's value as a dot over its box.

use oversub_report::text_table_left;
use oversub_sim::swap::seeds::{PositionStats, SeedSet, Spread};
use oversub_sim::swap::DirectAccess;

/// `serial` or `overlapped`, as the flag spells it.
pub fn timing_name(d: DirectAccess) -> &'static str {
    match d {
        DirectAccess::Serial => "serial",
        DirectAccess::Overlapped => "overlapped",
    }
}

/// `serial (default)` or `overlapped`.
fn timing_label(d: DirectAccess) -> String {
    if d == DirectAccess::default() {
        format!("{} (default)", timing_name(d))
    } else {
        timing_name(d).to_string()
    }
}

fn num(v: f64) -> String {
    // Fig. 6 is in milliseconds, the synthetic figures in tens of seconds.
    if v.abs() < 10.0 {
        format!("{v:.4}")
    } else {
        format!("{v:.2}")
    }
}

/// `median [q1, q3]`.
fn spread_s(s: Option<Spread>) -> String {
    s.map_or_else(
        || "-".into(),
        |s| format!("{} [{}, {}]", num(s.median), num(s.q1), num(s.q3)),
    )
}

/// `median% [q1%, q3%]`.
fn spread_pct(s: Option<Spread>) -> String {
    s.map_or_else(
        || "n/a".into(),
        |s| format!("{:.0}% [{:.0}%, {:.0}%]", s.median, s.q1, s.q3),
    )
}

fn share(k: Option<usize>, n: usize) -> String {
    k.map_or_else(|| "-".into(), |k| format!("{k}/{n}"))
}

/// Which tasks held a position: `T3 ×12, T1 ×8`, or the one name when it never changed.
fn holders(p: &PositionStats) -> String {
    if let [(name, _)] = p.tasks.as_slice() {
        return name.clone();
    }
    let mut t = p.tasks.clone();
    t.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    t.iter()
        .map(|(n, c)| format!("{n} ×{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One scenario over the seeds: per priority position each policy's median [IQR] and Proposed's wins.
pub fn scenario_report(set: &SeedSet, seeds: &[u64]) -> String {
    let n = set.per_seed.len();
    let mut out = format!(
        "{}{}, direct access {}: {} seeds ({}){}\n",
        set.name,
        set.paper
            .map(|p| format!(" ({})", p.figure))
            .unwrap_or_default(),
        timing_label(set.direct_access),
        n,
        seed_range(seeds),
        if set.seed_dependent {
            String::new()
        } else {
            "; nothing in this scenario is drawn from the seed, so every seed is the same run"
                .into()
        }
    );
    let mut header: Vec<String> = vec!["prio".into(), "task(s)".into()];
    header.extend(
        set.policy_labels
            .iter()
            .map(|l| format!("{l} (s) median [IQR]")),
    );
    header.push("Proposed < Baseline".into());
    header.push("Proposed < MaT".into());
    let rows: Vec<Vec<String>> = set
        .positions
        .iter()
        .map(|p| {
            let mut row = vec![format!("p{}", p.priority), holders(p)];
            row.extend(p.lengthened_s.iter().map(|s| spread_s(*s)));
            row.push(share(p.proposed_beats_baseline, p.seeds));
            row.push(share(p.proposed_beats_mat, p.seeds));
            row
        })
        .collect();
    let h: Vec<&str> = header.iter().map(String::as_str).collect();
    out.push_str(&text_table_left(&h, &rows, 2));
    if let Some(low) = set.lowest() {
        let paper = set.paper;
        out.push_str(&format!(
            "lowest priority: Proposed beats Baseline in {} seeds, cut {}{}; beats MaT in {} seeds, cut {}{}\n",
            share(low.proposed_beats_baseline, low.seeds),
            spread_pct(set.lowest_cut_vs_baseline_pct),
            paper
                .map(|p| format!(" (paper {:.0}%)", p.vs_baseline_pct))
                .unwrap_or_default(),
            share(low.proposed_beats_mat, low.seeds),
            spread_pct(set.lowest_cut_vs_mat_pct),
            paper
                .map(|p| format!(" (paper {:.0}%)", p.vs_mat_pct))
                .unwrap_or_default(),
        ));
    }
    out
}

/// `1-20`, or the list when the seeds are not consecutive.
pub fn seed_range(seeds: &[u64]) -> String {
    match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if b - a + 1 == seeds.len() as u64 && a != b => format!("seeds {a}-{b}"),
        (Some(a), Some(b)) if a == b => format!("seed {a}"),
        _ => format!(
            "seeds {}",
            seeds
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// The headline table: one row per scenario and direct-access timing.
pub fn summary_table(sets: &[SeedSet]) -> String {
    let rows: Vec<Vec<String>> = sets
        .iter()
        .map(|set| {
            let low = set.lowest();
            let prop = set.proposed_index();
            let top = set.highest().zip(prop).and_then(|(h, k)| h.lengthened_s[k]);
            let paper = set.paper;
            vec![
                set.name.clone(),
                timing_label(set.direct_access),
                share(
                    low.and_then(|l| l.proposed_beats_baseline),
                    set.per_seed.len(),
                ),
                spread_pct(set.lowest_cut_vs_baseline_pct),
                paper.map_or_else(|| "-".into(), |p| format!("{:.0}%", p.vs_baseline_pct)),
                share(low.and_then(|l| l.proposed_beats_mat), set.per_seed.len()),
                spread_pct(set.lowest_cut_vs_mat_pct),
                paper.map_or_else(|| "-".into(), |p| format!("{:.0}%", p.vs_mat_pct)),
                spread_s(top),
            ]
        })
        .collect();
    format!(
        "Summary over seeds: the lowest-priority task, seeds where Proposed's lengthened latency is below \
         Baseline's / MaT's, and its cut (median [IQR]; negative: Proposed lengthens it); the top task's lengthened \
         latency under Proposed (s, median [IQR])\n{}",
        text_table_left(
            &[
                "scenario",
                "direct access",
                "wins vs Baseline",
                "cut vs Baseline",
                "paper",
                "wins vs MaT",
                "cut vs MaT",
                "paper",
                "top task (s)",
            ],
            &rows,
            2,
        )
    )
}

const COLORS: [&str; 7] = [
    "#7f7f7f", "#1f77b4", "#2ca02c", "#9467bd", "#d62728", "#ff7f0e", "#8c564b",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One figure per scenario, like the paper's Figs. 4-6 (tasks by priority on the x axis, lengthened latency on the
/// y axis, one column per policy), with the spread over seeds: a box from the first to the third quartile, a line
/// at the median and every seed's value as a dot.
pub fn svg(set: &SeedSet) -> String {
    let (w, h) = (900.0_f64, 460.0_f64);
    let (left, right, top, bottom) = (80.0, 190.0, 50.0, 60.0);
    let plot_w = w - left - right;
    let plot_h = h - top - bottom;
    let npol = set.policies.len().max(1);
    let values = set
        .per_seed
        .iter()
        .flat_map(|p| p.lengthened_s.iter().flatten().copied());
    let (mut lo, mut hi) = values.fold((0.0_f64, 0.0_f64), |(a, b), v| (a.min(v), b.max(v)));
    if hi - lo <= 0.0 {
        hi = lo + 1.0;
    }
    let pad = (hi - lo) * 0.05;
    lo -= if lo < 0.0 { pad } else { 0.0 };
    hi += pad;
    let y = |v: f64| top + plot_h - (v - lo) / (hi - lo) * plot_h;
    let groups = set.positions.len().max(1) as f64;
    let group_w = plot_w / groups;
    let col_w = group_w * 0.8 / npol as f64;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let title = format!(
        "{}{}: lengthened latency over {} seeds, direct access {}",
        set.name,
        set.paper
            .map(|p| format!(" ({})", p.figure))
            .unwrap_or_default(),
        set.per_seed.len(),
        timing_label(set.direct_access)
    );
    s.push_str(&format!(
        "<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
        left + plot_w / 2.0,
        esc(&title)
    ));
    // Axis with five ticks and a zero line.
    for k in 0..=5 {
        let v = lo + (hi - lo) * k as f64 / 5.0;
        let yy = y(v);
        s.push_str(&format!(
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#eee\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            left + plot_w,
            left - 6.0,
            yy + 4.0,
            num(v)
        ));
    }
    s.push_str(&format!(
        "<line x1=\"{left}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#000\"/>\n",
        left + plot_w,
        y(0.0),
        y(0.0)
    ));
    s.push_str(&format!(
        "<text transform=\"translate(18,{}) rotate(-90)\" text-anchor=\"middle\">lengthened latency (s)</text>\n",
        top + plot_h / 2.0
    ));
    for (g, pos) in set.positions.iter().enumerate() {
        let gx = left + g as f64 * group_w + group_w * 0.1;
        s.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">p{}: {}</text>\n",
            gx + group_w * 0.4,
            top + plot_h + 20.0,
            pos.priority,
            esc(&holders(pos))
        ));
        for (k, sp) in pos.lengthened_s.iter().enumerate() {
            let color = COLORS[k % COLORS.len()];
            let cx = gx + (k as f64 + 0.5) * col_w;
            if let Some(sp) = sp {
                s.push_str(&format!(
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\" fill-opacity=\"0.25\" stroke=\"{color}\"/>\
                     <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-width=\"2\"/>\n",
                    cx - col_w * 0.4,
                    y(sp.q3),
                    col_w * 0.8,
                    (y(sp.q1) - y(sp.q3)).max(0.5),
                    cx - col_w * 0.4,
                    cx + col_w * 0.4,
                    y(sp.median),
                    y(sp.median),
                ));
            }
            let n = set.per_seed.len().max(1) as f64;
            for (i, p) in set.per_seed.iter().enumerate() {
                let v = p.lengthened_s[k][pos.priority - 1];
                // Spread the dots across the column so that equal values stay countable.
                let dx = (i as f64 + 0.5) / n - 0.5;
                s.push_str(&format!(
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2\" fill=\"{color}\"><title>seed {}: {} s</title></circle>\n",
                    cx + dx * col_w * 0.6,
                    y(v),
                    p.seed,
                    num(v)
                ));
            }
        }
    }
    for (k, label) in set.policy_labels.iter().enumerate() {
        let yy = top + 10.0 + k as f64 * 18.0;
        let color = COLORS[k % COLORS.len()];
        s.push_str(&format!(
            "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{color}\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
            w - right + 15.0,
            yy - 10.0,
            w - right + 32.0,
            yy,
            esc(label)
        ));
    }
    s.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" font-size=\"10\">box: quartiles; line: median; dots: one per seed</text>\n",
        left,
        h - 12.0
    ));
    s.push_str("</svg>\n");
    s
}
