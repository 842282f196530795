//! Tests of the workload CSV: parsing, its errors, and writing it back.

use super::*;

const HEADER: &str = "arrival_s,name,cpu_m,mem_mib,duration_s";

fn header_err(text: &str) -> String {
    match parse_workload(text) {
        Err(WorkloadError::Header(m)) => m,
        other => panic!("expected a header error for {text:?}, got {other:?}"),
    }
}

fn row_err(text: &str) -> (usize, String) {
    match parse_workload(text) {
        Err(WorkloadError::Row { line, message }) => (line, message),
        other => panic!("expected a row error for {text:?}, got {other:?}"),
    }
}

#[test]
fn minimal_file_with_defaults() {
    let rows = parse_workload(&format!("{HEADER}\n0,web-1,250,512,3600\n")).unwrap();
    assert_eq!(
        rows,
        vec![WorkloadRow {
            line: 2,
            arrival_ms: 0,
            name: "web-1".into(),
            cpu_m: 250,
            mem_mib: 512,
            duration_s: 3600,
            kind: PodKind::Deployment,
            node_selector: BTreeMap::new(),
            gpu: 0,
            priority: 0,
            image: None,
            local_volume: false,
        }]
    );
}

#[test]
fn every_column_any_order_quotes_comments_blanks() {
    let text = "\u{feff}# a comment before the header\n\
                    \n\
                    priority, name ,kind,arrival_s,node_selector,gpu,cpu_m,mem_mib,duration_s\r\n\
                    # comment\r\n\
                    \x20 # indented comment, with, commas\n\
                    \x20 , , \n\
                    -5,train-1,job,120,\"pool=gpu;kubernetes.io/arch=amd64;\",2,4000,16384,7200\n\
                    \n\
                    \"100\",\"web-a\",Deployment,60,,,500,1024,86400\n\
                    0,solo,POD,60, , ,1,1,1\n";
    let rows = parse_workload(text).unwrap();
    let got: Vec<(&str, usize, u64)> = rows
        .iter()
        .map(|r| (r.name.as_str(), r.line, r.arrival_ms))
        .collect();
    // Sorted by arrival, ties keep file order.
    assert_eq!(
        got,
        vec![
            ("web-a", 9, 60_000),
            ("solo", 10, 60_000),
            ("train-1", 7, 120_000)
        ]
    );
    let train = &rows[2];
    assert_eq!(train.kind, PodKind::Job);
    assert_eq!(train.gpu, 2);
    assert_eq!(train.priority, -5);
    assert_eq!(
        train.node_selector,
        BTreeMap::from([
            ("kubernetes.io/arch".to_string(), "amd64".to_string()),
            ("pool".to_string(), "gpu".to_string()),
        ])
    );
    assert_eq!(rows[0].priority, 100);
    assert_eq!(rows[1].kind, PodKind::Pod);
    assert!(rows[1].node_selector.is_empty());
}

#[test]
fn header_only_is_an_empty_workload() {
    assert_eq!(parse_workload(&format!("{HEADER}\n")).unwrap(), vec![]);
}

#[test]
fn header_errors() {
    // (file, fragments the message must contain)
    let cases: &[(&str, &[&str])] = &[
        ("", &["empty", "arrival_s,name,cpu_m,mem_mib,duration_s"]),
        ("# only a comment\n\n", &["empty"]),
        (
            "arrival_s,name,cpu_m,mem_mb,duration_s\n",
            &["unknown column `mem_mb`", "did you mean `mem_mib`?"],
        ),
        (
            "arrival,name,cpu_m,mem_mib,duration_s,nodeSelector,zone\n",
            &[
                "unknown columns",
                "`arrival` (did you mean `arrival_s`?)",
                "`nodeSelector` (did you mean `node_selector`?)",
                "`zone`",
                "(optional)",
            ],
        ),
        (
            "name,cpu_m,duration_s\n",
            &["missing required columns `arrival_s`, `mem_mib`"],
        ),
        (
            "arrival_s,name,cpu_m,mem_mib\n",
            &["missing required column `duration_s`"],
        ),
        (
            "arrival_s,name,cpu_m,mem_mib,duration_s,name\n",
            &["column `name` appears twice"],
        ),
        (
            "Arrival_S,name,cpu_m,mem_mib,duration_s\n",
            &["did you mean `arrival_s`?"],
        ),
    ];
    for (text, fragments) in cases {
        let m = header_err(text);
        for f in *fragments {
            assert!(m.contains(f), "{text:?}: {m:?} lacks {f:?}");
        }
    }
    assert!(parse_workload("nope\n")
        .unwrap_err()
        .to_string()
        .starts_with("workload header: unknown column `nope`"));
}

#[test]
fn row_errors() {
    let full = "arrival_s,name,cpu_m,mem_mib,duration_s,kind,node_selector,gpu,priority";
    // (row after the full header on line 2, fragments of the message)
    let cases: &[(&str, &[&str])] = &[
        (
            "x,a,1,1,1,,,,",
            &["column arrival_s", "seconds since the start", "got `x`"],
        ),
        ("-1,a,1,1,1,,,,", &["column arrival_s", "got `-1`"]),
        // Fractions to the millisecond, no further; digits on both sides of the point.
        (
            "1.2345,a,1,1,1,,,,",
            &["column arrival_s", "to the millisecond", "got `1.2345`"],
        ),
        ("1.,a,1,1,1,,,,", &["column arrival_s", "got `1.`"]),
        (".5,a,1,1,1,,,,", &["column arrival_s", "got `.5`"]),
        ("1.5e3,a,1,1,1,,,,", &["column arrival_s", "got `1.5e3`"]),
        ("1.-5,a,1,1,1,,,,", &["column arrival_s", "got `1.-5`"]),
        (
            "315360000.001,a,1,1,1,,,,",
            &["column arrival_s", "ten years"],
        ),
        ("315360001,a,1,1,1,,,,", &["column arrival_s", "ten years"]),
        (",a,1,1,1,,,,", &["column arrival_s", "got ``"]),
        ("0,,1,1,1,,,,", &["column name", "a pod name"]),
        (
            "0,Web_1,1,1,1,,,,",
            &["column name", "lower-case", "got `Web_1`"],
        ),
        ("0,-a,1,1,1,,,,", &["column name"]),
        (
            "0,a,2 cores,1,1,,,,",
            &["column cpu_m", "millicores", "got `2 cores`"],
        ),
        ("0,a,1000000001,1,1,,,,", &["column cpu_m"]),
        ("0,a,1,1Gi,1,,,,", &["column mem_mib", "MiB", "got `1Gi`"]),
        ("0,a,1,1073741825,1,,,,", &["column mem_mib"]),
        ("0,a,1,1,0,,,,", &["column duration_s", "1 to"]),
        ("0,a,1,1,1h,,,,", &["column duration_s", "got `1h`"]),
        (
            "0,a,1,1,1,CronJob,,,",
            &["column kind", "`Job`", "got `CronJob`"],
        ),
        (
            "0,a,1,1,1,,pool,,",
            &["column node_selector", "`pool` has no `=`"],
        ),
        (
            "0,a,1,1,1,,=web,,",
            &["column node_selector", "not a label key"],
        ),
        (
            "0,a,1,1,1,,pool=we b,,",
            &["column node_selector", "not a label value"],
        ),
        (
            "0,a,1,1,1,,a=1;a=2,,",
            &["column node_selector", "key `a` appears twice"],
        ),
        ("0,a,1,1,1,,,one,", &["column gpu", "got `one`"]),
        ("0,a,1,1,1,,,-1,", &["column gpu"]),
        ("0,a,1,1,1,,,,high", &["column priority", "got `high`"]),
        ("0,a,1,1,1,,,,99999999999", &["column priority"]),
        ("0,a,1,1,1", &["has 5 fields, the header has 9 columns"]),
        ("0,a,1,1,1,,,,,", &["has 10 fields"]),
    ];
    for (row, fragments) in cases {
        let text = format!("{full}\n{row}\n");
        let (line, m) = row_err(&text);
        assert_eq!(line, 2, "{row:?}: {m}");
        for f in *fragments {
            assert!(m.contains(f), "{row:?}: {m:?} lacks {f:?}");
        }
    }
}

#[test]
fn row_error_names_the_real_line() {
    let text = format!("# c\n{HEADER}\n\n# c\n0,a,1,1,1\n0,b,1,x,1\n");
    let err = parse_workload(&text).unwrap_err();
    assert_eq!(
        err.to_string(),
        "workload line 6: column mem_mib: expected whole MiB of memory requested, \
             e.g. 512, at most 1073741824, got `x`"
    );
    // A quoted field over two lines: the next record's line is still right.
    let text = format!("{HEADER}\n0,\"a\n\",1,1,1\n\n0,b,1,x,1\n");
    assert!(matches!(
        parse_workload(&text),
        Err(WorkloadError::Row { line: 5, .. })
    ));
    // A bad record is named by the line it starts on.
    let text = format!("{HEADER}\n0,a,1,1,1\n\n0,\"b\",1,\"x\ny\",1\n");
    assert!(matches!(
        parse_workload(&text),
        Err(WorkloadError::Row { line: 4, .. })
    ));
}

#[test]
fn quoting_errors() {
    let cases: &[(&str, usize, &str)] = &[
        ("0,\"a,1,1,1\n\n", 2, "never closed"),
        ("0,a,1,1,1\n0,b,1,1,\"1\n", 3, "never closed"),
        ("0,\"a\"b,1,1,1\n", 2, "field 2: text after the closing"),
        ("0,a\"b,1,1,1\n", 2, "field 2: a `\"` inside a field"),
    ];
    for (rows, line, fragment) in cases {
        let text = format!("{HEADER}\n{rows}");
        let (got, m) = row_err(&text);
        assert_eq!(got, *line, "{rows:?}: {m}");
        assert!(m.contains(fragment), "{rows:?}: {m:?} lacks {fragment:?}");
    }
    // Quotes done right: doubled quotes inside, blanks around.
    let text = "name,arrival_s,cpu_m,mem_mib,duration_s,node_selector\n \"a\" ,0,1,1,1,\"k=v\"\r\n";
    let rows = parse_workload(text).unwrap();
    assert_eq!(rows[0].name, "a");
    let text = format!("{HEADER}\n0,\"a\"\"b\",1,1,1\n");
    let (_, m) = row_err(&text);
    assert!(m.contains("got `a\"b`"), "{m}");
}

#[test]
fn duplicate_names() {
    let text = format!("{HEADER}\n0,a,1,1,1\n5,b,1,1,1\n9,a,1,1,1\n");
    let (line, m) = row_err(&text);
    assert_eq!(line, 4);
    assert!(
        m.contains("`a` is already the name of the pod on line 2"),
        "{m}"
    );
}

#[test]
fn long_bad_values_are_shortened() {
    let long = "x".repeat(500);
    let (_, m) = row_err(&format!("{HEADER}\n{long},a,1,1,1\n"));
    assert!(m.len() < 200, "{m}");
    assert!(m.contains("..."), "{m}");
}

#[test]
fn round_trip_of_a_good_file() {
    let rows = parse_workload(include_str!("../../../../../examples/workload.csv")).unwrap();
    assert!(rows.len() > 50, "{}", rows.len());
    assert!(rows.iter().any(|r| r.kind == PodKind::Job));
    assert!(rows.iter().any(|r| !r.node_selector.is_empty()));
    assert!(rows.windows(2).all(|w| w[0].arrival_ms <= w[1].arrival_ms));
    let again = parse_workload(&to_csv(&rows)).unwrap();
    let strip = |rs: &[WorkloadRow]| -> Vec<WorkloadRow> {
        rs.iter()
            .map(|r| WorkloadRow {
                line: 0,
                ..r.clone()
            })
            .collect()
    };
    assert_eq!(strip(&again), strip(&rows));
}

/// A small xorshift generator: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn no_panic_on_random_input() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let good = format!("{HEADER},kind,node_selector,gpu,priority\n0,a,1,1,1,Job,k=v,1,2\n");
    let alphabet: &[u8] = b"0123456789,;=\"#\n\r -abkxJ\xc3\xa9";
    for i in 0..3000 {
        let len = (rng.next() % 120) as usize;
        let text: String = if i % 2 == 0 {
            // Random bytes from an alphabet that hits the parser's edges, read lossily.
            let bytes: Vec<u8> = (0..len)
                .map(|_| alphabet[(rng.next() % alphabet.len() as u64) as usize])
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            // A good file with random bytes changed.
            let mut bytes = good.clone().into_bytes();
            for _ in 0..1 + rng.next() % 4 {
                let at = (rng.next() % bytes.len() as u64) as usize;
                bytes[at] = (rng.next() % 256) as u8;
            }
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let _ = parse_workload(&text);
    }
}

/// The optional `image` column: what image cache warming pulls onto new nodes.
#[test]
fn image_column_is_read_and_checked() {
    let rows = parse_workload(&format!(
        "{HEADER},image\n0,web,1,1,1,nginx:1.25\n0,plain,1,1,1,\n"
    ))
    .unwrap();
    assert_eq!(rows[0].image.as_deref(), Some("nginx:1.25"));
    assert_eq!(rows[1].image, None);
    let again = parse_workload(&to_csv(&rows)).unwrap();
    assert_eq!(again[0].image.as_deref(), Some("nginx:1.25"));
    let e = parse_workload(&format!("{HEADER},image\n0,web,1,1,1,\"nginx 1.25\"\n"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("column image") && e.contains("image reference"),
        "{e}"
    );
}

/// The optional `local_volume` column (issue 19): a pod whose data is on its node.
#[test]
fn local_volume_column_is_read_and_checked() {
    let rows = parse_workload(&format!(
        "{HEADER},local_volume\n0,db,1,1,1,true\n0,web,1,1,1,\n0,api,1,1,1,no\n"
    ))
    .unwrap();
    let by_name = |n: &str| rows.iter().find(|r| r.name == n).map(|r| r.local_volume);
    assert_eq!(by_name("db"), Some(true));
    assert_eq!(by_name("web"), Some(false));
    assert_eq!(by_name("api"), Some(false));
    let again = parse_workload(&to_csv(&rows)).unwrap();
    assert_eq!(
        again.iter().filter(|r| r.local_volume).count(),
        1,
        "{again:?}"
    );
    let e = parse_workload(&format!("{HEADER},local_volume\n0,db,1,1,1,maybe\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2") && e.contains("local_volume"), "{e}");
}

#[test]
fn fractional_arrival_seconds_are_milliseconds() {
    let text = format!(
        "{HEADER}\n12.5,a,1,1,1\n0.125,b,1,1,1\n3,c,1,1,1\n315360000.000,d,1,1,1\n7.05,e,1,1,1\n"
    );
    let rows = parse_workload(&text).unwrap();
    let got: Vec<(&str, u64)> = rows
        .iter()
        .map(|r| (r.name.as_str(), r.arrival_ms))
        .collect();
    // 0.125 s = 125 ms; 3 s = 3000 ms; 7.05 s = 7050 ms (not 7005); 12.5 s = 12500 ms;
    // ten years exactly = 315360000000 ms. Sorted by arrival.
    assert_eq!(
        got,
        vec![
            ("b", 125),
            ("c", 3_000),
            ("e", 7_050),
            ("a", 12_500),
            ("d", 315_360_000_000)
        ]
    );
    // Written back: whole seconds stay whole, fractions keep their milliseconds.
    let csv = to_csv(&rows);
    assert!(csv.contains("\n0.125,b,"), "{csv}");
    assert!(csv.contains("\n3,c,"), "{csv}");
    assert!(csv.contains("\n7.050,e,"), "{csv}");
    assert_eq!(
        parse_workload(&csv)
            .unwrap()
            .iter()
            .map(|r| r.arrival_ms)
            .collect::<Vec<_>>(),
        vec![125, 3_000, 7_050, 12_500, 315_360_000_000]
    );
}
