#!/usr/bin/env python3
"""Writes charts/ferrule/values.schema.json from values.yaml.

The schema is strict (no unknown keys) so that a value copied from ingress-nginx's
chart that Ferrule's chart does not have is an error naming it, never silently
ignored. Types are read off values.yaml; the few enumerations and free-form maps
are listed here. Run after changing values.yaml; test/chart/run.sh checks that the
file is current. values.yaml is read through helm (`helm template` of a chart that
prints `toJson .Values`), so nothing beyond helm and python3 is needed.
"""
import json
import pathlib
import sys

import os
import shutil
import subprocess
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
CHART = HERE.parent

# Maps whose keys are the user's (labels, annotations, ConfigMap keys, flags...).
FREE = {
    "commonLabels", "config", "configAnnotations", "extraArgs", "labels", "annotations",
    "podLabels", "podAnnotations", "updateStrategy", "podSecurityContext",
    "containerSecurityContext", "nodeSelector", "affinity", "behavior", "resources",
    "additionalLabels", "namespaceSelector", "objectSelector", "livenessProbe",
    "readinessProbe",
}
ENUMS = {
    "controller.kind": ["Deployment", "DaemonSet"],
    "controller.image.pullPolicy": ["Always", "IfNotPresent", "Never"],
    "controller.service.type": ["ClusterIP", "NodePort", "LoadBalancer"],
    "controller.service.externalTrafficPolicy": ["", "Cluster", "Local"],
    "controller.service.ipFamilyPolicy": ["SingleStack", "PreferDualStack", "RequireDualStack"],
    "controller.metrics.service.type": ["ClusterIP", "NodePort", "LoadBalancer"],
    "controller.admissionWebhooks.failurePolicy": ["Fail", "Ignore"],
    "controller.admissionWebhooks.service.type": ["ClusterIP", "NodePort", "LoadBalancer"],
    "controller.dnsPolicy": ["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"],
}
PORTS = {"http", "https", "port", "servicePort"}
# Maps from a port number to a string (the TCP and UDP services).
PORT_MAPS = {"tcp", "udp"}
# Optional keys not in values.yaml (a PDB's maxUnavailable replaces minAvailable).
EXTRA = {
    "": {"global": {"type": "object"}},  # what a parent chart passes down
    "controller": {"maxUnavailable": {"type": ["integer", "string"]}},
}


def schema(path, key, value):
    dotted = ".".join(path + [key]) if key else ".".join(path)
    if dotted in ENUMS:
        return {"type": "string", "enum": ENUMS[dotted]}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        s = {"type": "integer", "minimum": 0}
        if key in PORTS:
            s.update(minimum=1, maximum=65535)
        return s
    if isinstance(value, str):
        # Node ports and limits may be left empty or set to a number.
        if path and path[-1] in ("nodePorts", "limits"):
            return {"type": ["string", "integer"]}
        return {"type": "string"}
    if isinstance(value, list):
        return {"type": "array"}
    if isinstance(value, dict):
        if dotted in PORT_MAPS:
            return {
                "type": "object",
                "propertyNames": {"pattern": "^[1-9][0-9]{0,4}$"},
                "additionalProperties": {"type": "string"},
            }
        if key in FREE:
            return {"type": "object"}
        sub = path + [key] if key else path
        props = {k: schema(sub, k, v) for k, v in value.items()}
        props.update(EXTRA.get(".".join(sub), {}))
        return {"type": "object", "additionalProperties": False, "properties": props}
    raise SystemExit(f"{dotted}: no schema for {value!r}")


def read_values(helm):
    with tempfile.TemporaryDirectory() as tmp:
        chart = pathlib.Path(tmp) / "values"
        (chart / "templates").mkdir(parents=True)
        (chart / "Chart.yaml").write_text("apiVersion: v2\nname: values\nversion: 0.0.0\n")
        shutil.copy(CHART / "values.yaml", chart / "values.yaml")
        (chart / "templates" / "values.json").write_text("{{ toJson .Values }}\n")
        out = subprocess.run([helm, "template", str(chart)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.split("\n", 2)[2])


def main():
    values = read_values(os.environ.get("HELM", "helm"))
    out = schema([], "", values)
    out = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Ferrule chart values", **out}
    text = json.dumps(out, indent=2) + "\n"
    target = CHART / "values.schema.json"
    if "--check" in sys.argv:
        if target.read_text() != text:
            sys.exit("charts/ferrule/values.schema.json is stale: run charts/ferrule/tests/gen_schema.py")
        return
    target.write_text(text)


main()
