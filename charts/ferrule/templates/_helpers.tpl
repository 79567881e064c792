{{/* Names: DNS labels of at most 63 bytes. */}}
{{- define "ferrule.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ferrule.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ferrule.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The controller's Deployment/DaemonSet, Service and ConfigMap share this name. */}}
{{- define "ferrule.controller.fullname" -}}
{{- printf "%s-%s" (include "ferrule.fullname" .) .Values.controller.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ferrule.controller.electionID" -}}
{{- default (printf "%s-leader" (include "ferrule.fullname" .)) .Values.controller.electionID -}}
{{- end -}}

{{- define "ferrule.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ferrule.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespace watched in a namespace-scoped install. */}}
{{- define "ferrule.scopeNamespace" -}}
{{- default (include "ferrule.namespace" .) .Values.controller.scope.namespace -}}
{{- end -}}

{{- define "ferrule.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "ferrule.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: {{ include "ferrule.name" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "ferrule.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ferrule.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ferrule.image" -}}
{{- $i := .Values.controller.image -}}
{{- if $i.digest -}}
{{- printf "%s@%s" $i.repository $i.digest -}}
{{- else -}}
{{- printf "%s:%s" $i.repository $i.tag -}}
{{- end -}}
{{- end -}}

{{/* Where the webhook's certificate lives. */}}
{{- define "ferrule.admission.secretName" -}}
{{- default (printf "%s-admission" (include "ferrule.fullname" .)) .Values.controller.admissionWebhooks.certificate.secretName -}}
{{- end -}}

{{/*
Who issues the webhook's certificate: "secret" (the user's Secret), "certManager", or
"controller" (Ferrule keeps it in a Secret of its own and sets the caBundle).
*/}}
{{- define "ferrule.admission.issuer" -}}
{{- $wh := .Values.controller.admissionWebhooks -}}
{{- if $wh.certificate.secretName -}}secret
{{- else if $wh.certManager.enabled -}}certManager
{{- else -}}controller
{{- end -}}
{{- end -}}

{{- define "ferrule.admission.configurationName" -}}
{{- printf "%s-admission" (include "ferrule.fullname" .) -}}
{{- end -}}

{{- define "ferrule.admission.serviceName" -}}
{{- printf "%s-admission" (include "ferrule.controller.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The name of a TCP/UDP service port on the pod and the Service: `PORT-tcp`, or
`PREFIX-PORT-tcp` with portNamePrefix (some cloud load balancers want a pattern).
Kubernetes allows 15 characters. Call with (list $ port "tcp").
*/}}
{{- define "ferrule.streamPortName" -}}
{{- $root := index . 0 -}}
{{- $name := printf "%v-%s" (index . 1) (index . 2) -}}
{{- with $root.Values.portNamePrefix }}{{ $name = printf "%s-%s" . $name }}{{ end -}}
{{- if gt (len $name) 15 -}}
{{- fail (printf "portNamePrefix: the port name %q is longer than the 15 characters Kubernetes allows" $name) -}}
{{- end -}}
{{- $name -}}
{{- end -}}
