use super::*;

/// Two buckets of each kind: 4 * 4 + 2 * 4 + 3 = 27 counters per entry.
fn dump_text(lines: &[&str]) -> String {
    let mut s =
        String::from("ferrule-metrics 1\ntime 0.01,0.1\nlength 10,100\nsize 100,1000\ndropped 3\n");
    for l in lines {
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// An entry: `n` requests of 5 ms with an upstream (2 ms connect), 50 bytes in,
/// 500 bytes out.
fn entry(labels: &str, n: u64) -> String {
    let t = |ms: u64| format!("{} {n} 0 0", ms * n);
    let counters = [
        t(5),
        t(4),
        t(2),
        t(3),
        format!("{} 0 {n} 0", 50 * n),
        format!("{} 0 0 {n}", 500 * n),
        format!("0 {n} 0"),
    ]
    .join(" ");
    format!("{labels}\t{counters}")
}

fn opts() -> ExportOptions {
    ExportOptions {
        per_host: true,
        controller_class: "ferrule.dev/ingress-controller".into(),
        ..Default::default()
    }
}

#[test]
fn parses_and_exports_ingress_nginx_series() {
    let text = dump_text(&[
        &entry("default\ta\tsvc-a\t/\ta.example.com\t\tGET\t200", 7),
        &entry("default\tb\tsvc-b\t/b\tb.example.com\t\tPOST\t404", 2),
    ]);
    let d = Dump::parse(&text).unwrap();
    assert_eq!(d.dropped, 3);
    assert_eq!(d.entries.len(), 2);
    let mut out = String::new();
    export(&d, &opts(), &mut out);
    let want = [
        r#"nginx_ingress_controller_requests{canary="",controller_class="ferrule.dev/ingress-controller",controller_namespace="",controller_pod="",host="a.example.com",ingress="a",method="GET",namespace="default",path="/",service="svc-a",status="200"} 7"#,
        r#"nginx_ingress_controller_request_duration_seconds_bucket{canary="",controller_class="ferrule.dev/ingress-controller",controller_namespace="",controller_pod="",host="a.example.com",ingress="a",method="GET",namespace="default",path="/",service="svc-a",status="200",le="0.01"} 7"#,
        r#"nginx_ingress_controller_request_duration_seconds_sum{canary="",controller_class="ferrule.dev/ingress-controller",controller_namespace="",controller_pod="",host="a.example.com",ingress="a",method="GET",namespace="default",path="/",service="svc-a",status="200"} 0.035"#,
        r#"nginx_ingress_controller_connect_duration_seconds_sum{canary="",controller_class="ferrule.dev/ingress-controller",controller_namespace="",controller_pod="",host="b.example.com",ingress="b",method="POST",namespace="default",path="/b",service="svc-b",status="404"} 0.004"#,
        r#"nginx_ingress_controller_request_size_bucket{canary="",controller_class="ferrule.dev/ingress-controller",controller_namespace="",controller_pod="",host="a.example.com",ingress="a",method="GET",namespace="default",path="/",service="svc-a",status="200",le="10"} 0"#,
        r#"nginx_ingress_controller_request_size_bucket{canary="",controller_class="ferrule.dev/ingress-controller",controller_namespace="",controller_pod="",host="a.example.com",ingress="a",method="GET",namespace="default",path="/",service="svc-a",status="200",le="100"} 7"#,
        r#"nginx_ingress_controller_response_size_sum{canary="",controller_class="ferrule.dev/ingress-controller",controller_namespace="",controller_pod="",host="a.example.com",ingress="a",method="GET",namespace="default",path="/",service="svc-a",status="200"} 3500"#,
        r#"nginx_ingress_controller_bytes_sent_bucket{canary="",controller_class="ferrule.dev/ingress-controller",controller_namespace="",controller_pod="",host="a.example.com",ingress="a",method="GET",namespace="default",path="/",service="svc-a",status="200",le="100"} 0"#,
        r#"nginx_ingress_controller_bytes_sent_bucket{canary="",controller_class="ferrule.dev/ingress-controller",controller_namespace="",controller_pod="",host="a.example.com",ingress="a",method="GET",namespace="default",path="/",service="svc-a",status="200",le="1000"} 7"#,
        r#"nginx_ingress_controller_bytes_sent_sum{canary="",controller_class="ferrule.dev/ingress-controller",controller_namespace="",controller_pod="",host="a.example.com",ingress="a",method="GET",namespace="default",path="/",service="svc-a",status="200"} 3500"#,
        r#"nginx_ingress_controller_bytes_sent_count{canary="",controller_class="ferrule.dev/ingress-controller",controller_namespace="",controller_pod="",host="a.example.com",ingress="a",method="GET",namespace="default",path="/",service="svc-a",status="200"} 7"#,
        "# TYPE nginx_ingress_controller_requests untyped",
        "# TYPE nginx_ingress_controller_header_duration_seconds histogram",
    ];
    for w in want {
        assert!(out.lines().any(|l| l == w), "missing {w}\nin\n{out}");
    }
}

#[test]
fn excluded_labels_add_up_and_classes_replace_codes() {
    let text = dump_text(&[
        &entry("default\ta\tsvc-a\t/\ta.example.com\t\tGET\t200", 7),
        &entry("default\ta\tsvc-a\t/x\ta.example.com\t\tPOST\t201", 2),
        &entry("default\ta\tsvc-a\t/\ta.example.com\t\tGET\t503", 1),
    ]);
    let d = Dump::parse(&text).unwrap();
    let mut o = opts();
    o.per_host = false;
    o.status_classes = true;
    o.exclude_labels = ["path".to_owned(), "method".to_owned()].into();
    o.exclude_metrics = ["bytes_sent".to_owned()].into();
    let mut out = String::new();
    export(&d, &o, &mut out);
    let requests: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("nginx_ingress_controller_requests{"))
        .collect();
    assert_eq!(
        requests,
        [
            r#"nginx_ingress_controller_requests{canary="",controller_class="ferrule.dev/ingress-controller",controller_namespace="",controller_pod="",ingress="a",namespace="default",service="svc-a",status="2xx"} 9"#,
            r#"nginx_ingress_controller_requests{canary="",controller_class="ferrule.dev/ingress-controller",controller_namespace="",controller_pod="",ingress="a",namespace="default",service="svc-a",status="5xx"} 1"#,
        ]
    );
    assert!(!out.contains("bytes_sent"));
    assert!(!out.contains("host="));
}

#[test]
fn label_values_are_escaped_and_bad_dumps_refused() {
    let text = dump_text(&[&entry("ns\ti\ts\t/a\"b\\c\th\tns_canary_80\tGET\t200", 1)]);
    let d = Dump::parse(&text).unwrap();
    let mut out = String::new();
    export(&d, &opts(), &mut out);
    assert!(out.contains(r#"path="/a\"b\\c""#), "{out}");
    assert!(out.contains(r#"canary="ns_canary_80""#), "{out}");
    // too few counters, a field missing, another version
    assert!(Dump::parse(&dump_text(&["a\tb\tc\td\te\tf\tGET\t200\t1 2 3"])).is_err());
    assert!(Dump::parse(&dump_text(&["a\tb\tc\td\te\tGET\t200\t1"])).is_err());
    assert!(Dump::parse("ferrule-metrics 2\n").is_err());
    // no upstream: no upstream series
    let no_upstream = dump_text(&[
        "ns\ti\ts\t/\th\t\tGET\t404\t0 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0 0 0 1 0 0 1 0 0",
    ]);
    let d = Dump::parse(&no_upstream).unwrap();
    let mut out = String::new();
    export(&d, &opts(), &mut out);
    assert!(
        !out.contains("nginx_ingress_controller_connect_duration_seconds_count"),
        "{out}"
    );
    assert!(
        out.contains("nginx_ingress_controller_request_duration_seconds_count{"),
        "{out}"
    );
}
