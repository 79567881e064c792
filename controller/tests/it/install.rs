//! Ferrule installed as users install it: `helm install` of `charts/ferrule` on the
//! harness's real node (kubelet, containerd, kube-proxy), the image from `make image`,
//! echo backends as pods. One test walks a release's life: install, traffic, the
//! webhook, NGINX in a container of its own without the cluster's credentials, a
//! reload, NGINX restarted after kill -9, the NetworkPolicy, a rolling upgrade under
//! load, a broken ConfigMap that stalls a rollout, leader handover, uninstall.
//!
//! The client plays a cloud load balancer: it sends only to the controller Service's
//! ready endpoints, read from its EndpointSlices, straight to the pod IPs.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::e2e::{Cluster, SERIAL, cluster};
use crate::support::*;

const NS: &str = "e2e-helm";
const RELEASE: &str = "edge";
const CONTROLLER: &str = "edge-ferrule-controller";
const HOST: &str = "helm.e2e";

impl Cluster {
    fn helm(&self, args: &[&str]) -> (bool, String) {
        let helm = std::env::var_os("HELM")
            .map_or_else(|| self.root.join("target/e2e/bin/helm"), PathBuf::from);
        let out = Command::new(helm)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("running helm");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    /// Addresses of `service`'s endpoints that are ready (and not terminating).
    fn ready_endpoints(&self, ns: &str, service: &str) -> Vec<String> {
        let label = format!("kubernetes.io/service-name={service}");
        let (ok, text) = self.kubectl(
            &[
                "get",
                "endpointslices",
                "-n",
                ns,
                "-l",
                &label,
                "-o",
                "json",
            ],
            None,
        );
        if !ok {
            return Vec::new();
        }
        let v: Value = serde_json::from_str(&text).unwrap_or_default();
        let mut ready = Vec::new();
        for slice in v["items"].as_array().into_iter().flatten() {
            for e in slice["endpoints"].as_array().into_iter().flatten() {
                if e["conditions"]["ready"] == true && e["conditions"]["terminating"] != true {
                    for a in e["addresses"].as_array().into_iter().flatten() {
                        ready.extend(a.as_str().map(str::to_owned));
                    }
                }
            }
        }
        ready
    }

    /// The controller pods: (name, IP, Ready).
    fn controller_pods(&self) -> Vec<(String, String, bool)> {
        let v = self.json(&[
            "get",
            "pods",
            "-n",
            NS,
            "-l",
            "app.kubernetes.io/component=controller,app.kubernetes.io/instance=edge",
        ]);
        v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .map(|p| {
                let ready = p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
                (
                    p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    p["status"]["podIP"].as_str().unwrap_or_default().to_owned(),
                    ready,
                )
            })
            .collect()
    }

    fn rollout_status(&self, timeout: &str) -> (bool, String) {
        self.kubectl(
            &[
                "rollout",
                "status",
                "-n",
                NS,
                &format!("deployment/{CONTROLLER}"),
                &format!("--timeout={timeout}"),
            ],
            None,
        )
    }
}

impl Cluster {
    /// `sh -c script` in `container` of `pod`: (exit status 0, output).
    fn exec(&self, pod: &str, container: &str, script: &str) -> (bool, String) {
        self.kubectl(
            &[
                "exec", "-n", NS, pod, "-c", container, "--", "sh", "-c", script,
            ],
            None,
        )
    }

    /// The host pid of `container`'s first process in `pod` (containerd's task).
    fn container_pid(&self, pod: &str, container: &str) -> u32 {
        let p = self.json(&["get", "pod", "-n", NS, pod]);
        let id = p["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["name"] == container)
            .and_then(|s| s["containerID"].as_str())
            .and_then(|id| id.strip_prefix("containerd://"))
            .unwrap_or_else(|| panic!("no containerID for {container} in {p}"))
            .to_owned();
        let out = Command::new(self.root.join("test/e2e/cluster.sh"))
            .args(["ctr", "tasks", "ls"])
            .output()
            .unwrap();
        let tasks = String::from_utf8_lossy(&out.stdout).into_owned();
        tasks
            .lines()
            .find(|l| l.starts_with(&id))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or_else(|| panic!("no task {id} in:\n{tasks}"))
    }

    /// The restart counts of `pod`'s containers, by name.
    fn restarts(&self, pod: &str) -> Vec<(String, u64)> {
        let p = self.json(&["get", "pod", "-n", NS, pod]);
        let mut counts: Vec<(String, u64)> = p["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                (
                    s["name"].as_str().unwrap_or_default().to_owned(),
                    s["restartCount"].as_u64().unwrap_or(u64::MAX),
                )
            })
            .collect();
        counts.sort();
        counts
    }
}

/// A metric of the controller at `ip` (its status port), summed over its series.
async fn pod_metric(ip: &str, name: &str, labels: &str) -> f64 {
    let Ok(r) = client()
        .get(format!("http://{ip}:10254/metrics"))
        .timeout(Duration::from_secs(3))
        .send()
        .await
    else {
        return f64::NAN;
    };
    let text = r.text().await.unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split([' ', '{']).next() == Some(name) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The NGINX master's pid in the nginx container of `pod` (its pid namespace), if
/// the pid file names a live master.
fn nginx_master(c: &Cluster, pod: &str) -> Option<u32> {
    let (ok, out) = c.exec(
        pod,
        "nginx",
        "pid=$(cat /var/lib/ferrule/nginx/run/nginx.pid) && \
         tr '\\0' ' ' </proc/$pid/cmdline | grep -q '^nginx: master process ' && echo $pid",
    );
    ok.then(|| out.trim().parse().ok()).flatten()
}

/// An error with the chain of its causes ("error sending request" alone does not
/// say whether the connection was refused, reset or timed out).
fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text += &format!(": {s}");
        source = s.source();
    }
    text
}

/// GET `HOST` at `ip`:80: the echo pod that answered, or an error.
async fn via(ip: &str) -> Result<String, String> {
    via_host(ip, HOST).await
}

/// GET `host` at `ip`:80: the echo pod that answered, or an error.
async fn via_host(ip: &str, host: &str) -> Result<String, String> {
    let r = client()
        .get(format!("http://{ip}/"))
        .header("Host", host)
        .timeout(Duration::from_secs(3))
        .send()
        .await
        .map_err(|e| format!("{ip}: {}", causes(&e)))?;
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap_or_default();
    match (status, body["pod"].as_str()) {
        (200, Some(pod)) => Ok(pod.to_owned()),
        _ => Err(format!("{ip}: {status} {body}")),
    }
}

/// Steady load through the controller Service's ready endpoints, as a cloud load
/// balancer sends it, on threads of its own (helm and kubectl block the test's).
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(c: &'static Cluster) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let targets = Arc::new(Mutex::new(c.ready_endpoints(NS, CONTROLLER)));
        let watcher = {
            let (stop, targets) = (stop.clone(), targets.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let ready = c.ready_endpoints(NS, CONTROLLER);
                    if !ready.is_empty() {
                        *targets.lock().unwrap() = ready;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
        };
        let sender = {
            let (stop, ok, failures) = (stop.clone(), ok.clone(), failures.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let mut n = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        let ip = {
                            let t = targets.lock().unwrap();
                            t[n % t.len()].clone()
                        };
                        n += 1;
                        match via(&ip).await {
                            Ok(_) => {
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => failures.lock().unwrap().push(e),
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
            })
        };
        Load {
            stop,
            ok,
            failures,
            threads: vec![watcher, sender],
        }
    }

    /// Stops the load: (requests answered, failures).
    fn finish(self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        let failures = self.failures.lock().unwrap().clone();
        (self.ok.load(Ordering::Relaxed), failures)
    }
}

fn echo_backends() -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{ name: echo, namespace: {NS} }}
spec:
  replicas: 2
  selector: {{ matchLabels: {{ app: echo }} }}
  template:
    metadata: {{ labels: {{ app: echo }} }}
    spec:
      containers:
        - name: echo
          image: ferrule.local/echo:dev
          imagePullPolicy: Never
          env: [{{ name: POD_NAME, valueFrom: {{ fieldRef: {{ fieldPath: metadata.name }} }} }}]
          ports: [{{ containerPort: 8080 }}]
          readinessProbe: {{ httpGet: {{ path: /healthz, port: 8080 }}, periodSeconds: 1 }}
---
apiVersion: v1
kind: Service
metadata: {{ name: echo, namespace: {NS} }}
spec:
  selector: {{ app: echo }}
  ports: [{{ port: 80, targetPort: 8080 }}]
"#
    )
}

fn web_ingress(name: &str, host: &str, annotations: &str) -> String {
    format!(
        r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: {NS}
  annotations: {{ {annotations} }}
spec:
  ingressClassName: helm-e2e
  rules:
    - host: {host}
      http:
        paths:
          - path: /
            pathType: Prefix
            backend: {{ service: {{ name: echo, port: {{ number: 80 }} }} }}
"#
    )
}

fn publish_address(c: &Cluster, ip: &str) {
    let patch = format!(r#"{{"status":{{"loadBalancer":{{"ingress":[{{"ip":"{ip}"}}]}}}}}}"#);
    let (ok, text) = c.kubectl(
        &[
            "patch",
            "service",
            CONTROLLER,
            "-n",
            NS,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ],
        None,
    );
    assert!(ok, "setting the Service's load balancer address: {text}");
}

async fn ingress_status_is(c: &Cluster, ip: &str) -> bool {
    wait_until(Duration::from_secs(40), || async move {
        let ing = c.json(&["get", "ingress", "-n", NS, "web"]);
        ing["status"]["loadBalancer"]["ingress"] == serde_json::json!([{ "ip": ip }])
    })
    .await
}

/// Every object of the release still in the cluster, namespaced or not.
fn leftovers(c: &Cluster) -> Vec<String> {
    let label = format!("app.kubernetes.io/instance={RELEASE}");
    let mut left = Vec::new();
    for (kinds, scope) in [
        (
            "deployments,replicasets,pods,services,configmaps,secrets,serviceaccounts,roles,\
             rolebindings,leases,poddisruptionbudgets,horizontalpodautoscalers,networkpolicies",
            vec!["-n", NS],
        ),
        (
            "clusterroles,clusterrolebindings,ingressclasses,validatingwebhookconfigurations",
            vec![],
        ),
    ] {
        let mut args = vec!["get", kinds, "-l", &label, "-o", "name"];
        args.extend(scope);
        let (ok, text) = c.kubectl(&args, None);
        assert!(ok, "kubectl get {kinds}: {text}");
        left.extend(
            text.lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with("No resources"))
                .map(str::to_owned),
        );
    }
    left
}

#[tokio::test]
async fn a_release_installs_serves_rolls_without_loss_and_uninstalls_cleanly() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    c.namespace(NS);
    c.apply(&echo_backends());

    // Install: two replicas of the image `make image` built, with a class of their own.
    let chart = c.root.join("charts/ferrule");
    let chart = chart.to_str().unwrap();
    let values = [
        "--set=controller.replicaCount=2",
        "--set=controller.image.pullPolicy=Never",
        "--set=controller.ingressClassResource.name=helm-e2e",
        "--set=controller.ingressClassResource.controllerValue=ferrule.dev/helm-e2e",
        "--set=controller.ingressClass=helm-e2e",
        "--set=controller.terminationGracePeriodSeconds=60",
        // A TCP service (ingress-nginx's `tcp` value): the port on the pods and the
        // Service, to the echo pods.
        "--set=tcp.9000=e2e-helm/echo:80",
        // The NetworkPolicy: the API server calls the webhook from the node's
        // address on the pod bridge, and the kubelet's probes and this test's
        // scrapes come from there too.
        "--set=controller.networkPolicy.enabled=true",
        "--set=controller.networkPolicy.apiServerCIDRs={10.244.0.1/32}",
        r#"--set-json=controller.networkPolicy.statusFrom=[{"ipBlock":{"cidr":"10.244.0.1/32"}}]"#,
    ];
    // Not `helm --wait`: it would wait for the LoadBalancer Service's address, which
    // only a cloud provides (the test plays that part below).
    // A run that failed half-way (the harness cluster outlives it) may have left
    // its release behind: start from none.
    let _ = c.helm(&["uninstall", RELEASE, "-n", NS, "--wait", "--timeout=3m"]);
    let mut install = vec!["install", RELEASE, chart, "-n", NS];
    install.extend(values);
    let (ok, text) = c.helm(&install);
    assert!(ok, "helm install: {text}");
    let (ok, text) = c.rollout_status("4m");
    assert!(ok, "the controller pods become Ready: {text}");
    let pods = c.controller_pods();
    assert_eq!(pods.len(), 2, "two controller pods: {pods:?}");
    assert!(pods.iter().all(|p| p.2), "both Ready: {pods:?}");

    // The webhook answers from the pods: an invalid Ingress is refused with the model's
    // message, a valid one is admitted and served by every replica.
    // Ready pods reach the webhook Service's EndpointSlice a moment later (the
    // controller-manager writes it): until then the API server finds no endpoint.
    // The certificate is Ferrule's own: the lease holder issues it and sets the
    // caBundle just after it starts; until then the call fails.
    let bad = web_ingress(
        "bad",
        "bad.helm.e2e",
        r#"nginx.ingress.kubernetes.io/limit-rps: "many""#,
    );
    // 90 s: on a loaded machine (the rest of the integration suite runs beside this
    // test) the controller-manager was seen to take over 30 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let (ok, text) = loop {
        let (ok, text) = c.kubectl(&["apply", "-f", "-"], Some(&bad));
        let not_yet =
            text.contains("no endpoints available") || text.contains("failed calling webhook");
        if ok || !not_yet || std::time::Instant::now() > deadline {
            break (ok, text);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(
        !ok && text.contains("limit-rps"),
        "refused by the webhook: {text}\nEndpointSlices: {}\nPods: {:?}",
        c.kubectl(&["get", "endpointslices", "-n", NS, "-o", "wide"], None)
            .1,
        c.controller_pods()
    );
    let secret = c.json(&["get", "secret", "-n", NS, "edge-ferrule-admission"]);
    assert_eq!(
        secret["metadata"]["labels"]["app.kubernetes.io/managed-by"], "ferrule",
        "the webhook's certificate is Ferrule's: {secret}"
    );
    c.apply(&web_ingress("web", HOST, ""));
    publish_address(c, "192.0.2.60");
    for (_, ip, _) in &pods {
        let answered = RefCell::new(BTreeSet::new());
        let served = wait_until(Duration::from_secs(30), || async {
            if let Ok(pod) = via(ip).await {
                answered.borrow_mut().insert(pod);
            }
            answered.borrow().len() == 2
        })
        .await;
        assert!(served, "{ip} routes {HOST} to both echo pods: {answered:?}");
    }
    assert!(
        ingress_status_is(c, "192.0.2.60").await,
        "the chart Service's address is published"
    );
    // The TCP service through the chart's Service, as kube-proxy forwards it (to its
    // ClusterIP from the node): NGINX's stream proxy passes the bytes to an echo pod.
    let service = c.json(&["get", "service", "-n", NS, CONTROLLER]);
    let cluster_ip = service["spec"]["clusterIP"].as_str().unwrap_or_default();
    let answer = RefCell::new(None);
    let over_tcp = wait_until(Duration::from_secs(30), || async {
        *answer.borrow_mut() = crate::e2e::over_tcp(cluster_ip, 9000).await;
        answer
            .borrow()
            .as_deref()
            .is_some_and(|a| a.starts_with("HTTP/1.1 200") && a.contains(r#""pod":"echo-"#))
    })
    .await;
    assert!(
        over_tcp,
        "TCP port 9000 of {cluster_ip} reaches an echo pod: {:?}\nService: {service}",
        answer.borrow()
    );

    // Through the Service's ClusterIP too, as kube-proxy forwards it.
    let answered = RefCell::new(Err(String::new()));
    let through_service = wait_until(Duration::from_secs(30), || async {
        *answered.borrow_mut() = via(cluster_ip).await;
        answered.borrow().is_ok()
    })
    .await;
    assert!(
        through_service,
        "{HOST} through the Service {cluster_ip}: {:?}",
        answered.borrow()
    );

    two_containers_and_the_token_in_one(c, &pods[0].0).await;
    the_network_policy_admits_what_it_must(c, &pods);
    an_ingress_change_reloads_every_pod(c, &pods, cluster_ip).await;
    nginx_comes_back_after_kill_9(c, &pods[0]).await;
    let ready = wait_until(Duration::from_secs(60), || async {
        let now = c.controller_pods();
        now.len() == 2 && now.iter().all(|p| p.2)
    })
    .await;
    assert!(ready, "both pods Ready again: {:?}", c.controller_pods());

    // A rolling upgrade under steady load: not one request fails.
    let load = Load::start(c);
    let mut upgrade = vec![
        "upgrade",
        RELEASE,
        chart,
        "-n",
        NS,
        "--reuse-values",
        "--set=controller.podAnnotations.revision=two",
    ];
    let (ok, text) = c.helm(&upgrade);
    assert!(ok, "helm upgrade: {text}");
    let (ok, text) = c.rollout_status("3m");
    assert!(ok, "rollout: {text}");
    // Config safety in a rollout: a ConfigMap value the new pods refuse leaves the
    // surge pod not Ready, so the rollout stalls and the old pods keep serving...
    upgrade[6] = "--set=controller.config.proxy-read-timeout=soon";
    let (ok, text) = c.helm(&upgrade);
    assert!(ok, "helm upgrade with a broken ConfigMap: {text}");
    let (rolled, _) = c.rollout_status("25s");
    assert!(
        !rolled,
        "the rollout stalls on a pod that rejects the ConfigMap"
    );
    let pods = c.controller_pods();
    assert_eq!(
        pods.iter().filter(|p| p.2).count(),
        2,
        "the two old pods stay Ready, the new one does not: {pods:?}"
    );
    assert_eq!(pods.len(), 3, "one surge pod: {pods:?}");
    // ... and fixing the input lets it finish by itself.
    let (ok, text) = c.kubectl(
        &[
            "patch",
            "configmap",
            CONTROLLER,
            "-n",
            NS,
            "--type=merge",
            "-p",
            r#"{"data":{"proxy-read-timeout":"30"}}"#,
        ],
        None,
    );
    assert!(ok, "fixing the ConfigMap: {text}");
    let (ok, text) = c.rollout_status("3m");
    assert!(
        ok,
        "the rollout finishes once the ConfigMap is fixed: {text}"
    );
    let (answered, failures) = load.finish();
    assert!(answered > 100, "the load ran: {answered} answers");
    assert!(
        failures.is_empty(),
        "{} of {} requests failed during the rollouts: {:?}",
        failures.len(),
        answered + failures.len() as u64,
        &failures[..failures.len().min(10)]
    );

    // Leader election: one pod holds the Lease; when it goes, another takes over and
    // writes the status.
    let holder = || {
        c.json(&["get", "lease", "-n", NS, "edge-ferrule-leader"])["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    // After the rollout the Lease may still name an old pod until it expires.
    let held = wait_until(Duration::from_secs(60), || async {
        let h = holder();
        c.controller_pods().iter().any(|p| p.0 == h)
    })
    .await;
    let first = holder();
    assert!(
        held,
        "a controller pod holds the Lease: {first:?} of {:?}",
        c.controller_pods()
    );
    c.delete(&["pod", "-n", NS, &first]);
    let handed_over = wait_until(Duration::from_secs(60), || async {
        let h = holder();
        !h.is_empty() && h != first
    })
    .await;
    assert!(handed_over, "another pod took the Lease from {first}");
    publish_address(c, "192.0.2.61");
    assert!(
        ingress_status_is(c, "192.0.2.61").await,
        "the new leader writes status"
    );

    // Uninstall leaves nothing of the release, cluster-scoped objects included.
    let (ok, text) = c.helm(&["uninstall", RELEASE, "-n", NS, "--wait", "--timeout=3m"]);
    assert!(ok, "helm uninstall: {text}");
    let left = RefCell::new(Vec::new());
    let clean = wait_until(Duration::from_secs(90), || async {
        *left.borrow_mut() = leftovers(c);
        left.borrow().is_empty()
    })
    .await;
    assert!(clean, "left behind by helm uninstall: {left:?}");
    c.delete(&["namespace", NS]);
}

/// NGINX runs in the pod's `nginx` container, the controller in `controller`, and
/// only the controller's has the service-account token: seen from inside each
/// container (`kubectl exec`) and from the node (`/proc/PID/root` of each
/// container's processes, NGINX's master among them).
async fn two_containers_and_the_token_in_one(c: &Cluster, pod: &str) {
    let p = c.json(&["get", "pod", "-n", NS, pod]);
    let names: Vec<&str> = p["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["controller", "nginx"], "{p}");
    assert_eq!(p["spec"]["automountServiceAccountToken"], false);
    assert_ne!(p["spec"]["shareProcessNamespace"], true);
    const TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
    let (ok, out) = c.exec(pod, "controller", &format!("test -s {TOKEN}"));
    assert!(ok, "the controller's container has the token: {out}");
    let (ok, out) = c.exec(
        pod,
        "nginx",
        &format!("test ! -e {TOKEN} && test ! -e /var/run/secrets"),
    );
    assert!(ok, "NGINX's container has no token: {out}");

    // Every NGINX process is in the nginx container, as uid 101 without any
    // capability or a way to gain one; the controller's container runs none.
    let list = "for p in /proc/[0-9]*; do c=$(tr '\\0' ' ' <$p/cmdline 2>/dev/null) || continue; \
                [ -n \"$c\" ] && echo \"$c|$(grep -E '^(Uid|CapPrm|CapEff|NoNewPrivs):' $p/status | tr -s '\\t\\n' '  ')\"; done";
    let (ok, processes) = c.exec(pod, "nginx", list);
    assert!(ok, "listing the nginx container's processes: {processes}");
    let nginx: Vec<&str> = processes
        .lines()
        .filter(|l| l.starts_with("nginx: "))
        .collect();
    assert!(
        nginx
            .iter()
            .any(|l| l.starts_with("nginx: master process "))
            && nginx.iter().any(|l| l.starts_with("nginx: worker process")),
        "NGINX's master and workers run in the nginx container:\n{processes}"
    );
    for l in &nginx {
        assert!(
            l.contains("Uid: 101 101 101 101")
                && l.contains("CapPrm: 0000000000000000")
                && l.contains("CapEff: 0000000000000000")
                && l.contains("NoNewPrivs: 1"),
            "an NGINX process as uid 101, no capability: {l}"
        );
    }
    let (ok, theirs) = c.exec(pod, "controller", list);
    assert!(ok, "listing the controller container's processes: {theirs}");
    assert!(
        theirs.lines().all(|l| !l.starts_with("nginx")),
        "no NGINX in the controller's container:\n{theirs}"
    );

    // From the node: the file systems the processes see.
    let supervisor = c.container_pid(pod, "nginx");
    let controller = c.container_pid(pod, "controller");
    let master = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1));
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid == Some(&supervisor.to_string())
                && String::from_utf8_lossy(&cmdline).starts_with("nginx: master process")
        })
        .expect("NGINX's master, the supervisor's child, seen from the node");
    // /var/run is an absolute link to /run in the image, which the node would
    // resolve against its own root: the mount is at /run/secrets in the container.
    let sees = |pid: u32| {
        let token = TOKEN.strip_prefix("/var").unwrap();
        std::path::Path::new(&format!("/proc/{pid}/root{token}")).exists()
    };
    assert!(
        sees(controller),
        "the controller (host pid {controller}) sees its token"
    );
    assert!(
        !sees(supervisor),
        "the supervisor (host pid {supervisor}) sees no token"
    );
    assert!(
        !sees(master),
        "NGINX's master (host pid {master}) sees no token"
    );

    // NGINX's logs are its container's: the access log line of this test's request.
    let logged = wait_until(Duration::from_secs(10), || async {
        let (_, log) = c.kubectl(&["logs", "-n", NS, pod, "-c", "nginx"], None);
        log.contains("\"GET / HTTP/1.1\" 200")
    })
    .await;
    assert!(logged, "NGINX's access log is in the nginx container's log");
}

/// The chart's NetworkPolicy as the API server holds it: it selects exactly the
/// controller pods; the proxy ports admit anyone, the webhook's port only the API
/// server's address and the status port only the listed peer; nothing else is
/// admitted. (The harness's bridge network plugin does not enforce policies: this
/// checks what an enforcing one would be given.)
fn the_network_policy_admits_what_it_must(c: &Cluster, pods: &[(String, String, bool)]) {
    let policy = c.json(&["get", "networkpolicy", "-n", NS, CONTROLLER]);
    let spec = &policy["spec"];
    assert_eq!(
        spec["policyTypes"],
        serde_json::json!(["Ingress"]),
        "{policy}"
    );
    let selector: Vec<String> = spec["podSelector"]["matchLabels"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
        .collect();
    let selected = c.json(&["get", "pods", "-n", NS, "-l", &selector.join(",")]);
    let mut selected: Vec<&str> = selected["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    selected.sort();
    let mut controllers: Vec<&str> = pods.iter().map(|p| p.0.as_str()).collect();
    controllers.sort();
    assert_eq!(
        selected, controllers,
        "the policy selects the controller pods only"
    );
    // Each port of the pods, and who may reach it.
    let mut admitted: Vec<(String, u64, String)> = Vec::new();
    for rule in spec["ingress"].as_array().unwrap() {
        let from = match rule["from"].as_array() {
            None => "anyone".to_owned(),
            Some(peers) => serde_json::to_string(peers).unwrap(),
        };
        for port in rule["ports"].as_array().unwrap() {
            admitted.push((
                port["protocol"].as_str().unwrap().to_owned(),
                port["port"].as_u64().unwrap(),
                from.clone(),
            ));
        }
    }
    admitted.sort();
    let node = r#"[{"ipBlock":{"cidr":"10.244.0.1/32"}}]"#;
    let want: Vec<(String, u64, String)> = [
        (80, "anyone"),
        (443, "anyone"),
        (8443, node),
        (9000, "anyone"),
        (10254, node),
    ]
    .iter()
    .map(|(port, from)| ("TCP".to_owned(), *port, from.to_string()))
    .collect();
    assert_eq!(admitted, want, "{policy}");
    // Those are all the ports the pods listen on.
    let pod = c.json(&["get", "pod", "-n", NS, &pods[0].0]);
    let mut ports: Vec<u64> = pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
        .map(|p| p["containerPort"].as_u64().unwrap())
        .collect();
    ports.sort();
    assert_eq!(ports, [80, 443, 8443, 9000, 10254], "{pod}");
}

/// A new Ingress reaches every pod by a reload (the same master, a verified
/// reload), served through the Service.
async fn an_ingress_change_reloads_every_pod(
    c: &Cluster,
    pods: &[(String, String, bool)],
    cluster_ip: &str,
) {
    const OK: &str = "result=\"success\"";
    let mut before = Vec::new();
    for (name, ip, _) in pods {
        let master = nginx_master(c, name).expect("a master");
        before.push((master, pod_metric(ip, "ferrule_reloads_total", OK).await));
    }
    c.apply(&web_ingress("two", "two.helm.e2e", ""));
    for ((name, ip, _), (master, reloads)) in pods.iter().zip(&before) {
        let served = wait_until(Duration::from_secs(30), || async {
            via_host(ip, "two.helm.e2e").await.is_ok()
        })
        .await;
        assert!(served, "{name} serves the new Ingress");
        let counted = wait_until(Duration::from_secs(10), || async {
            pod_metric(ip, "ferrule_reloads_total", OK).await > *reloads
        })
        .await;
        assert!(counted, "{name} reloaded: {reloads} before");
        assert_eq!(
            nginx_master(c, name),
            Some(*master),
            "{name}: a reload keeps the master"
        );
    }
    let through = wait_until(Duration::from_secs(10), || async {
        via_host(cluster_ip, "two.helm.e2e").await.is_ok()
    })
    .await;
    assert!(through, "the new Ingress through the Service");
}

/// kill -9 of NGINX's master in `pod`'s nginx container: the controller notices
/// (through the supervisor), NGINX is started again in the same container (neither
/// container restarts), the pod serves and is Ready again, and no zombie is left.
async fn nginx_comes_back_after_kill_9(c: &Cluster, (pod, ip, _): &(String, String, bool)) {
    let old = nginx_master(c, pod).expect("a master");
    let (ok, out) = c.exec(pod, "nginx", &format!("kill -9 {old}"));
    assert!(ok, "kill -9 {old}: {out}");
    let back = wait_until(Duration::from_secs(60), || async {
        nginx_master(c, pod).is_some_and(|m| m != old)
            && via(ip).await.is_ok()
            && c.controller_pods().iter().any(|p| &p.0 == pod && p.2)
    })
    .await;
    let (_, log) = c.kubectl(
        &["logs", "-n", NS, pod, "-c", "controller", "--tail=30"],
        None,
    );
    assert!(
        back,
        "a new master serves in {pod}, Ready; controller:\n{log}"
    );
    assert_eq!(
        pod_metric(ip, "ferrule_nginx_restarts_total", "").await,
        1.0,
        "the controller restarted NGINX once"
    );
    assert_eq!(
        c.restarts(pod),
        [("controller".to_owned(), 0), ("nginx".to_owned(), 0)],
        "no container restarted"
    );
    // The old workers, orphaned by their master, were killed and reaped.
    let reaped = wait_until(Duration::from_secs(10), || async {
        let (ok, zombies) = c.exec(
            pod,
            "nginx",
            "for p in /proc/[0-9]*; do grep -q '^State:.Z' $p/status 2>/dev/null && echo $p; done; true",
        );
        ok && zombies.trim().is_empty()
    })
    .await;
    assert!(reaped, "no zombie in the nginx container");
}
