//! The IngressNightmare technique (CVE-2025-1974 and its injections CVE-2025-24514,
//! CVE-2025-1097, CVE-2025-1098), replayed against Ferrule: annotations that try to
//! make NGINX load a shared object of the attacker's, and snippets (allowed here)
//! that try to leave their block or read the controller's files. The webhook
//! refuses every one of them without running NGINX; the same Ingresses written past
//! the webhook are rejected by the model, so neither `nginx -t` nor a reload ever
//! sees them. The shared object proves it: its constructor would leave a file.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

/// A shared object whose constructor writes `marker` when anything loads it.
fn evil_shared_object(dir: &Path, marker: &Path) -> std::path::PathBuf {
    let source = dir.join("evil.c");
    std::fs::write(
        &source,
        format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void ran(void) {{\n  \
             FILE *f = fopen(\"{}\", \"w\"); if (f) {{ fputs(\"ran\", f); fclose(f); }}\n}}\n",
            marker.display()
        ),
    )
    .unwrap();
    let so = dir.join("evil.so");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&source)
        .output()
        .expect("cc");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

/// The webhook's answer to a CREATE of `ingress_yaml`.
async fn review(port: u16, ca_pem: &str, ingress_yaml: &str) -> Value {
    let object: Value = serde_yaml::from_str(ingress_yaml).unwrap();
    let body = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0b1c2d3e-0000-4000-8000-000000001974",
            "kind": { "group": "networking.k8s.io", "version": "v1", "kind": "Ingress" },
            "resource": { "group": "networking.k8s.io", "version": "v1", "resource": "ingresses" },
            "namespace": "demo",
            "name": object["metadata"]["name"],
            "operation": "CREATE",
            "userInfo": { "username": "tenant" },
            "object": object,
            "dryRun": false,
        },
    });
    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    client
        .post(format!("https://127.0.0.1:{port}/networking/v1/ingresses"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// (name, annotations, the annotation the refusal names)
type Payload = (&'static str, Vec<(String, String)>, &'static str);

/// The payloads in a key that restricts nothing: ignored with a Warning and the
/// Ingress served without it (issue 36), where the rest are refused.
fn ignored(name: &str) -> bool {
    matches!(name, "mirror-target" | "mirror-host")
}

#[tokio::test]
async fn ingress_nightmare_payloads_are_refused_and_never_reach_nginx() {
    let work = tempfile::tempdir().unwrap();
    let marker = work.path().join("ran");
    let so = evil_shared_object(work.path(), &marker);
    let so = so.to_str().unwrap();
    // The file a snippet would read: something of the controller's.
    let secret_file = work.path().join("token");
    std::fs::write(&secret_file, "the controller's token").unwrap();
    let secret_file = secret_file.to_str().unwrap();
    // What a Lua block would write, had a snippet smuggled one into NGINX.
    let lua_marker = work.path().join("lua-ran");
    let lua = format!(
        "header_filter_by_lua_block {{ io.open('{}', 'w'):write('ran'); }}",
        lua_marker.display()
    );

    let echo = Echo::start("127.0.0.2").await;
    let m = Manifests::new();
    m.write("svc.yaml", &service("demo", "echo", &[echo.addr]));
    m.write("good.yaml", &demo_ingress("good", "good.test", &[]));
    let ca = webhook_certificate(work.path());
    let port = free_port();
    let (port_s, cert, key) = (
        port.to_string(),
        work.path().join("tls.crt"),
        work.path().join("tls.key"),
    );
    let f = Ferrule::start(
        m.path(),
        &[
            "--allow-snippet-annotations",
            "--admission-port",
            &port_s,
            "--admission-address",
            "127.0.0.1",
            "--admission-cert",
            cert.to_str().unwrap(),
            "--admission-key",
            key.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(f.get("good.test", "/").await.0, 200);

    let payloads: Vec<Payload> = vec![
        (
            "auth-url",
            vec![(
                "auth-url".into(),
                format!("http://auth.example/#;\n}}}}}}\nload_module {so};\n#"),
            )],
            "auth-url",
        ),
        (
            "auth-tls-match-cn",
            vec![
                ("auth-tls-secret".into(), "demo/ca".into()),
                (
                    "auth-tls-match-cn".into(),
                    format!("CN=abc #(\n){{}}\n }}}}}}\nssl_engine {so};\n#"),
                ),
            ],
            "auth-tls-match-cn",
        ),
        (
            "mirror-target",
            vec![(
                "mirror-target".into(),
                format!("http://mirror.example/;\nssl_engine {so};\n#"),
            )],
            "mirror-target",
        ),
        (
            "mirror-host",
            vec![
                ("mirror-target".into(), format!("http://{}/", echo.addr)),
                ("mirror-host".into(), format!("x;\nssl_engine {so};\n#")),
            ],
            "mirror-host",
        ),
        (
            "configuration-snippet",
            vec![(
                "configuration-snippet".into(),
                format!("}}\n}}\nload_module {so};\nhttp {{\nserver {{\nlocation /x {{"),
            )],
            "configuration-snippet",
        ),
        (
            "server-snippet",
            vec![("server-snippet".into(), format!("ssl_engine {so};"))],
            "server-snippet",
        ),
        (
            "snippet-include",
            vec![(
                "configuration-snippet".into(),
                format!("include {secret_file};"),
            )],
            "configuration-snippet",
        ),
        (
            "snippet-alias",
            vec![(
                "server-snippet".into(),
                format!("location /leak {{ alias {secret_file}; }}"),
            )],
            "server-snippet",
        ),
        // Read unlike NGINX before issue 35: `${` swallowed the `;` and the Lua
        // block, a vertical tab made a comment of the next directive.
        (
            "snippet-dollar-brace",
            vec![(
                "configuration-snippet".into(),
                format!("default_type ${{ ;\n{lua}"),
            )],
            "configuration-snippet",
        ),
        (
            "snippet-vertical-tab",
            vec![(
                "server-snippet".into(),
                format!("add_header A b;a\x0b# ;\n{lua}"),
            )],
            "server-snippet",
        ),
        (
            "snippet-status-port",
            vec![(
                "server-snippet".into(),
                "location /s { proxy_set_header X-Forwarded-For \"\"; \
                 proxy_pass http://127.0.0.1:10254/status/resources; }"
                    .into(),
            )],
            "server-snippet",
        ),
        (
            "snippet-conf-command",
            vec![(
                "configuration-snippet".into(),
                "proxy_ssl_conf_command PrivateKey conf/certs/backend-client-0.pem;".into(),
            )],
            "configuration-snippet",
        ),
    ];
    let yaml_of = |name: &str, annotations: &[(String, String)]| {
        let a: Vec<(&str, &str)> = annotations
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        demo_ingress(name, &format!("{name}.test"), &a)
    };

    // The webhook refuses each, naming the annotation, and runs nothing; a value
    // of a key that restricts nothing (the mirror's) is admitted with a warning
    // naming it, as ingress-nginx admits it, and is never rendered (below).
    for (name, annotations, key) in &payloads {
        let answer = review(port, &ca, &yaml_of(name, annotations)).await;
        let response = &answer["response"];
        let message = if ignored(name) {
            assert_eq!(response["allowed"], true, "{name}: {answer}");
            response["warnings"].to_string()
        } else {
            assert_eq!(response["allowed"], false, "{name}: {answer}");
            response["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        assert!(
            message.contains(&format!("nginx.ingress.kubernetes.io/{key}")),
            "{name}: {message}"
        );
    }

    // Past the webhook (failurePolicy Ignore, or no webhook at all): each is
    // rejected on its resource, the good Ingress is served throughout.
    for (name, annotations, _) in &payloads {
        m.write(&format!("{name}.yaml"), &yaml_of(name, annotations));
    }
    let all_rejected = wait_until(Duration::from_secs(20), || async {
        let resources = f.resources().await;
        payloads.iter().all(|(name, _, _)| {
            let want = if ignored(name) { "applied" } else { "rejected" };
            resources
                .iter()
                .any(|r| r["name"] == *name && r["state"] == want)
        })
    })
    .await;
    assert!(
        all_rejected,
        "every payload rejected: {:#?}",
        f.resources().await
    );
    // A change NGINX does take afterwards: the last configuration was tested and
    // loaded with the payloads in the snapshot.
    m.write("later.yaml", &demo_ingress("later", "later.test", &[]));
    let served = wait_until(Duration::from_secs(20), || async {
        f.get("later.test", "/").await.0 == 200
    })
    .await;
    assert!(served, "later.test served; log:\n{}", f.logs());
    assert_eq!(f.get("good.test", "/").await.0, 200);
    for (name, _, _) in &payloads {
        let status = f.get(&format!("{name}.test"), "/").await.0;
        if ignored(name) {
            assert_eq!(status, 200, "{name} served without the mirror");
        } else {
            assert_ne!(status, 200, "{name} served");
        }
    }

    // Nothing ran, and nothing of the payloads is in NGINX's files.
    assert!(!marker.exists(), "the shared object was loaded");
    assert!(!lua_marker.exists(), "a snippet's Lua ran");
    for entry in walkdir::WalkDir::new(f.prefix.path().join("nginx"))
        .into_iter()
        .flatten()
    {
        if !entry.file_type().is_file() {
            continue;
        }
        let text = std::fs::read(entry.path()).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        assert!(
            !text.contains(so)
                && !text.contains(secret_file)
                && !text.contains(lua_marker.to_str().unwrap()),
            "{} names a payload's file",
            entry.path().display()
        );
    }
}
