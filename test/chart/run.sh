#!/usr/bin/env bash
# Chart tests without a cluster: helm lint, the schema is current and refuses what
# the chart does not have, and `helm template` of every value set in
# charts/ferrule/tests/values/ equals its golden file in charts/ferrule/tests/golden/
# (reviewed like code). FERRULE_BLESS=1 rewrites the golden files.
#
# helm: $HELM, else target/e2e/bin/helm (test/e2e/cluster.sh builds it), else PATH.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
CHART=$ROOT/charts/ferrule
TESTS=$CHART/tests
if [[ -z ${HELM:-} ]]; then
    if [[ ! -x $ROOT/target/e2e/bin/helm ]]; then
        "$ROOT/test/e2e/cluster.sh" build >&2
    fi
    HELM=$ROOT/target/e2e/bin/helm
fi
export HELM
fail=0
say() { printf '[chart] %s\n' "$*" >&2; }
bad() { printf '[chart] FAIL: %s\n' "$*" >&2; fail=1; }

# 1. Lint with every value set (the schema is checked too).
for values in "$TESTS"/values/*.yaml; do
    if ! out=$("$HELM" lint --strict "$CHART" -f "$values" 2>&1); then
        bad "helm lint with $(basename "$values"):"$'\n'"$out"
    fi
done

# 2. The schema follows values.yaml.
python3 "$TESTS/gen_schema.py" --check || fail=1

# 3. Values the chart does not have, or cannot take, are refused with their name.
refuse() { # expected-text helm-args...
    local want=$1; shift
    local out
    if out=$("$HELM" template t "$CHART" "$@" 2>&1); then
        bad "helm template $* was accepted"
    elif ! grep -qF -- "$want" <<<"$out"; then
        bad "helm template $*: expected '$want' in:"$'\n'"$out"
    fi
}
refuse "additional properties 'keda' not allowed" --set controller.keda.enabled=true
refuse "value must be one of 'Deployment', 'DaemonSet'" --set controller.kind=StatefulSet
refuse "value must be one of 'Fail', 'Ignore'" --set controller.admissionWebhooks.failurePolicy=Never
refuse "caBundle is required" --set controller.admissionWebhooks.certificate.secretName=mine
refuse "controller.hostNetwork needs controller.containerPort.http" --set controller.hostNetwork=true
refuse "longer than the 15 characters" --set portNamePrefix=cloudlb --set tcp.12345=a/b:1
refuse "controller.networkPolicy.apiServerCIDRs must list" --set controller.networkPolicy.enabled=true
refuse "controller.networkPolicy has no effect on a pod with controller.hostNetwork" \
    --set controller.networkPolicy.enabled=true --set controller.hostNetwork=true \
    --set controller.containerPort.http=8080 --set controller.containerPort.https=8444 \
    --set-json 'controller.networkPolicy.apiServerCIDRs=["10.0.0.0/8"]'

# 4. Golden files. The webhook certificate the chart issues differs at every render;
# the dashboards' JSON is checked against its files in 5, not copied here.
render() { # values-file
    "$HELM" template ferrule "$CHART" --namespace ingress -f "$1" |
        sed -E 's/^(  (ca|tls)\.(crt|key): ).*/\1<issued by the chart>/;
                s/^(      caBundle: ).{200,}$/\1<issued by the chart>/' |
        dashboards mask
}
# The Grafana dashboards' ConfigMaps: `mask` replaces each one's JSON with the name of
# its file; `extract DIR` writes each to DIR/NAME.json instead.
dashboards() { # mask | extract DIR
    awk -v mode="$1" -v dir="${2:-}" '
        function done() {
            if (name == "") return
            if (mode == "mask") printf "    <charts/ferrule/dashboards/%s>\n", name
            else printf "%s", body > (dir "/" name)
            name = ""
        }
        name != "" && /^    / { body = body substr($0, 5) "\n"; next }
        { done() }
        /^  ferrule-[a-z-]+\.json: [|]-$/ {
            name = $1; sub(/^ferrule-/, "", name); sub(/:$/, "", name); body = ""
        }
        { print }
        END { done() }'
}
for values in "$TESTS"/values/*.yaml; do
    name=$(basename "$values" .yaml)
    golden=$TESTS/golden/$name.yaml
    got=$(render "$values") || { bad "helm template with $name.yaml failed"; continue; }
    if [[ ${FERRULE_BLESS:-} == 1 ]]; then
        printf '%s\n' "$got" >"$golden"
        say "blessed $golden"
    elif ! diff -u "$golden" <(printf '%s\n' "$got") >&2; then
        bad "helm template with $name.yaml differs from golden/$name.yaml (FERRULE_BLESS=1 to accept)"
    fi
done
for golden in "$TESTS"/golden/*.yaml; do
    [[ -f $TESTS/values/$(basename "$golden") ]] || bad "golden/$(basename "$golden") has no value set"
done

# 5. The dashboards' ConfigMaps hold the files of charts/ferrule/dashboards verbatim.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$HELM" template ferrule "$CHART" --namespace ingress \
    --set controller.metrics.enabled=true,controller.metrics.dashboards.enabled=true |
    dashboards extract "$tmp" >/dev/null
for json in "$CHART"/dashboards/*.json; do
    if [[ ! -f $tmp/$(basename "$json") ]]; then
        bad "no ConfigMap holds $(basename "$json")"
    elif ! diff -q <(sed -e '$a\' "$json") "$tmp/$(basename "$json")" >/dev/null; then
        bad "the ConfigMap of $(basename "$json") differs from the file"
    fi
done

if ((fail)); then exit 1; fi
say "ok: lint, schema and $(ls "$TESTS"/values/*.yaml | wc -l) golden renders"
