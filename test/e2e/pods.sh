#!/usr/bin/env bash
# Pods on the e2e node (make test): the cluster of test/e2e/cluster.sh runs real
# workloads from the images of `make image`.
#
#   test/e2e/pods.sh
#
# 1. A Deployment of the echo image (2 replicas) becomes Ready through the
#    kubelet's readiness probe; its Service gets an EndpointSlice with both pods
#    ready; an HTTP request from the host to each pod IP answers from that pod, and
#    one to the Service's ClusterIP (kube-proxy) from one of them.
# 2. The Ferrule image as a pod of two containers, as the README lays it out
#    without the chart: `ferrule run --nginx-supervisor` with in-cluster config
#    (a projected ServiceAccount token mounted into its container alone,
#    KUBERNETES_SERVICE_HOST=10.96.0.1 through kube-proxy) and RBAC, and
#    `ferrule nginx-supervisor` running NGINX beside it, listening on 80
#    (net.ipv4.ip_unprivileged_port_start=0); both non-root, read-only root file
#    system, every capability dropped. It becomes Ready, and an Ingress routes a
#    request sent from the host to the Ferrule pod's IP, and one to its Service's
#    ClusterIP, to an echo pod. Then the Ingress's status, written by Ferrule
#    through the API, names the address it was given, NGINX's access log is in
#    the nginx container's log, and that container has no token.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
OUT=$ROOT/target/image
CLUSTER=$HERE/cluster.sh
NS=ferrule-pods-$$
TIMEOUT=${FERRULE_E2E_POD_TIMEOUT:-120}

log() { printf '[pods-test] %s\n' "$*" >&2; }
fail() {
    printf '[pods-test] FAIL: %s\n' "$*" >&2
    if [[ -n ${KUBECONFIG:-} ]]; then
        kubectl -n "$NS" get all,endpointslices -o wide >&2 2>&1 || true
        kubectl -n "$NS" get events --sort-by=.lastTimestamp 2>&1 | tail -n 20 >&2 || true
    fi
    exit 1
}

for f in ferrule echo pause; do
    [[ -s $OUT/$f.oci.tar ]] || fail "no $OUT/$f.oci.tar: run 'make image' first"
done

"$CLUSTER" up
"$CLUSTER" import "$OUT/pause.oci.tar=ferrule.local/pause:dev" \
    "$OUT/echo.oci.tar=ferrule.local/echo:dev" "$OUT/ferrule.oci.tar=ferrule.local/ferrule:dev"
eval "$("$CLUSTER" env)"
kubectl() { "$FERRULE_E2E_KUBECTL" "$@"; }

cleanup() {
    kubectl delete --ignore-not-found --wait=false clusterrolebinding "$NS" >/dev/null 2>&1 || true
    kubectl delete --ignore-not-found --wait=false clusterrole "$NS" >/dev/null 2>&1 || true
    kubectl delete --ignore-not-found --wait=false ingressclass ferrule-pods-test >/dev/null 2>&1 || true
    kubectl delete --ignore-not-found --wait=false namespace "$NS" >/dev/null 2>&1 || true
}
trap cleanup EXIT

t0=$SECONDS
kubectl create namespace "$NS" >/dev/null
# The controller-manager gives every namespace its default ServiceAccount; the
# ServiceAccount admission plugin refuses pods until it exists.
deadline=$((SECONDS + 30))
until kubectl -n "$NS" get serviceaccount default >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "no default ServiceAccount in $NS after 30 s (kube-controller-manager)"
    sleep 0.2
done

# ---------------------------------------------------------------------------
# 1. echo
# ---------------------------------------------------------------------------
kubectl -n "$NS" apply -f - >/dev/null <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo}
spec:
  replicas: 2
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 1
      securityContext:
        runAsNonRoot: true
        runAsUser: 65534
        seccompProfile: {type: RuntimeDefault}
      containers:
      - name: echo
        image: ferrule.local/echo:dev
        imagePullPolicy: Never
        env:
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        ports: [{name: http, containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /healthz, port: http}
          periodSeconds: 1
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
---
apiVersion: v1
kind: Service
metadata: {name: echo}
spec:
  selector: {app: echo}
  ports: [{name: http, port: 80, targetPort: http}]
EOF
kubectl -n "$NS" rollout status deployment/echo --timeout="${TIMEOUT}s" >/dev/null ||
    fail "deployment echo did not become Ready in $TIMEOUT s"
log "echo: 2/2 Ready after $((SECONDS - t0)) s"

# Pod name -> IP, and the Service's EndpointSlices (the controller-manager's).
mapfile -t pods < <(kubectl -n "$NS" get pods -l app=echo \
    -o 'jsonpath={range .items[*]}{.metadata.name}={.status.podIP}{"\n"}{end}')
((${#pods[@]} == 2)) || fail "want 2 echo pods, got: ${pods[*]}"
slice_ready() {
    local want got
    want=$(printf '%s\n' "${pods[@]#*=}" | sort | xargs)
    got=$(kubectl -n "$NS" get endpointslices -l kubernetes.io/service-name=echo \
        -o 'jsonpath={range .items[*].endpoints[?(@.conditions.ready==true)]}{.addresses[0]}{"\n"}{end}' |
        sort | xargs)
    [[ $got == "$want" ]]
}
deadline=$((SECONDS + 30))
until slice_ready; do
    ((SECONDS < deadline)) || fail "the EndpointSlices of Service echo do not list ${pods[*]#*=} as ready"
    sleep 0.2
done
for p in "${pods[@]}"; do
    name=${p%%=*} ip=${p#*=}
    [[ $ip == 10.244.0.* ]] || fail "pod $name has IP '$ip', not in the pod CIDR 10.244.0.0/24"
    body=$(curl -sS --max-time 5 "http://$ip:8080/hello") || fail "no answer from pod $name at $ip:8080"
    [[ $body == *"\"pod\":\"$name\""* ]] || fail "pod IP $ip answered as another pod: $body"
done
cluster_ip=$(kubectl -n "$NS" get service echo -o 'jsonpath={.spec.clusterIP}')
# kube-proxy programs the Service within its sync of a moment ago.
deadline=$((SECONDS + 20))
until body=$(curl -sS --max-time 2 "http://$cluster_ip/" 2>&1) && [[ $body == *'"pod":"echo-'* ]]; do
    ((SECONDS < deadline)) || fail "no answer from Service echo at $cluster_ip:80 through kube-proxy in 20 s: $body"
    sleep 0.3
done
log "echo: EndpointSlice ready, each pod IP answers as its pod, ClusterIP $cluster_ip answers"

# ---------------------------------------------------------------------------
# 2. ferrule, in-cluster
# ---------------------------------------------------------------------------
kubectl apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: $NS}
rules:
- apiGroups: [networking.k8s.io]
  resources: [ingresses, ingressclasses]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [ingresses/status]
  verbs: [get, update, patch]
- apiGroups: [""]
  resources: [services, secrets, configmaps]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: $NS}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: $NS}
subjects: [{kind: ServiceAccount, name: ferrule, namespace: $NS}]
EOF
kubectl -n "$NS" apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: ServiceAccount
metadata: {name: ferrule}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: ferrule-pods-test}
spec: {controller: ferrule.dev/pods-test}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: echo}
spec:
  ingressClassName: ferrule-pods-test
  rules:
  - host: echo.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: echo, port: {name: http}}}}
---
apiVersion: v1
kind: Service
metadata: {name: ferrule}
spec:
  selector: {app: ferrule}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ferrule}
spec:
  replicas: 1
  selector: {matchLabels: {app: ferrule}}
  template:
    metadata: {labels: {app: ferrule}}
    spec:
      serviceAccountName: ferrule
      terminationGracePeriodSeconds: 5
      securityContext:
        runAsNonRoot: true
        runAsUser: 101
        runAsGroup: 101
        fsGroup: 101
        seccompProfile: {type: RuntimeDefault}
        # NGINX binds 80 and 443 as uid 101 without any capability.
        sysctls: [{name: net.ipv4.ip_unprivileged_port_start, value: "0"}]
      # The token reads Secrets: the controller's container alone mounts it.
      automountServiceAccountToken: false
      containers:
      - name: controller
        image: ferrule.local/ferrule:dev
        imagePullPolicy: Never
        args:
        - run
        - --nginx-log-stdio
        - --nginx-supervisor=/var/lib/ferrule/supervisor.sock
        - --controller-class=ferrule.dev/pods-test
        - --ingress-class=ferrule-pods-test
        - --publish-status-address=10.9.8.7
        env:
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - name: POD_NAMESPACE
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        ports:
        - {name: status, containerPort: 10254}
        readinessProbe:
          httpGet: {path: /readyz, port: status}
          periodSeconds: 1
        livenessProbe:
          httpGet: {path: /healthz, port: status}
          periodSeconds: 5
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        volumeMounts:
        - {name: shared, mountPath: /var/lib/ferrule}
        - {name: tmp, mountPath: /tmp}
        - {name: token, mountPath: /var/run/secrets/kubernetes.io/serviceaccount, readOnly: true}
      - name: nginx
        image: ferrule.local/ferrule:dev
        imagePullPolicy: Never
        args: [nginx-supervisor, --socket=/var/lib/ferrule/supervisor.sock]
        ports:
        - {name: http, containerPort: 80}
        - {name: https, containerPort: 443}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        volumeMounts:
        - {name: shared, mountPath: /var/lib/ferrule}
      volumes:
      - {name: shared, emptyDir: {}}
      - {name: tmp, emptyDir: {}}
      - name: token
        projected:
          sources:
          - serviceAccountToken: {path: token}
          - configMap: {name: kube-root-ca.crt, items: [{key: ca.crt, path: ca.crt}]}
          - downwardAPI: {items: [{path: namespace, fieldRef: {fieldPath: metadata.namespace}}]}
EOF
if ! kubectl -n "$NS" rollout status deployment/ferrule --timeout="${TIMEOUT}s" >/dev/null; then
    kubectl -n "$NS" logs deployment/ferrule -c controller --tail=40 >&2 || true
    kubectl -n "$NS" logs deployment/ferrule -c nginx --tail=20 >&2 || true
    fail "deployment ferrule did not become Ready in $TIMEOUT s"
fi
fpod=$(kubectl -n "$NS" get pods -l app=ferrule -o 'jsonpath={.items[0].metadata.name}={.items[0].status.podIP}')
log "ferrule: Ready after $((SECONDS - t0)) s (pod ${fpod%%=*}, IP ${fpod#*=})"
body=$(curl -sS --max-time 5 -H 'Host: echo.test' "http://${fpod#*=}/through-ferrule") ||
    fail "no answer from the ferrule pod at ${fpod#*=}:80"
[[ $body == *'"pod":"echo-'* && $body == *'"path":"/through-ferrule"'* ]] ||
    fail "the ferrule pod did not route echo.test to an echo pod: $body"
# And through the ferrule Service's ClusterIP (kube-proxy), as a client in the
# cluster would come.
fsvc=$(kubectl -n "$NS" get service ferrule -o 'jsonpath={.spec.clusterIP}')
deadline=$((SECONDS + 20))
until body=$(curl -sS --max-time 2 -H 'Host: echo.test' "http://$fsvc/via-service" 2>&1) &&
    [[ $body == *'"pod":"echo-'* ]]; do
    ((SECONDS < deadline)) || fail "no echo answer through Service ferrule ($fsvc:80) in 20 s: $body"
    sleep 0.3
done
# Ferrule wrote the Ingress status through the API, with its ServiceAccount.
deadline=$((SECONDS + 30))
until [[ $(kubectl -n "$NS" get ingress echo -o 'jsonpath={.status.loadBalancer.ingress[0].ip}') == 10.9.8.7 ]]; do
    ((SECONDS < deadline)) || fail "the ferrule pod did not publish 10.9.8.7 on Ingress echo's status"
    sleep 0.3
done
# The access log is buffered (access-log-params): written within a second.
deadline=$((SECONDS + 10))
until kubectl -n "$NS" logs "${fpod%%=*}" -c nginx | grep -q '"GET /through-ferrule HTTP/1.1" 200'; do
    ((SECONDS < deadline)) || fail "no NGINX access log line in the nginx container's log"
    sleep 0.5
done
# The token is the controller container's alone.
token=/var/run/secrets/kubernetes.io/serviceaccount/token
kubectl -n "$NS" exec "${fpod%%=*}" -c controller -- test -s "$token" ||
    fail "the controller's container has no token at $token"
kubectl -n "$NS" exec "${fpod%%=*}" -c nginx -- sh -c "test ! -e $token && test ! -e /var/run/secrets" ||
    fail "the nginx container has a token"
log "ferrule: echo.test via pod ${fpod#*=}:80 and Service $fsvc:80 answered by echo pods, status published, access log in the nginx container's log, no token there"

kubectl delete namespace "$NS" --timeout=60s >/dev/null || fail "namespace $NS not deleted in 60 s"
log "passed in $((SECONDS - t0)) s"
