//! The chart's RBAC against the harness API server: the rights its ServiceAccount
//! has are exactly a checked-in list (`kubectl auth can-i --list`), and Ferrule run
//! with the chart's flags and nothing but that ServiceAccount's token does all it
//! does in a cluster: it serves, publishes the chart Service's address, writes
//! events and holds its Lease. FERRULE_BLESS=1 rewrites the lists after a reviewed
//! change of the chart's rules.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::e2e::{Cluster, SERIAL, cluster, k8s_ingress, k8s_service, netns_echo};
use crate::support::*;

const NS: &str = "e2e-chart";
const RELEASE: &str = "rbac";
const SERVICE_ACCOUNT: &str = "rbac-ferrule";

fn helm(root: &Path) -> PathBuf {
    std::env::var_os("HELM").map_or_else(|| root.join("target/e2e/bin/helm"), PathBuf::from)
}

/// The documents of `helm template` for this test's release.
fn render(c: &Cluster, set: &[&str]) -> Vec<serde_yaml::Value> {
    let mut cmd = Command::new(helm(&c.root));
    cmd.args(["template", RELEASE])
        .arg(c.root.join("charts/ferrule"))
        .args(["--namespace", NS]);
    for s in set {
        cmd.args(["--set", s]);
    }
    let out = cmd
        .output()
        .expect("running helm (test/e2e/cluster.sh build makes it)");
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .split("\n---")
        .filter_map(|doc| serde_yaml::from_str::<serde_yaml::Value>(doc).ok())
        .filter(|doc| !doc.is_null())
        .collect()
}

fn kind(doc: &serde_yaml::Value) -> &str {
    doc["kind"].as_str().unwrap_or_default()
}

/// The pod of every value set in `charts/ferrule/tests/values/` keeps the cluster's
/// credentials out of NGINX's container: the token is not automounted, the
/// projected one is mounted into the controller's container alone, no container
/// but the controller's reads a Secret, the PID namespace is not shared, and NGINX's
/// container (its name holds `nginx`) runs as non-root with a read-only root file
/// system and no capability. No cluster: `helm template` only.
#[test]
fn no_value_set_puts_the_token_into_nginx_s_container() {
    // The harness builds helm (test/e2e/cluster.sh): on a bare machine it is not
    // there until a test has brought the cluster up.
    let root = cluster().root.as_path();
    let values = root.join("charts/ferrule/tests/values");
    let mut checked = 0;
    for file in std::fs::read_dir(&values).unwrap() {
        let file = file.unwrap().path();
        let out = Command::new(helm(root))
            .args(["template", "t"])
            .arg(root.join("charts/ferrule"))
            .arg("-f")
            .arg(&file)
            .output()
            .expect("running helm (test/e2e/cluster.sh build makes it)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        for doc in text.split("\n---") {
            let Ok(doc) = serde_yaml::from_str::<serde_yaml::Value>(doc) else {
                continue;
            };
            if !matches!(kind(&doc), "Deployment" | "DaemonSet") {
                continue;
            }
            let name = file.file_name().unwrap().to_string_lossy();
            pod_keeps_the_token_from_nginx(&name, &doc["spec"]["template"]["spec"]);
            checked += 1;
        }
    }
    assert!(checked >= 7, "{checked} pods checked");
}

fn pod_keeps_the_token_from_nginx(values: &str, spec: &serde_yaml::Value) {
    use serde_yaml::Value;
    let seq = |v: &Value| v.as_sequence().cloned().unwrap_or_default();
    assert_eq!(
        spec["automountServiceAccountToken"],
        Value::Bool(false),
        "{values}: the token is automounted"
    );
    assert_ne!(
        spec["shareProcessNamespace"],
        Value::Bool(true),
        "{values}: one PID namespace"
    );
    let token_volumes: Vec<String> = seq(&spec["volumes"])
        .iter()
        .filter(|v| {
            seq(&v["projected"]["sources"])
                .iter()
                .any(|s| !s["serviceAccountToken"].is_null())
        })
        .map(|v| v["name"].as_str().unwrap().to_owned())
        .collect();
    let mut containers = seq(&spec["containers"]);
    containers.extend(seq(&spec["initContainers"]));
    let names: Vec<&str> = containers
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names.iter().filter(|n| n.contains("nginx")).count(),
        1,
        "{values}: one nginx container in {names:?}"
    );
    for c in &containers {
        let name = c["name"].as_str().unwrap();
        let mounts = seq(&c["volumeMounts"]);
        let token = mounts.iter().any(|m| {
            token_volumes.iter().any(|t| m["name"].as_str() == Some(t))
                || m["mountPath"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("/var/run/secrets"))
        });
        if name == "controller" {
            let at = mounts
                .iter()
                .find(|m| token_volumes.iter().any(|t| m["name"].as_str() == Some(t)));
            assert_eq!(
                at.map(|m| &m["mountPath"]),
                Some(&Value::from(
                    "/var/run/secrets/kubernetes.io/serviceaccount"
                )),
                "{values}: the controller's token is where the in-cluster configuration reads it"
            );
            continue;
        }
        assert!(!token, "{values}: container {name} mounts the token");
        let env = serde_yaml::to_string(&c["env"]).unwrap()
            + &serde_yaml::to_string(&c["envFrom"]).unwrap();
        assert!(
            !env.contains("secret"),
            "{values}: container {name} reads a Secret: {env}"
        );
        let ctx = &c["securityContext"];
        let pod = &spec["securityContext"];
        assert_eq!(
            ctx["readOnlyRootFilesystem"],
            Value::Bool(true),
            "{values}: {name}"
        );
        assert_eq!(
            ctx["allowPrivilegeEscalation"],
            Value::Bool(false),
            "{values}: {name}"
        );
        assert_eq!(
            ctx["capabilities"]["drop"],
            serde_yaml::from_str::<Value>("[ALL]").unwrap(),
            "{values}: {name}"
        );
        assert!(ctx["capabilities"]["add"].is_null(), "{values}: {name}");
        let non_root = ctx["runAsNonRoot"]
            .as_bool()
            .or(pod["runAsNonRoot"].as_bool());
        let uid = ctx["runAsUser"].as_u64().or(pod["runAsUser"].as_u64());
        assert!(
            non_root == Some(true) && uid.is_some_and(|u| u > 0),
            "{values}: {name} may run as root"
        );
    }
}

/// `kubectl auth can-i --list` of the chart's ServiceAccount in `namespace`, one rule
/// per line with single spaces, compared with (or, blessing, written to) `file`.
fn check_rights(c: &Cluster, namespace: &str, file: &str) {
    let who = format!("--as=system:serviceaccount:{NS}:{SERVICE_ACCOUNT}");
    let (ok, text) = c.kubectl(&["auth", "can-i", "--list", &who, "-n", namespace], None);
    assert!(ok, "kubectl auth can-i --list: {text}");
    let got: String = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") + "\n")
        .collect();
    let path = c.root.join("charts/ferrule/tests/rbac").join(file);
    if std::env::var("FERRULE_BLESS").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        got,
        want,
        "the chart's rights in {namespace} differ from {} (review, then FERRULE_BLESS=1)",
        path.display()
    );
}

/// A kubeconfig that authenticates with `token` only.
fn token_kubeconfig(c: &Cluster, token: &str, dir: &Path) -> PathBuf {
    let admin = std::fs::read_to_string(&c.kubeconfig).unwrap();
    let server = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .expect("server in the harness kubeconfig");
    let ca = c.root.join("target/e2e/pki/ca.crt");
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {server}\n    \
             certificate-authority: {}\nusers:\n- name: sa\n  user:\n    token: {token}\n\
             contexts:\n- name: sa\n  context: {{cluster: e2e, user: sa}}\ncurrent-context: sa\n",
            ca.display()
        ),
    )
    .unwrap();
    path
}

#[tokio::test]
async fn the_chart_grants_exactly_what_ferrule_uses() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    c.namespace(NS);
    let docs = render(
        c,
        &[
            "controller.admissionWebhooks.enabled=false",
            "controller.config.proxy-body-size=2m",
            // A class of its own: Ferrule watches every namespace here and must
            // leave the other tests' Ingresses alone.
            "controller.ingressClassResource.name=chart-e2e",
            "controller.ingressClassResource.controllerValue=ferrule.dev/chart-e2e",
            "controller.ingressClass=chart-e2e",
        ],
    );
    // The rights and the objects they name, not the workload (no kubelet here).
    let objects: Vec<String> = docs
        .iter()
        .filter(|d| {
            matches!(
                kind(d),
                "ServiceAccount"
                    | "ClusterRole"
                    | "ClusterRoleBinding"
                    | "Role"
                    | "RoleBinding"
                    | "ConfigMap"
                    | "Service"
                    | "IngressClass"
                    | "Lease"
            )
        })
        .map(|d| serde_yaml::to_string(d).unwrap())
        .collect();
    c.apply(&objects.join("---\n"));
    check_rights(c, NS, "can-i-release-namespace.txt");
    check_rights(c, "default", "can-i-other-namespace.txt");

    // Ferrule with the chart's own flags (the ports and prefix are the harness's, and
    // NGINX is its child rather than the nginx container's: `supervisor::` and
    // `install::` test that split), authenticated as the chart's ServiceAccount and
    // nothing else.
    let deployment = docs.iter().find(|d| kind(d) == "Deployment").unwrap();
    let chart_args: Vec<String> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .filter(|a| {
            a != "run"
                && ![
                    "--http-port",
                    "--https-port",
                    "--status-port",
                    "--nginx-prefix",
                    "--nginx-supervisor",
                ]
                .iter()
                .any(|f| a.starts_with(&format!("{f}=")))
        })
        .collect();
    let (ok, token) = c.kubectl(
        &[
            "create",
            "token",
            SERVICE_ACCOUNT,
            "-n",
            NS,
            "--duration=3600s",
        ],
        None,
    );
    assert!(ok, "kubectl create token: {token}");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = token_kubeconfig(c, token.trim(), dir.path());
    let (ok, text) = c.kubectl(
        &[
            "patch",
            "service",
            "rbac-ferrule-controller",
            "-n",
            NS,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.50"}]}}}"#,
        ],
        None,
    );
    assert!(ok, "setting the Service's load balancer address: {text}");

    let _echo = netns_echo("10.213.0.8").await;
    c.apply(&k8s_service(NS, "echo", &["10.213.0.8"]));
    let ingress = |name: &str, host: &str, annotations: &[(&str, &str)]| {
        k8s_ingress(NS, name, host, &[("/", "Prefix", "echo")], annotations)
            .replace("ingressClassName: ferrule", "ingressClassName: chart-e2e")
    };
    c.apply(&ingress("web", "chart.e2e", &[]));
    c.apply(&ingress(
        "odd",
        "odd.e2e",
        &[("enable-opentelemetry", "true")],
    ));
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    // In a pod, POD_NAMESPACE names the Lease's namespace.
    let mut args = vec!["--kubeconfig", kubeconfig.as_str(), "--lease-namespace", NS];
    args.extend(chart_args.iter().map(String::as_str));
    let f = Ferrule::spawn_kube(&args);
    f.wait_ready(Duration::from_secs(30)).await;

    assert_eq!(f.get("chart.e2e", "/").await.0, 200, "log:\n{}", f.logs());
    let published = wait_until(Duration::from_secs(15), || async {
        let ing = c.json(&["get", "ingress", "-n", NS, "web"]);
        ing["status"]["loadBalancer"]["ingress"] == serde_json::json!([{"ip": "192.0.2.50"}])
    })
    .await;
    assert!(
        published,
        "the chart Service's address is published; log:\n{}",
        f.logs()
    );
    let warned = wait_until(Duration::from_secs(15), || async {
        let events = c.json(&["get", "events.events.k8s.io", "-n", NS]);
        events["items"].as_array().into_iter().flatten().any(|e| {
            e["type"] == "Warning"
                && e["regarding"]["name"] == "odd"
                && e["note"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("enable-opentelemetry")
        })
    })
    .await;
    assert!(warned, "a Warning event is written; log:\n{}", f.logs());
    // Held (a renewal that came late under load may leave it free for a moment).
    let held = wait_until(Duration::from_secs(15), || async {
        let lease = c.json(&["get", "lease", "-n", NS, "rbac-ferrule-leader"]);
        lease["spec"]["holderIdentity"]
            .as_str()
            .is_some_and(|h| !h.is_empty())
    })
    .await;
    let lease = c.json(&["get", "lease", "-n", NS, "rbac-ferrule-leader"]);
    assert!(held, "the Lease is held: {lease}; log:\n{}", f.logs());
    let log = f.logs();
    assert!(
        !log.to_ascii_lowercase().contains("forbidden"),
        "nothing was refused for lack of a right:\n{log}"
    );
    drop(f);
    c.delete(&[
        "clusterrole,clusterrolebinding",
        "rbac-ferrule-watch",
        "rbac-ferrule-ingressclasses",
    ]);
    c.delete(&["ingressclass", "chart-e2e"]);
}
