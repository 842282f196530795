//! Tests of the replay's SVG plots.

use std::collections::BTreeMap;

use super::*;

fn sample(t_s: u64, workers: u32, gpu: u32, pending: u32) -> Sample {
    let mut nodes = BTreeMap::from([("workers".to_string(), workers)]);
    if gpu > 0 {
        nodes.insert("gpu".to_string(), gpu);
    }
    let n = u64::from(workers + gpu);
    Sample {
        t_s,
        nodes,
        pending_pods: pending,
        cpu_requested_m: 1500 * n,
        cpu_allocatable_m: 3900 * n,
        mem_requested_bytes: (5 << 30) * n,
        mem_allocatable_bytes: (7 << 30) * n,
    }
}

fn small_timeline() -> Timeline {
    Timeline {
        samples: vec![
            sample(0, 1, 0, 3),
            sample(30, 1, 0, 3),
            sample(300, 3, 0, 0),
            sample(1800, 3, 1, 1),
            sample(3600, 2, 1, 0),
            sample(7200, 1, 0, 0),
        ],
        marks: vec![
            (
                30,
                Mark::ScaleUp {
                    group: "workers".into(),
                    count: 2,
                },
            ),
            (
                1500,
                Mark::ScaleUp {
                    group: "gpu".into(),
                    count: 1,
                },
            ),
            (3500, Mark::Removal { nodes: 1 }),
            (7000, Mark::Removal { nodes: 2 }),
        ],
    }
}

/// The contents of the `<text>` elements, trimmed.
fn texts(svg: &str) -> Vec<&str> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim())
        })
        .collect()
}

/// Every tag opened is closed, in order: well-formed enough for any SVG viewer.
fn assert_balanced(svg: &str) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(open) = rest.find('<') {
        let Some(close) = rest[open..].find('>') else {
            panic!("unclosed `<` near {:?}", &rest[open..]);
        };
        let tag = &rest[open + 1..open + close];
        rest = &rest[open + close + 1..];
        if tag.starts_with('?') || tag.starts_with('!') || tag.ends_with('/') {
            continue;
        }
        let name = tag
            .trim_start_matches('/')
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string();
        if tag.starts_with('/') {
            assert_eq!(stack.pop().as_deref(), Some(name.as_str()), "at </{name}>");
        } else {
            stack.push(name);
        }
    }
    assert!(stack.is_empty(), "never closed: {stack:?}");
}

#[test]
fn small_timeline_makes_an_svg_with_titles_series_and_axes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.svg");
    plot_svg(&small_timeline(), "what-if: <day> & night", &path).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.trim_start().starts_with("<svg"), "{}", &svg[..80]);
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_balanced(&svg);
    let texts = texts(&svg);
    for want in [
        // The title, escaped.
        "what-if: &lt;day&gt; &amp; night",
        // Panels, axes, series and marks.
        "Nodes per group (stacked)",
        "Pending pods",
        "CPU: requested against allocatable",
        "Memory: requested against allocatable",
        "time since the start of the replay",
        "nodes",
        "pods",
        "cores",
        "GiB",
        "workers",
        "gpu",
        "pending pods",
        "CPU requested",
        "CPU allocatable",
        "memory requested",
        "memory allocatable",
        "scale-up",
        "removal",
        "+2 workers",
        "+1 gpu",
        "-2",
        // Time ticks: two hours in 15-minute steps.
        "0",
        "15m",
        "1h30",
        "2h",
    ] {
        assert!(
            texts.contains(&want),
            "the SVG lacks the text {want:?}: {texts:?}"
        );
    }
    assert!(svg.matches("<text").count() > 40);
}

#[test]
fn empty_timeline_still_draws() {
    let svg = render_svg(&Timeline::default(), "empty").unwrap();
    assert_balanced(&svg);
    assert!(texts(&svg).contains(&"empty"));
}

#[test]
fn unwritable_path_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing-dir").join("out.svg");
    let err = plot_svg(&small_timeline(), "t", &path).unwrap_err();
    assert!(err.to_string().contains("cannot write the file"), "{err}");
    assert!(err.to_string().contains("missing-dir"), "{err}");
}

#[test]
fn a_week_of_samples_stays_small() {
    let samples: Vec<Sample> = (0..20_160u64)
        .map(|i| sample(i * 30, 1 + (i % 7) as u32, 0, (i % 5) as u32))
        .collect();
    let timeline = Timeline {
        samples,
        marks: (0..300u64)
            .map(|i| (i * 2000, Mark::Removal { nodes: 1 }))
            .collect(),
    };
    let svg = render_svg(&timeline, "week").unwrap();
    assert!(svg.len() < 3_000_000, "{} bytes", svg.len());
    let texts = texts(&svg);
    assert!(
        texts.contains(&"1d") && texts.contains(&"6d"),
        "day ticks: {texts:?}"
    );
    // 300 marks: lines but no labels.
    assert!(!texts.contains(&"-1"));
}

#[test]
fn close_marks_share_a_label() {
    let up = |g: &str, count| Mark::ScaleUp {
        group: g.into(),
        count,
    };
    let marks = vec![
        (0, up("w", 1)),
        (30, up("w", 1)),
        (60, up("gpu", 1)),
        (90, up("w", 1)),
        (100, Mark::Removal { nodes: 1 }),
        (130, Mark::Removal { nodes: 2 }),
        (5000, up("w", 2)),
    ];
    // A 24-hour axis: marks within 432 s of each other merge.
    assert_eq!(
        merged_marks(&marks, 24.0),
        vec![
            (0, up("w", 3)),
            (60, up("gpu", 1)),
            (100, Mark::Removal { nodes: 3 }),
            (5000, up("w", 2)),
        ]
    );
}

#[test]
fn hours_format() {
    for (h, want) in [
        (0.0, "0"),
        (0.25, "15m"),
        (6.0, "6h"),
        (6.5, "6h30"),
        (24.0, "1d"),
        (30.0, "1d 6h"),
        (48.75, "2d 0h45"),
    ] {
        assert_eq!(format_hours(h), want);
    }
}

#[test]
fn steps_hold_values_and_drop_repeats() {
    let samples = vec![
        sample(0, 1, 0, 0),
        sample(3600, 1, 0, 0),
        sample(7200, 2, 0, 0),
    ];
    let pts = steps(&samples, |s| f64::from(s.nodes["workers"]));
    assert_eq!(pts, vec![(0.0, 1.0), (2.0, 1.0), (2.0, 2.0)]);
}
