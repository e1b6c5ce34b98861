#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use oversub_report::{
    format_bytes, format_seconds, parse_size, percentile, quartiles, text_table, BoxPlot,
    BoxSeries, Summary,
};
use proptest::prelude::*;

/// Deterministic pseudo-random samples (xorshift), roughly log-normal-ish.
fn samples(seed: u64, n: usize, center_s: f64, spread: f64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            let mut u = 0.0;
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                u += (x >> 11) as f64 / (1u64 << 53) as f64;
            }
            // Sum of 4 uniforms ~ bell shape in [0, 4]; occasional slow tail.
            let tail = if x % 37 == 0 { 3.0 } else { 1.0 };
            center_s * (1.0 + spread * (u - 2.0)) * tail
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn summary_is_ordered(v in proptest::collection::vec(-1e12f64..1e12, 1..200)) {
        let s = Summary::from_samples(&v).unwrap();
        prop_assert!(s.min_s <= s.p99_s && s.p99_s <= s.max_s);
        prop_assert!(s.min_s <= s.median_s && s.median_s <= s.max_s);
        prop_assert!(s.min_s <= s.mean_s && s.mean_s <= s.max_s);
        prop_assert!(s.median_s <= s.p99_s);
        prop_assert!(s.std_s >= 0.0 && s.std_s.is_finite());
        prop_assert_eq!(s.count, v.len());
    }

    #[test]
    fn summary_ignores_non_finite(
        v in proptest::collection::vec(
            prop_oneof![
                8 => 0.0f64..10.0,
                1 => Just(f64::NAN),
                1 => Just(f64::INFINITY),
            ],
            0..100,
        )
    ) {
        let finite: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        match Summary::from_samples(&v) {
            None => prop_assert!(finite.is_empty()),
            Some(s) => {
                prop_assert_eq!(s.count, finite.len());
                prop_assert_eq!(Some(s), Summary::from_samples(&finite));
            }
        }
    }

    #[test]
    fn quartiles_ordered(v in proptest::collection::vec(any::<f64>(), 0..100)) {
        if let Some((q1, m, q3)) = quartiles(&v) {
            prop_assert!(q1 <= m && m <= q3);
        }
    }

    #[test]
    fn percentile_monotone(mut v in proptest::collection::vec(-1e6f64..1e6, 1..50),
                           p in 0.0f64..=100.0, q in 0.0f64..=100.0) {
        v.sort_by(f64::total_cmp);
        let (lo, hi) = if p <= q { (p, q) } else { (q, p) };
        prop_assert!(percentile(&v, lo).unwrap() <= percentile(&v, hi).unwrap());
    }

    #[test]
    fn parse_size_never_panics(s in "\\PC{0,24}") {
        let _ = parse_size(&s);
    }

    #[test]
    fn parse_size_round_trips_plain(n in any::<u64>()) {
        prop_assert_eq!(parse_size(&n.to_string()), Ok(n));
        if let Some(k) = n.checked_mul(1024) {
            prop_assert_eq!(parse_size(&format!("{n}KiB")), Ok(k));
        }
    }

    #[test]
    fn formatters_never_panic(x in any::<f64>(), b in any::<u64>()) {
        prop_assert!(!format_seconds(x).is_empty());
        prop_assert!(!format_bytes(b).is_empty());
    }

    #[test]
    fn svg_never_panics(v in proptest::collection::vec(any::<f64>(), 0..30), name in "[0-9a-hj-z<>&\"' ]{0,12}") {
        let plot = BoxPlot {
            title: name.clone(),
            y_label: name.clone(),
            series: vec![BoxSeries::new(name, v)],
        };
        let svg = plot.to_svg();
        prop_assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        prop_assert!(!svg.contains("NaN") && !svg.contains("=\"inf") && !svg.contains(" inf"));
        prop_assert!(svg.len() < 20_000);
    }
}

fn sample_plot() -> BoxPlot {
    BoxPlot {
        title: "Page-in latency by policy <2 GiB working set>".into(),
        y_label: "latency".into(),
        series: vec![
            BoxSeries::new("lru", samples(1, 400, 0.0042, 0.25)),
            BoxSeries::new("clock & pin", samples(2, 400, 0.0031, 0.35)),
            BoxSeries::new("prefetch-\"stride\"", samples(3, 400, 0.0019, 0.4)),
            BoxSeries::new("empty", vec![]),
            BoxSeries::new("nan-only", vec![f64::NAN]),
            BoxSeries::new("single", vec![0.0055]),
        ],
    }
}

#[test]
fn svg_is_well_formed_looking() {
    let plot = sample_plot();
    let svg = plot.to_svg();
    assert!(svg.starts_with("<svg "));
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains(r#"xmlns="http://www.w3.org/2000/svg""#));
    // Escaped title and series names.
    assert!(svg.contains("Page-in latency by policy &lt;2 GiB working set&gt;"));
    assert!(svg.contains(">lru<"));
    assert!(svg.contains("clock &amp; pin"));
    assert!(svg.contains("prefetch-&quot;stride&quot;"));
    assert!(!svg.contains("clock & pin"));
    assert!(!svg.contains("<2 GiB"));
    assert_eq!(svg.matches("(no data)").count(), 2);
    // Unit picked from data (values are milliseconds).
    assert!(svg.contains("latency (ms)"));
    assert!(!svg.contains("NaN"));
    // Rough tag balance.
    assert_eq!(svg.matches("<g").count(), svg.matches("</g>").count());
    assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
}

#[test]
fn svg_units_and_rotation() {
    let us = BoxPlot {
        title: "t".into(),
        y_label: String::new(),
        series: vec![BoxSeries::new("a", vec![2e-6, 3e-6, 5e-6])],
    };
    assert!(us.to_svg().contains(">µs</text>"));
    let s = BoxPlot {
        title: "t".into(),
        y_label: "time".into(),
        series: vec![BoxSeries::new("a", vec![2.0, 3.0, 30.0])],
    };
    assert!(s.to_svg().contains("time (s)"));
    let many = BoxPlot {
        title: "many".into(),
        y_label: "t".into(),
        series: (0..14)
            .map(|i| BoxSeries::new(format!("configuration-{i}"), samples(i, 50, 0.01, 0.3)))
            .collect(),
    };
    assert!(many.to_svg().contains("rotate(-35"));
    let none = BoxPlot {
        title: "none".into(),
        y_label: "t".into(),
        series: vec![],
    };
    assert!(none.to_svg().ends_with("</svg>\n"));
}

#[test]
fn write_sample_svg_and_png() {
    let plot = sample_plot();
    // A folder of this test's own: a fixed name under /tmp belongs to whoever ran the tests there first.
    let dir = tempfile::tempdir().unwrap();
    let path = &dir.path().join("oversub-report-sample.svg");
    plot.write_svg(path).unwrap();
    let back = std::fs::read_to_string(path).unwrap();
    assert_eq!(back, plot.to_svg());

    let many = BoxPlot {
        title: "Migration throughput, 14 configurations".into(),
        y_label: "time per 2 MiB chunk".into(),
        series: (0..14)
            .map(|i| {
                BoxSeries::new(
                    format!("cfg-{i}-{}", format_bytes(1 << (20 + i))),
                    samples(i + 10, 200, 1e-4 * (1.0 + i as f64 * 0.2), 0.3),
                )
            })
            .collect(),
    };
    many.write_svg(&dir.path().join("oversub-report-sample-many.svg"))
        .unwrap();
}

#[test]
fn table_with_summaries() {
    let rows: Vec<Vec<String>> = [("lru", 0.0042), ("clock", 0.0031)]
        .iter()
        .map(|&(name, c)| {
            let s = Summary::from_samples(&samples(7, 100, c, 0.2)).unwrap();
            vec![
                name.to_string(),
                format_seconds(s.median_s),
                format_seconds(s.p99_s),
                s.count.to_string(),
            ]
        })
        .collect();
    let t = text_table(&["policy", "median", "p99", "n"], &rows);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[0].starts_with("policy"));
    assert!(lines[1].chars().all(|c| c == '-'));
    // Right-aligned columns end at the same character position.
    let widths: Vec<usize> = lines.iter().map(|l| l.chars().count()).collect();
    assert!(widths.iter().all(|&w| w == widths[0]), "{t}");
}
