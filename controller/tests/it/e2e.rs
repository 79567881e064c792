//! End to end against a real kube-apiserver + etcd (test/e2e/cluster.sh) and real
//! NGINX. Backends live in a network namespace of our own, because the API server
//! refuses loopback addresses in EndpointSlices.
//!
//! The tests share one cluster and one of them restarts the API server, so they run
//! one at a time (`SERIAL`); each uses its own namespace, Lease and ports.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

pub(crate) static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
static CLUSTER: OnceLock<Cluster> = OnceLock::new();

pub(crate) const NETNS: &str = "ferrule-e2e";

pub(crate) struct Cluster {
    pub(crate) root: PathBuf,
    pub(crate) kubeconfig: PathBuf,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// Starts (or reuses) the harness cluster and the backend network namespace.
pub(crate) fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(|| {
        let root = repo_root();
        let out = Command::new(root.join("test/e2e/cluster.sh"))
            .arg("up")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "test/e2e/cluster.sh up failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        netns_up();
        let c = Cluster {
            kubeconfig: root.join("target/e2e/kubeconfig"),
            root,
        };
        c.apply(&ingress_class("ferrule", false));
        c
    })
}

impl Cluster {
    pub(crate) fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String) {
        let mut cmd = Command::new(self.root.join("target/e2e/bin/kubectl"));
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        let out = match stdin {
            None => cmd.output().unwrap(),
            Some(input) => {
                use std::io::Write;
                let mut child = cmd
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(input.as_bytes())
                    .unwrap();
                child.wait_with_output().unwrap()
            }
        };
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// `kubectl apply -f -`, retried while the API server is unavailable.
    pub(crate) fn apply(&self, yaml: &str) {
        for _ in 0..60 {
            let (ok, text) = self.kubectl(&["apply", "-f", "-"], Some(yaml));
            if ok {
                return;
            }
            eprintln!("kubectl apply failed (retrying): {text}");
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!("kubectl apply kept failing");
    }

    pub(crate) fn delete(&self, args: &[&str]) {
        let mut all = vec!["delete", "--ignore-not-found", "--wait=false"];
        all.extend_from_slice(args);
        let (ok, text) = self.kubectl(&all, None);
        assert!(ok, "kubectl delete failed: {text}");
    }

    pub(crate) fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend_from_slice(&["-o", "json"]);
        let (ok, text) = self.kubectl(&all, None);
        assert!(ok, "kubectl get failed: {text}");
        serde_json::from_str(&text).unwrap()
    }

    pub(crate) fn namespace(&self, ns: &str) {
        self.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{ name: {ns} }}\n"
        ));
    }

    fn script(&self, cmd: &str) {
        let out = Command::new(self.root.join("test/e2e/cluster.sh"))
            .arg(cmd)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cluster.sh {cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A network namespace with addresses 10.213.0.2–9 reachable from the host through
/// a veth pair (host side 10.213.0.1). Idempotent, and once per process (the
/// cluster's tests and the OCSP tests share it).
pub(crate) fn netns_up() {
    static UP: std::sync::Once = std::sync::Once::new();
    UP.call_once(netns_create);
}

fn netns_create() {
    let sh = |c: &str| {
        let out = Command::new("sh").arg("-c").arg(c).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    if sh(&format!(
        "ip netns exec {NETNS} ip -4 addr show dev fe2e-n | grep -q 10.213.0.9"
    ))
    .0
    {
        return;
    }
    let _ = sh(&format!("ip netns del {NETNS}; ip link del fe2e-h"));
    let mut script = format!(
        "set -e; ip netns add {NETNS}; ip link add fe2e-h type veth peer name fe2e-n; \
         ip link set fe2e-n netns {NETNS}; ip addr add 10.213.0.1/24 dev fe2e-h; ip link set fe2e-h up; \
         ip netns exec {NETNS} ip link set lo up; ip netns exec {NETNS} ip link set fe2e-n up; "
    );
    for i in 2..=9 {
        script.push_str(&format!(
            "ip netns exec {NETNS} ip addr add 10.213.0.{i}/24 dev fe2e-n; "
        ));
    }
    let (ok, err) = sh(&script);
    assert!(ok, "creating the backend network namespace failed: {err}");
}

/// An echo backend listening inside the network namespace on `ip:8080`.
pub(crate) async fn netns_echo(ip: &str) -> Echo {
    let ip = ip.to_owned();
    let std_listener = std::thread::spawn(move || {
        let ns = std::fs::File::open(format!("/var/run/netns/{NETNS}")).unwrap();
        nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        // The socket keeps the namespace it was created in; the thread then ends.
        let l = std::net::TcpListener::bind((ip.as_str(), 8080)).unwrap();
        l.set_nonblocking(true).unwrap();
        l
    })
    .join()
    .unwrap();
    Echo::serve(tokio::net::TcpListener::from_std(std_listener).unwrap())
}

/// Service + EndpointSlice YAML for ready backends at `ips` (port 8080).
pub(crate) fn k8s_service(ns: &str, name: &str, ips: &[&str]) -> String {
    let ready: Vec<(&str, bool)> = ips.iter().map(|ip| (*ip, true)).collect();
    service_endpoints(ns, name, 8080, &ready)
}

/// Ingress YAML (no creationTimestamp: the API server sets it).
pub(crate) fn k8s_ingress(
    ns: &str,
    name: &str,
    host: &str,
    paths: &[PathRule],
    annotations: &[(&str, &str)],
) -> String {
    let yaml = ingress(ns, name, "2026-01-01T00:00:00Z", host, paths, annotations);
    let yaml = yaml.replace("\nspec:\n", "\nspec:\n  ingressClassName: ferrule\n");
    yaml.lines()
        .filter(|l| !l.contains("creationTimestamp"))
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

fn start_ferrule(c: &Cluster, ns: &str, extra: &[&str]) -> Ferrule {
    let kubeconfig = c.kubeconfig.to_string_lossy().into_owned();
    let mut args = vec![
        "--kubeconfig",
        kubeconfig.as_str(),
        "--watch-namespace",
        ns,
        "--lease-namespace",
        ns,
    ];
    args.extend_from_slice(extra);
    Ferrule::spawn_kube(&args)
}

#[tokio::test]
async fn routing_follows_ingress_and_endpointslice_changes() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let ns = "e2e-routing";
    c.namespace(ns);
    let a = netns_echo("10.213.0.2").await;
    let b = netns_echo("10.213.0.3").await;
    c.apply(&k8s_service(ns, "echo", &["10.213.0.2"]));
    c.apply(&k8s_ingress(
        ns,
        "web",
        "web.e2e",
        &[("/", "Prefix", "echo")],
        &[],
    ));
    let f = start_ferrule(c, ns, &["--publish-status-address", "10.9.9.9"]);
    f.wait_ready(Duration::from_secs(30)).await;
    assert_eq!(f.backend("web.e2e", "/").await, (200, a.addr.to_string()));

    // Update: a new path on a new Service.
    c.apply(&k8s_service(ns, "other", &["10.213.0.3"]));
    c.apply(&k8s_ingress(
        ns,
        "web",
        "web.e2e",
        &[("/", "Prefix", "echo"), ("/other", "Prefix", "other")],
        &[],
    ));
    let routed = wait_until(Duration::from_secs(10), || async {
        f.backend("web.e2e", "/other/x").await.1 == b.addr.to_string()
    })
    .await;
    assert!(routed, "new path routed; log:\n{}", f.logs());

    // The new path took a reload; traffic may reach the new workers before the
    // controller has counted it (it counts once it verified them).
    let counted = wait_until(Duration::from_secs(5), || async {
        f.reloads().await >= 1.0
    })
    .await;
    assert!(
        counted,
        "the reload for the new path counted; log:\n{}",
        f.logs()
    );

    f.old_workers_gone().await;
    // EndpointSlice update: traffic follows without a reload.
    let pids = f.worker_pids();
    let reloads = f.reloads().await;
    let patched = r#"kind="endpoints""#;
    let patches = f.metric("ferrule_model_builds_total", patched).await;
    // The change-to-applied latency starts when the source first saw the change:
    // it includes the kube source's coalescing (10 ms), so no update is faster.
    let latency = "ferrule_dynamic_update_latency_seconds";
    let (fast, count) = (format!("{latency}_bucket"), format!("{latency}_count"));
    let fast_before = f.metric(&fast, r#"le="0.008""#).await;
    let count_before = f.metric(&count, "").await;
    c.apply(&k8s_service(ns, "echo", &["10.213.0.3"]));
    let moved = wait_until(Duration::from_secs(5), || async {
        f.backend("web.e2e", "/").await.1 == b.addr.to_string()
    })
    .await;
    assert!(moved, "endpoint change reached traffic; log:\n{}", f.logs());
    assert_eq!(f.worker_pids(), pids, "no reload for an endpoint change");
    assert_eq!(f.reloads().await, reloads);
    // Only the EndpointSlice changed: the model was patched, not built again.
    assert!(
        f.metric("ferrule_model_builds_total", patched).await > patches,
        "the endpoint fast path of the build; log:\n{}",
        f.logs()
    );
    assert!(
        f.metric(&count, "").await > count_before,
        "latency observed"
    );
    assert_eq!(
        f.metric(&fast, r#"le="0.008""#).await,
        fast_before,
        "no update under the coalescing window; {}\nlog:\n{}",
        f.get_status("/metrics")
            .await
            .1
            .lines()
            .filter(|l| l.contains(latency))
            .collect::<Vec<_>>()
            .join("\n"),
        f.logs()
    );

    // Delete: the host is gone.
    c.delete(&["ingress", "-n", ns, "web"]);
    let gone = wait_until(Duration::from_secs(10), || async {
        f.get("web.e2e", "/").await.0 == 404
    })
    .await;
    assert!(gone, "deleted Ingress no longer served; log:\n{}", f.logs());
}

#[tokio::test]
async fn status_and_events_are_written() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let ns = "e2e-status";
    c.namespace(ns);
    let _a = netns_echo("10.213.0.4").await;
    c.apply(&k8s_service(ns, "echo", &["10.213.0.4"]));
    c.apply(&k8s_ingress(
        ns,
        "good",
        "good.e2e",
        &[("/", "Prefix", "echo")],
        &[],
    ));
    c.apply(&k8s_ingress(
        ns,
        "bad",
        "bad.e2e",
        &[("/", "Prefix", "echo")],
        &[("limit-rps", "many")],
    ));
    let f = start_ferrule(
        c,
        ns,
        &["--publish-status-address", "192.0.2.10,lb.example.com"],
    );
    f.wait_ready(Duration::from_secs(30)).await;

    let written = wait_until(Duration::from_secs(15), || async {
        let ing = c.json(&["get", "ingress", "-n", ns, "good"]);
        ing["status"]["loadBalancer"]["ingress"]
            == serde_json::json!([{"ip": "192.0.2.10"}, {"hostname": "lb.example.com"}])
    })
    .await;
    assert!(written, "status.loadBalancer written; log:\n{}", f.logs());

    let warned = wait_until(Duration::from_secs(15), || async {
        let events = c.json(&["get", "events.events.k8s.io", "-n", ns]);
        events["items"].as_array().into_iter().flatten().any(|e| {
            e["type"] == "Warning"
                && e["regarding"]["name"] == "bad"
                && e["note"].as_str().unwrap_or_default().contains("limit-rps")
        })
    })
    .await;
    assert!(
        warned,
        "Warning event naming the annotation; log:\n{}",
        f.logs()
    );
    assert_eq!(
        f.get("bad.e2e", "/").await.0,
        404,
        "the invalid Ingress is not served"
    );
    assert_eq!(f.get("good.e2e", "/").await.0, 200);

    // An access restriction Ferrule does not implement rejects its Ingress (served
    // without it, it would be open to everyone); any other unimplemented key is
    // served, with a Warning naming it.
    c.apply(&k8s_ingress(
        ns,
        "guarded",
        "guarded.e2e",
        &[("/", "Prefix", "echo")],
        &[("auth-cache-key", "$remote_user")],
    ));
    c.apply(&k8s_ingress(
        ns,
        "traced",
        "traced.e2e",
        &[("/", "Prefix", "echo")],
        &[("enable-opentelemetry", "true")],
    ));
    for (name, key) in [
        ("guarded", "auth-cache-key"),
        ("traced", "enable-opentelemetry"),
    ] {
        let warned = wait_until(Duration::from_secs(15), || async {
            let events = c.json(&["get", "events.events.k8s.io", "-n", ns]);
            events["items"].as_array().into_iter().flatten().any(|e| {
                e["type"] == "Warning"
                    && e["regarding"]["name"] == name
                    && e["note"].as_str().unwrap_or_default().contains(key)
            })
        })
        .await;
        assert!(
            warned,
            "Warning event on {name} naming {key}; log:\n{}",
            f.logs()
        );
    }
    let served = wait_until(Duration::from_secs(10), || async {
        f.get("traced.e2e", "/").await.0 == 200
    })
    .await;
    assert!(served, "the Ingress with a harmless unknown key is served");
    assert_eq!(
        f.get("guarded.e2e", "/").await.0,
        404,
        "not served without its auth"
    );
    let guarded = f
        .resource("Ingress", ns, "guarded")
        .await
        .unwrap_or_default();
    assert_eq!(guarded["state"], "rejected", "{guarded}");
    let traced = f
        .resource("Ingress", ns, "traced")
        .await
        .unwrap_or_default();
    assert_eq!(traced["state"], "applied", "{traced}");
    assert!(
        traced["message"]
            .as_str()
            .unwrap_or_default()
            .contains("enable-opentelemetry"),
        "{traced}"
    );

    // Fixed, it is served and a Normal event says so (the Warning is not the last
    // word). Events of earlier runs may exist: only one named in a later pass counts.
    let before: std::collections::HashSet<String> =
        c.json(&["get", "events.events.k8s.io", "-n", ns])["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
    c.apply(&k8s_ingress(
        ns,
        "bad",
        "bad.e2e",
        &[("/", "Prefix", "echo")],
        &[],
    ));
    let recovered = wait_until(Duration::from_secs(20), || async {
        let events = c.json(&["get", "events.events.k8s.io", "-n", ns]);
        events["items"].as_array().into_iter().flatten().any(|e| {
            e["type"] == "Normal"
                && e["reason"] == "Applied"
                && e["regarding"]["name"] == "bad"
                && e["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| !before.contains(n))
        })
    })
    .await;
    assert!(
        recovered,
        "a Normal event after the fix; log:\n{}",
        f.logs()
    );
    f.old_workers_gone().await;
    assert_eq!(f.get("bad.e2e", "/").await.0, 200);

    // An Opaque Secret holding tls.crt and tls.key serves its certificate (as in
    // ingress-nginx), not the default one.
    let fixtures = c.root.join("model/tests/fixtures");
    c.kubectl(
        &[
            "delete",
            "secret",
            "-n",
            ns,
            "opaque-tls",
            "--ignore-not-found",
        ],
        None,
    );
    let (ok, text) = c.kubectl(
        &[
            "create",
            "secret",
            "generic",
            "opaque-tls",
            "-n",
            ns,
            &format!("--from-file=tls.crt={}", fixtures.join("a.crt").display()),
            &format!("--from-file=tls.key={}", fixtures.join("a.key").display()),
        ],
        None,
    );
    assert!(ok, "kubectl create secret: {text}");
    let tls = k8s_ingress(ns, "tls", "a.example.com", &[("/", "Prefix", "echo")], &[])
        + "  tls:\n  - hosts: [a.example.com]\n    secretName: opaque-tls\n";
    c.apply(&tls);
    let default_fp = f.served_fingerprint("unknown.e2e");
    let served = wait_until(Duration::from_secs(15), || async {
        let fp = f.served_fingerprint("a.example.com");
        !fp.is_empty() && fp != default_fp
    })
    .await;
    assert!(
        served,
        "the Opaque Secret's certificate; resources {:?}",
        f.resources().await
    );

    // An Ingress that stops being ours (another class) gets its address taken back.
    let (ok, text) = c.kubectl(
        &[
            "patch",
            "ingress",
            "-n",
            ns,
            "good",
            "--type=merge",
            "-p",
            r#"{"spec":{"ingressClassName":"someone-else"}}"#,
        ],
        None,
    );
    assert!(ok, "kubectl patch: {text}");
    let cleared = wait_until(Duration::from_secs(15), || async {
        let ing = c.json(&["get", "ingress", "-n", ns, "good"]);
        ing["status"]["loadBalancer"]["ingress"]
            .as_array()
            .is_none_or(|a| a.is_empty())
    })
    .await;
    assert!(
        cleared,
        "status of an Ingress no longer ours; log:\n{}",
        f.logs()
    );
}

#[tokio::test]
async fn nothing_is_lost_while_the_apiserver_restarts() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let ns = "e2e-restart";
    c.namespace(ns);
    let a = netns_echo("10.213.0.5").await;
    c.apply(&k8s_service(ns, "echo", &["10.213.0.5"]));
    c.apply(&k8s_ingress(
        ns,
        "keep",
        "keep.e2e",
        &[("/", "Prefix", "echo")],
        &[],
    ));
    c.apply(&k8s_ingress(
        ns,
        "doomed",
        "doomed.e2e",
        &[("/", "Prefix", "echo")],
        &[],
    ));
    let f = start_ferrule(c, ns, &[]);
    f.wait_ready(Duration::from_secs(30)).await;
    assert_eq!(f.get("doomed.e2e", "/").await.0, 200);

    // Changes made around an API server restart: Ferrule's watches break and must
    // re-list; the deletion in particular must not be missed.
    c.script("stop-apiserver");
    assert_eq!(
        f.backend("keep.e2e", "/").await,
        (200, a.addr.to_string()),
        "traffic keeps flowing without the API"
    );
    c.script("start-apiserver");
    c.delete(&["ingress", "-n", ns, "doomed"]);
    c.apply(&k8s_ingress(
        ns,
        "added",
        "added.e2e",
        &[("/", "Prefix", "echo")],
        &[],
    ));
    c.script("restart-apiserver");

    let caught_up = wait_until(Duration::from_secs(60), || async {
        f.get("doomed.e2e", "/").await.0 == 404 && f.get("added.e2e", "/").await.0 == 200
    })
    .await;
    assert!(
        caught_up,
        "every change applied after the API server returned; log:\n{}",
        f.logs()
    );
    assert_eq!(f.get("keep.e2e", "/").await.0, 200);
}

#[tokio::test]
async fn only_the_lease_holder_writes_status_and_handover_works() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let ns = "e2e-lease";
    c.namespace(ns);
    let _a = netns_echo("10.213.0.6").await;
    c.apply(&k8s_service(ns, "echo", &["10.213.0.6"]));
    c.apply(&k8s_ingress(
        ns,
        "web",
        "lease.e2e",
        &[("/", "Prefix", "echo")],
        &[],
    ));
    // 9 s: the holder renews 3 s (a third) before expiry. With 3 s it had 1 s of
    // slack, and a renewal that a loaded machine delayed that long let the follower
    // take the lease while the holder lived (a flake, seen rarely).
    let lease = [
        "--lease-duration-seconds",
        "9",
        "--election-id",
        "e2e-lease",
    ];
    let mut first = start_ferrule(
        c,
        ns,
        &[&lease[..], &["--publish-status-address", "192.0.2.1"]].concat(),
    );
    first.wait_ready(Duration::from_secs(30)).await;
    let status = |ip: &'static str| async move {
        let ing = c.json(&["get", "ingress", "-n", ns, "web"]);
        ing["status"]["loadBalancer"]["ingress"] == serde_json::json!([{"ip": ip}])
    };
    assert!(
        wait_until(Duration::from_secs(15), || status("192.0.2.1")).await,
        "leader wrote status"
    );

    // A second replica serves traffic but, not holding the lease, writes nothing.
    let second = start_ferrule(
        c,
        ns,
        &[&lease[..], &["--publish-status-address", "192.0.2.2"]].concat(),
    );
    second.wait_ready(Duration::from_secs(30)).await;
    assert_eq!(
        second.get("lease.e2e", "/").await.0,
        200,
        "every replica serves"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        status("192.0.2.1").await,
        "the follower must not overwrite status"
    );

    // The leader dies: the follower takes the lease and writes its address.
    let _ = Command::new("kill")
        .arg("-KILL")
        .arg(first.child.id().to_string())
        .status();
    let _ = first.child.wait();
    let took_over = wait_until(Duration::from_secs(30), || status("192.0.2.2")).await;
    assert!(took_over, "the follower took over; log:\n{}", second.logs());
}

/// The published address in an Ingress's status, if any.
fn status_ip(c: &Cluster, ns: &str, name: &str) -> Value {
    c.json(&["get", "ingress", "-n", ns, name])["status"]["loadBalancer"]["ingress"][0]["ip"]
        .clone()
}

#[tokio::test]
async fn status_writes_rebuild_nothing_and_a_restarted_controller_adopts_nginx() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let ns = "e2e-adopt";
    c.namespace(ns);
    let a = netns_echo("10.213.0.5").await;
    let b = netns_echo("10.213.0.6").await;
    c.apply(&k8s_service(ns, "echo", &["10.213.0.5"]));
    c.apply(&k8s_ingress(
        ns,
        "web",
        "adopt.e2e",
        &[("/", "Prefix", "echo")],
        &[],
    ));
    let mut f = start_ferrule(c, ns, &["--publish-status-address", "10.9.9.8"]);
    f.wait_ready(Duration::from_secs(30)).await;
    assert_eq!(f.backend("adopt.e2e", "/").await, (200, a.addr.to_string()));
    let written = wait_until(Duration::from_secs(15), || async {
        status_ip(c, ns, "web") == "10.9.9.8"
    })
    .await;
    assert!(written, "status written; log:\n{}", f.logs());

    // Someone else's status write: corrected from the watched status, and neither it
    // nor the correction (status-only watch events) makes a snapshot, so nothing
    // rebuilds the model. Passes of other causes (a reload's re-evaluation, the retry
    // of a post) may come late on a loaded machine and are not what this is about.
    let snapshot_passes = r#"cause="snapshot""#;
    let passes = || f.metric("ferrule_model_passes_total", snapshot_passes);
    let mut before = passes().await;
    // Settled: the same count for a second (startup's passes are done).
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = passes().await;
        if now == before {
            break;
        }
        before = now;
    }
    let (ok, text) = c.kubectl(
        &[
            "patch",
            "ingress",
            "web",
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"loadBalancer":{"ingress":[{"ip":"10.1.1.1"}]}}}"#,
        ],
        None,
    );
    assert!(ok, "kubectl patch --subresource=status: {text}");
    let corrected = wait_until(Duration::from_secs(15), || async {
        status_ip(c, ns, "web") == "10.9.9.8"
    })
    .await;
    assert!(corrected, "status corrected; log:\n{}", f.logs());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let changes: String = (f.logs().lines())
        .filter(|l| l.contains("model pass") || l.contains("a change the model reads"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        passes().await,
        before,
        "a status-only change made a snapshot; passes and changes seen:\n{changes}"
    );

    // The controller dies; the restarted one adopts its NGINX.
    let master = f.master_pid().expect("pid file");
    let workers = f.worker_pids();
    f.kill_controller();
    f.restart_controller();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while f.get_status("/readyz").await.0 != 200 {
        assert_eq!(
            f.backend("adopt.e2e", "/").await,
            (200, a.addr.to_string()),
            "served while the controller restarts"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "not ready again; log:\n{}",
            f.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(f.master_pid(), Some(master), "the same master");
    assert_eq!(f.worker_pids(), workers, "the same workers: no reload");
    assert_eq!(f.reloads().await, 0.0);

    // EndpointSlice changes reach traffic through the adopted balancer.
    c.apply(&k8s_service(ns, "echo", &["10.213.0.6"]));
    let moved = wait_until(Duration::from_secs(10), || async {
        f.backend("adopt.e2e", "/").await.1 == b.addr.to_string()
    })
    .await;
    assert!(moved, "endpoint change after adoption; log:\n{}", f.logs());
    assert_eq!(f.worker_pids(), workers, "still no reload");
}

/// An HTTP GET sent as raw bytes over a TCP service's port on loopback: the answer,
/// or `None` when nothing answers.
async fn over_tcp_service(port: u16) -> Option<String> {
    over_tcp("127.0.0.1", port).await
}

/// An HTTP GET sent as raw bytes to `ip:port`: the answer, or `None` when nothing
/// answers.
pub(crate) async fn over_tcp(ip: &str, port: u16) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let talk = async {
        let mut s = tokio::net::TcpStream::connect((ip, port)).await.ok()?;
        s.write_all(b"GET /tcp HTTP/1.1\r\nHost: tcp.e2e\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.ok()?;
        Some(String::from_utf8_lossy(&raw).into_owned()).filter(|t| !t.is_empty())
    };
    tokio::time::timeout(Duration::from_secs(5), talk)
        .await
        .ok()
        .flatten()
}

/// `--tcp-services-configmap` in Kubernetes mode: the ConfigMap is watched by name,
/// a new port is served after its change, and the Service's endpoints move without
/// a reload.
#[tokio::test]
async fn tcp_services_follow_their_configmap_and_endpoints() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let ns = "e2e-tcp";
    c.namespace(ns);
    let a = netns_echo("10.213.0.4").await;
    let b = netns_echo("10.213.0.5").await;
    c.apply(&k8s_service(ns, "echo", &["10.213.0.4"]));
    let (first, second) = (free_port(), free_port());
    let services = |port: u16| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: tcp-services, namespace: {ns} }}\n\
             data: {{ \"{port}\": \"{ns}/echo:80\" }}\n"
        )
    };
    c.apply(&services(first));
    let flag = format!("{ns}/tcp-services");
    let f = start_ferrule(c, ns, &["--tcp-services-configmap", &flag]);
    f.wait_ready(Duration::from_secs(30)).await;
    let answered_by = |port: u16, echo: &Echo| {
        let want = echo.addr.to_string();
        async move {
            over_tcp_service(port)
                .await
                .is_some_and(|t| t.contains(&want))
        }
    };
    assert!(
        answered_by(first, &a).await,
        "the TCP service is not served; log:\n{}",
        f.logs()
    );

    // The ConfigMap moves the service to another port.
    c.apply(&services(second));
    let moved = wait_until(Duration::from_secs(10), || answered_by(second, &a)).await;
    assert!(moved, "the new port is not served; log:\n{}", f.logs());
    // Old workers close their listeners as they begin their graceful exit.
    let closed = wait_until(Duration::from_secs(10), || async {
        over_tcp_service(first).await.is_none()
    })
    .await;
    assert!(closed, "the old port still answers");
    // The move was one reload, counted once the new workers confirm it, which may
    // come after the new port answers and the old one closes: the baseline below
    // must include it.
    let counted = wait_until(Duration::from_secs(15), || async {
        f.reloads().await >= 1.0
    })
    .await;
    assert!(
        counted,
        "the port move's reload is counted; log:\n{}",
        f.logs()
    );

    // The endpoints move: the next connection follows, NGINX is not reloaded (the
    // workers of the last reload may still be leaving: no new one may come).
    let (workers, reloads) = (f.worker_pids(), f.reloads().await);
    c.apply(&k8s_service(ns, "echo", &["10.213.0.5"]));
    let followed = wait_until(Duration::from_secs(10), || answered_by(second, &b)).await;
    assert!(
        followed,
        "the endpoint change did not reach the TCP service; log:\n{}",
        f.logs()
    );
    assert_eq!(f.reloads().await, reloads, "a reload for endpoints");
    let now = f.worker_pids();
    assert!(
        now.iter().all(|p| workers.contains(p)),
        "new workers: {workers:?} -> {now:?}"
    );
}

mod admission;
mod header_lists;
