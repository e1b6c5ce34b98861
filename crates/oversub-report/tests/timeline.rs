#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use oversub_report::{
    format_seconds, text_table, HtmlBlock, HtmlReport, MarkerKind, SpanKind, Timeline,
};
use proptest::prelude::*;
use serde_json::Value;

const CPU0: usize = 0;
const CPU1: usize = 1;
const GPU0: usize = 2;
const STORE: usize = 3;
const HOLDS: usize = 4;

/// The paper's Fig. 8 schedule: components A, B, C take 500 ms slots on
/// CPU 0 and drive GPU 0; D and E take 750 ms slots on CPU 1. While one of
/// A/B/C runs, the storage controller pages out the previous component's
/// buffers and pages in the next one's; the store holds what is paged out.
/// Two hyperperiods of 1.5 s; in the second, D overruns and E misses its
/// deadline, and B stalls on a demand fault.
fn fig8() -> Timeline {
    let mut t = Timeline::new(
        "Fig. 8: time-sliced schedule with paging (2 hyperperiods)",
        vec![
            "CPU 0".into(),
            "CPU 1".into(),
            "GPU 0".into(),
            "store".into(),
            "store holds".into(),
        ],
    );
    let abc = ["A", "B", "C"];
    for k in 0..6usize {
        let s = 0.5 * k as f64;
        let comp = abc[k % 3];
        t.add_span(
            CPU0,
            s,
            s + 0.5,
            comp,
            SpanKind::Work,
            format!("{comp} slot {k}"),
        );
        t.add_span(
            GPU0,
            s + 0.01,
            s + 0.47,
            comp,
            SpanKind::Work,
            format!("{comp} kernels"),
        );
        t.add_marker(CPU0, s, MarkerKind::Release, format!("{comp} release"));
        let prev = abc[(k + 2) % 3];
        let next = abc[(k + 1) % 3];
        if k > 0 {
            t.add_span(
                STORE,
                s + 0.02,
                s + 0.17,
                prev,
                SpanKind::PageOut,
                format!("page out {prev}: 3 buffers, 96 MiB"),
            );
            // The store holds `prev` until it is paged in again, one slot
            // before it runs (k + 2).
            t.add_span(
                HOLDS,
                s + 0.17,
                (s + 0.75).min(3.0),
                prev,
                SpanKind::Holds,
                format!("{prev}: 96 MiB"),
            );
        }
        t.add_span(
            STORE,
            s + 0.25,
            s + 0.42,
            next,
            SpanKind::PageIn,
            format!("page in {next}: 3 buffers, 96 MiB"),
        );
    }
    // Initially the store holds B (paged in during slot 0) and C (slot 1).
    t.add_span(HOLDS, 0.0, 0.25, "B", SpanKind::Holds, "B: 96 MiB");
    t.add_span(HOLDS, 0.0, 0.75, "C", SpanKind::Holds, "C: 96 MiB");
    // A demand-paging stall of B in the second hyperperiod.
    t.add_span(
        GPU0,
        2.05,
        2.12,
        "B",
        SpanKind::Fault,
        "demand fault: B.weights page 17",
    );
    // CPU 1: D and E, 750 ms each; D overruns in the second hyperperiod.
    t.add_span(CPU1, 0.0, 0.75, "D", SpanKind::Work, "D slot 0");
    t.add_span(CPU1, 0.75, 1.5, "E", SpanKind::Work, "E slot 0");
    t.add_span(
        CPU1,
        1.5,
        2.32,
        "D",
        SpanKind::Work,
        "D slot 1 (overran 70 ms)",
    );
    t.add_span(
        CPU1,
        2.32,
        3.07,
        "E",
        SpanKind::Work,
        "E slot 1 (started late)",
    );
    for (at, c) in [(0.0, "D"), (0.75, "E"), (1.5, "D"), (2.25, "E")] {
        t.add_marker(CPU1, at, MarkerKind::Release, format!("{c} release"));
    }
    t.add_marker(CPU1, 3.0, MarkerKind::Deadline, "E deadline");
    t.add_marker(CPU1, 3.0, MarkerKind::Miss, "E missed deadline (+70 ms)");
    t.end_s = 3.1;
    t
}

fn assert_well_formed(svg: &str) {
    assert!(svg.starts_with("<svg "), "{}", &svg[..svg.len().min(80)]);
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains(r#"xmlns="http://www.w3.org/2000/svg""#));
    assert_eq!(svg.matches("<g").count(), svg.matches("</g>").count());
    assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
    assert_eq!(
        svg.matches("<title").count(),
        svg.matches("</title>").count()
    );
    assert_eq!(
        svg.matches("<pattern").count(),
        svg.matches("</pattern>").count()
    );
    assert_eq!(svg.matches("<defs").count(), svg.matches("</defs>").count());
    assert!(
        !svg.contains("NaN") && !svg.contains("inf\""),
        "non-finite number in SVG"
    );
}

/// Fill colour of the first Work box whose text is exactly `label`.
fn work_fill(svg: &str, label: &str) -> String {
    let needle = format!(">{label}</text>");
    let group = svg
        .split(r#"<g class="work">"#)
        .skip(1)
        .map(|g| g.split("</g>").next().unwrap())
        .find(|g| g.contains(&needle))
        .unwrap_or_else(|| panic!("no work box labelled {label}"));
    let rect = &group[group.find("<rect").unwrap()..];
    let start = rect.find("fill=\"").unwrap() + 6;
    rect[start..start + 7].to_string()
}

#[test]
fn fig8_svg() {
    let t = fig8();
    let svg = t.to_svg();
    assert_well_formed(&svg);
    for row in ["CPU 0", "CPU 1", "GPU 0", "store", "store holds"] {
        assert!(svg.contains(&format!(">{row}</text>")), "{row}");
    }
    // Spans: 6 + 4 work on CPUs, 6 on GPU.
    assert_eq!(svg.matches(r#"<g class="work">"#).count(), 16);
    assert_eq!(svg.matches(r#"<g class="page_in">"#).count(), 6);
    assert_eq!(svg.matches(r#"<g class="page_out">"#).count(), 5);
    assert_eq!(svg.matches(r#"<g class="holds">"#).count(), 7);
    assert_eq!(svg.matches(r#"<g class="fault">"#).count(), 1);
    assert_eq!(svg.matches(r#"<g class="miss">"#).count(), 1);
    assert!(svg.contains("E missed deadline (+70 ms)"));
    assert!(svg.contains("<pattern id=\"pin"));
    assert!(svg.contains("\u{2191} A") && svg.contains("\u{2193} C"));
    // Axis in ms with 500 ms ticks up to the explicit end.
    assert!(svg.contains("time (ms)"));
    assert!(svg.contains(">2500</text>"));
    assert!(svg.contains(">3000</text>"));
    // Tooltips carry the detail.
    assert!(svg.contains("page in B: 3 buffers, 96 MiB"));
    // Legend lists the components and kinds present, not absent ones.
    assert!(svg.contains(">page-in \u{2191}</text>"));
    assert!(svg.contains(">deadline miss</text>"));
    assert!(!svg.contains(">idle</text>"));
    // Same component, same colour, on every row.
    let a = work_fill(&svg, "A");
    let colours: Vec<String> = ["A", "B", "C", "D", "E"]
        .iter()
        .map(|l| work_fill(&svg, l))
        .collect();
    assert_eq!(colours[0], a);
    for i in 0..colours.len() {
        for j in i + 1..colours.len() {
            assert_ne!(
                colours[i], colours[j],
                "components {i} and {j} share a colour"
            );
        }
    }
}

#[test]
fn same_label_same_colour_across_timelines() {
    let mut t1 = Timeline::new("one", vec!["cpu".into()]);
    t1.add_span(0, 0.0, 1.0, "X", SpanKind::Work, "");
    t1.add_span(0, 1.0, 2.0, "encoder", SpanKind::Work, "");
    let mut t2 = Timeline::new("two", vec!["a".into(), "b".into(), "c".into()]);
    t2.add_span(0, 0.0, 0.001, "decoder", SpanKind::Work, "");
    t2.add_span(2, 0.0, 0.004, "encoder", SpanKind::Work, "");
    t2.add_span(1, 0.0, 0.002, "X", SpanKind::Work, "");
    let (s1, s2) = (t1.to_svg(), t2.to_svg());
    assert_eq!(work_fill(&s1, "X"), work_fill(&s2, "X"));
    assert_eq!(work_fill(&s1, "encoder"), work_fill(&s2, "encoder"));
    assert_eq!(work_fill(&fig8().to_svg(), "A"), {
        let mut t = Timeline::new("", vec!["r".into()]);
        t.add_span(0, 5.0, 6.0, "A", SpanKind::Work, "");
        work_fill(&t.to_svg(), "A")
    });
}

#[test]
fn labels_are_escaped() {
    let mut t = Timeline::new("a <b> & \"c\"", vec!["<cpu & 0>".into()]);
    t.add_span(0, 0.0, 1.0, "x<y", SpanKind::Work, "d & <e>");
    t.add_marker(0, 0.5, MarkerKind::Miss, "m<1>");
    let svg = t.to_svg();
    assert_well_formed(&svg);
    assert!(svg.contains("a &lt;b&gt; &amp; &quot;c&quot;"));
    assert!(svg.contains("&lt;cpu &amp; 0&gt;"));
    assert!(svg.contains(">x&lt;y</text>"));
    assert!(svg.contains("d &amp; &lt;e&gt;"));
    assert!(svg.contains("m&lt;1&gt;"));
    assert!(!svg.contains("<b>") && !svg.contains("x<y") && !svg.contains("<e>"));
}

#[test]
fn empty_and_degenerate_timelines_render() {
    let empty = Timeline::default();
    let svg = empty.to_svg();
    assert_well_formed(&svg);
    assert!(svg.contains("(empty timeline)"));
    assert!(!svg.contains("class=\"legend\""));

    let rows_only = Timeline::new("rows", vec!["CPU 0".into(), "GPU 0".into()]);
    assert_well_formed(&rows_only.to_svg());

    let mut weird = Timeline::new("weird", vec!["r".into()]);
    weird.add_span(0, f64::NAN, 1.0, "nan", SpanKind::Work, "");
    weird.add_span(0, 0.0, f64::INFINITY, "inf", SpanKind::Work, "");
    weird.add_span(0, 0.3, 0.3, "zero", SpanKind::PageIn, "");
    weird.add_span(0, 0.9, 0.2, "backwards", SpanKind::Paging, "");
    weird.add_span(7, 0.1, 0.2, "implicit row", SpanKind::Idle, "");
    weird.add_span(usize::MAX, 0.1, 0.2, "far row", SpanKind::Work, "");
    weird.add_span(0, -1e308, 1e308, "huge", SpanKind::Holds, "");
    weird.add_marker(0, f64::NAN, MarkerKind::Miss, "nan");
    weird.add_marker(3, 0.5, MarkerKind::Deadline, "d");
    weird.end_s = f64::NAN;
    let svg = weird.to_svg();
    assert_well_formed(&svg);
    assert!(svg.contains(">row 7</text>"));
    assert!(!svg.contains(">nan</text>"));
    assert!(svg.len() < 200_000, "{}", svg.len());

    // Many overlapping spans in one row are capped in height.
    let mut many = Timeline::new("many", vec!["holds".into()]);
    for i in 0..5000 {
        many.add_span(
            0,
            i as f64 * 1e-4,
            10.0,
            format!("b{i}"),
            SpanKind::Holds,
            "",
        );
    }
    let svg = many.to_svg();
    assert_well_formed(&svg);
    let height: f64 = svg
        .split("height=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(height < 600.0, "{height}");
}

#[test]
fn axis_units() {
    let mut us = Timeline::new("µs", vec!["r".into()]);
    us.add_span(0, 0.0, 40e-6, "k", SpanKind::Work, "");
    assert!(us.to_svg().contains("time (µs)"));
    let mut s = Timeline::new("s", vec!["r".into()]);
    s.add_span(0, 0.0, 42.0, "k", SpanKind::Work, "");
    assert!(s.to_svg().contains("time (s)"));
}

#[test]
fn chrome_trace() {
    let t = fig8();
    let v = t.to_chrome_trace();
    let text = serde_json::to_string(&v).unwrap();
    let back: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(back["displayTimeUnit"], "ms");
    let events = back["traceEvents"].as_array().unwrap();
    let count = |ph: &str| events.iter().filter(|e| e["ph"] == ph).count();
    // Holds overlap, so the store-holds row gets one extra thread; B's
    // fault nests inside its GPU work.
    assert_eq!(count("M"), 1 + 2 * (t.rows.len() + 1));
    assert_eq!(count("X"), t.spans.len());
    assert_eq!(count("i"), t.markers.len());
    assert_eq!(events.len(), count("M") + count("X") + count("i"));

    let process = events.iter().find(|e| e["name"] == "process_name").unwrap();
    assert_eq!(process["args"]["name"], "oversub");
    assert_eq!(process["pid"], 1);
    for (i, row) in t.rows.iter().enumerate() {
        assert!(
            events.iter().any(|e| e["name"] == "thread_name"
                && e["tid"] == i
                && e["args"]["name"] == row.as_str()),
            "{row}"
        );
        assert!(events.iter().any(|e| e["name"] == "thread_sort_index"
            && e["tid"] == i
            && e["args"]["sort_index"] == i));
    }
    assert!(events
        .iter()
        .any(|e| e["name"] == "thread_name" && e["args"]["name"] == "store holds (2)"));

    // Spans: µs, names, categories, details.
    let d1 = events
        .iter()
        .find(|e| e["ph"] == "X" && e["args"]["detail"] == "D slot 1 (overran 70 ms)")
        .unwrap();
    assert_eq!(d1["name"], "D");
    assert_eq!(d1["cat"], "work");
    assert_eq!(d1["tid"], CPU1);
    assert_eq!(d1["pid"], 1);
    assert!((d1["ts"].as_f64().unwrap() - 1_500_000.0).abs() < 1e-6);
    // Rounded to whole nanoseconds.
    assert_eq!(d1["dur"].as_f64(), Some(820_000.0));
    let page_in = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "page_in")
        .count();
    assert_eq!(page_in, 6);
    assert!(events
        .iter()
        .any(|e| e["cat"] == "page_out" && e["tid"] == STORE));
    assert!(events
        .iter()
        .any(|e| e["cat"] == "fault" && e["tid"] == GPU0));
    let miss = events.iter().find(|e| e["cat"] == "miss").unwrap();
    assert_eq!(miss["ph"], "i");
    assert_eq!(miss["s"], "t");
    assert_eq!(miss["tid"], CPU1);
    assert!((miss["ts"].as_f64().unwrap() - 3_000_000.0).abs() < 1e-6);

    // No two spans on one thread overlap without nesting.
    let nested = |a: (f64, f64), b: (f64, f64)| b.0 >= a.1 - 1e-6 || b.1 <= a.1 + 1e-6;
    let mut by_tid: std::collections::BTreeMap<u64, Vec<(f64, f64)>> = Default::default();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let ts = e["ts"].as_f64().unwrap();
        let dur = e["dur"].as_f64().unwrap();
        by_tid
            .entry(e["tid"].as_u64().unwrap())
            .or_default()
            .push((ts, ts + dur));
    }
    for (tid, mut v) in by_tid {
        v.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        for (i, &b) in v.iter().enumerate() {
            for &a in &v[..i] {
                assert!(nested(a, b), "overlap on tid {tid}: {a:?} {b:?}");
            }
        }
    }
    let _ = HOLDS;
    let _ = CPU0;

    // A folder of this test's own: a fixed name under /tmp belongs to whoever ran the tests there first.
    let dir = tempfile::tempdir().unwrap();
    let path = &dir.path().join("oversub-timeline-sample.trace.json");
    t.write_chrome_trace(path).unwrap();
    let back: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let (a, b) = (
        back["traceEvents"].as_array().unwrap(),
        v["traceEvents"].as_array().unwrap(),
    );
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x["name"], y["name"]);
        assert_eq!(x["tid"], y["tid"]);
        let (tx, ty) = (x["ts"].as_f64(), y["ts"].as_f64());
        assert_eq!(tx.is_some(), ty.is_some());
        assert!((tx.unwrap_or(0.0) - ty.unwrap_or(0.0)).abs() < 1e-6);
    }
}

#[test]
fn chrome_trace_edge_cases() {
    let empty = Timeline::default().to_chrome_trace();
    assert_eq!(empty["traceEvents"].as_array().unwrap().len(), 1);

    let mut t = Timeline::new("t", vec!["r0".into()]);
    t.add_span(0, f64::NAN, 1.0, "nan", SpanKind::Work, "");
    t.add_span(5, 0.0, 0.0, "zero", SpanKind::Paging, "");
    t.add_marker(0, f64::INFINITY, MarkerKind::Release, "inf");
    t.add_marker(2, 0.5, MarkerKind::Deadline, "dl");
    let v = t.to_chrome_trace();
    let text = serde_json::to_string(&v).unwrap();
    assert!(!text.contains("null"), "{text}");
    let events = v["traceEvents"].as_array().unwrap();
    // process + 3 threads (r0, row 2, row 5) x 2 + 1 span + 1 marker.
    assert_eq!(events.len(), 1 + 6 + 2);
    assert!(events
        .iter()
        .any(|e| e["name"] == "thread_name" && e["tid"] == 5 && e["args"]["name"] == "row 5"));
    let zero = events.iter().find(|e| e["ph"] == "X").unwrap();
    assert_eq!(zero["dur"].as_f64(), Some(0.0));
}

#[test]
fn serde_names_are_snake_case() {
    let mut t = Timeline::new("s", vec!["r".into()]);
    t.add_span(0, 0.0, 1.0, "a", SpanKind::PageIn, "");
    t.add_marker(0, 0.5, MarkerKind::Miss, "m");
    let v = serde_json::to_value(&t).unwrap();
    assert_eq!(v["spans"][0]["kind"], "page_in");
    assert_eq!(v["markers"][0]["kind"], "miss");
    let back: Timeline = serde_json::from_value(v).unwrap();
    assert_eq!(back.spans[0].kind, SpanKind::PageIn);
}

fn sample_report(t: &Timeline) -> HtmlReport {
    let mut r = HtmlReport::new("oversub <schedule> report & summary");
    r.push(HtmlBlock::Paragraph(
        "Components A\u{2013}E on two CPUs and one GPU; buffers of A, B and C are paged \
         between GPU memory and the store while the others run. <not a tag>"
            .into(),
    ))
    .push(HtmlBlock::Heading("Schedule".into()))
    .push(HtmlBlock::Svg(t.to_svg()));
    let rows: Vec<Vec<String>> = [
        ("A", 0.5, 3, 0),
        ("B", 0.5, 3, 0),
        ("C", 0.5, 3, 0),
        ("D", 0.82, 2, 0),
        ("E & co", 0.75, 2, 1),
    ]
    .iter()
    .map(|&(c, slot, paged, miss)| {
        vec![
            c.to_string(),
            format_seconds(slot),
            format!("{} MiB", paged * 32),
            miss.to_string(),
        ]
    })
    .collect();
    r.push(HtmlBlock::Heading("Per component".into()))
        .push(HtmlBlock::Table {
            header: vec![
                "component".into(),
                "max slot".into(),
                "paged".into(),
                "misses".into(),
            ],
            rows: rows.clone(),
        })
        .push(HtmlBlock::Pre(text_table(
            &["component", "max slot", "paged", "misses"],
            &rows,
        )))
        .push(HtmlBlock::Link {
            text: "Chrome trace (open in ui.perfetto.dev)".into(),
            href: "oversub-timeline-sample.trace.json".into(),
        })
        .push(HtmlBlock::Link {
            text: "bad".into(),
            href: "javascript:alert(1)".into(),
        });
    r
}

#[test]
fn html_report() {
    let t = fig8();
    let r = sample_report(&t);
    let html = r.to_html();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    assert!(html.contains("<title>oversub &lt;schedule&gt; report &amp; summary</title>"));
    assert!(html.contains("<h1>oversub &lt;schedule&gt; report &amp; summary</h1>"));
    assert!(html.contains("&lt;not a tag&gt;") && !html.contains("<not a tag>"));
    assert!(html.contains(&t.to_svg().trim_end().to_string()));
    assert!(html.contains("<th>component</th><th class=\"num\">max slot</th>"));
    assert!(html.contains("<td>E &amp; co</td><td class=\"num\">750.00 ms</td>"));
    assert!(html.contains("<td class=\"num\">96 MiB</td>"));
    assert!(html.contains("<pre>component"));
    assert!(html.contains("href=\"oversub-timeline-sample.trace.json\""));
    assert!(!html.contains("javascript:"));
    // Self-contained: no scripts, no external resources.
    assert!(!html.contains("<script"));
    assert!(!html.contains("<link"));
    assert!(!html.contains("src="));
    assert_eq!(
        html.matches("<table").count(),
        html.matches("</table>").count()
    );
    assert_eq!(html.matches("<tr>").count(), 6);

    // Empty report and ragged table.
    let mut e = HtmlReport::default();
    e.push(HtmlBlock::Table {
        header: vec![],
        rows: vec![vec!["a".into(), "1".into()], vec![]],
    })
    .push(HtmlBlock::Table {
        header: vec![],
        rows: vec![],
    });
    let html = e.to_html();
    assert!(html.contains("<title>oversub report</title>"));
    assert!(!html.contains("<h1>"));
    assert!(html.contains("<tr><td></td><td></td></tr>"));
    assert!(!html.contains("<thead>"));
}

#[test]
fn write_samples() {
    let t = fig8();
    let dir = tempfile::tempdir().unwrap();
    let svg_path = &dir.path().join("oversub-timeline-sample.svg");
    t.write_svg(svg_path).unwrap();
    assert_eq!(std::fs::read_to_string(svg_path).unwrap(), t.to_svg());
    let html_path = &dir.path().join("oversub-report-sample.html");
    let r = sample_report(&t);
    r.write(html_path).unwrap();
    assert_eq!(std::fs::read_to_string(html_path).unwrap(), r.to_html());
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn never_panics(
        spans in proptest::collection::vec(
            (0usize..6, any::<f64>(), any::<f64>(), "[a-c<&\"' ]{0,6}", 0usize..7),
            0..40,
        ),
        markers in proptest::collection::vec((0usize..6, any::<f64>(), 0usize..3), 0..10),
        nrows in 0usize..4,
        end in any::<f64>(),
    ) {
        let kinds = [
            SpanKind::Work, SpanKind::PageIn, SpanKind::PageOut, SpanKind::Paging,
            SpanKind::Fault, SpanKind::Holds, SpanKind::Idle,
        ];
        let mk = [MarkerKind::Release, MarkerKind::Deadline, MarkerKind::Miss];
        let mut t = Timeline::new("p", (0..nrows).map(|i| format!("r{i}")).collect());
        for (row, a, b, label, k) in spans {
            t.add_span(row, a, b, label.clone(), kinds[k], label);
        }
        for (row, at, k) in markers {
            t.add_marker(row, at, mk[k], "m");
        }
        t.end_s = end;
        let svg = t.to_svg();
        prop_assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        prop_assert!(!svg.contains("NaN") && !svg.contains("inf\""));
        prop_assert_eq!(svg.matches("<g").count(), svg.matches("</g>").count());
        let trace = serde_json::to_string(&t.to_chrome_trace()).unwrap();
        prop_assert!(!trace.contains("null"));
        let _: Value = serde_json::from_str(&trace).unwrap();
    }
}

/// Every span and marker kind, long labels, an unnamed row and an empty
/// one, in microseconds.
#[test]
fn write_all_kinds_sample() {
    let mut t = Timeline::new(
        "All kinds <µs scale>",
        vec![
            "CPU 0 (a rather long row name that gets cut)".into(),
            "GPU".into(),
            "empty row".into(),
        ],
    );
    t.add_span(
        0,
        0.0,
        40e-6,
        "component-with-long-name",
        SpanKind::Work,
        "w",
    );
    t.add_span(0, 40e-6, 44e-6, "tiny", SpanKind::Work, "narrow box");
    t.add_span(
        0,
        44e-6,
        60e-6,
        "paging",
        SpanKind::Paging,
        "sync paging slot",
    );
    t.add_span(0, 60e-6, 80e-6, "idle", SpanKind::Idle, "nothing to do");
    t.add_span(1, 5e-6, 30e-6, "k1", SpanKind::Work, "");
    t.add_span(
        1,
        10e-6,
        18e-6,
        "fault",
        SpanKind::Fault,
        "demand paging stall",
    );
    t.add_span(1, 12e-6, 16e-6, "k1", SpanKind::PageIn, "");
    t.add_span(1, 30e-6, 30e-6, "zero", SpanKind::PageOut, "zero length");
    t.add_span(5, 0.0, 75e-6, "B", SpanKind::Holds, "");
    t.add_span(5, 10e-6, 20e-6, "C", SpanKind::Holds, "");
    t.add_marker(1, 25e-6, MarkerKind::Release, "r");
    t.add_marker(1, 29e-6, MarkerKind::Deadline, "d");
    t.add_marker(1, 79e-6, MarkerKind::Miss, "late start of k1 by 3 µs");
    let svg = t.to_svg();
    assert_well_formed(&svg);
    assert!(svg.contains(">row 5</text>"));
    assert!(svg.contains("time (µs)"));
    assert!(svg.contains("\u{2026}"));
    let dir = tempfile::tempdir().unwrap();
    t.write_svg(&dir.path().join("oversub-timeline-kinds.svg"))
        .unwrap();
    Timeline::default()
        .write_svg(&dir.path().join("oversub-timeline-empty.svg"))
        .unwrap();
}
