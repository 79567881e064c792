{{/* The controller pod, shared by the Deployment and the DaemonSet. */}}
{{- define "ferrule.controller.args" -}}
- run
- --controller-class={{ .Values.controller.ingressClassResource.controllerValue }}
- --ingress-class={{ .Values.controller.ingressClass }}
- --configmap={{ include "ferrule.namespace" . }}/{{ include "ferrule.controller.fullname" . }}
- --election-id={{ include "ferrule.controller.electionID" . }}
{{- if .Values.controller.publishService.enabled }}
- --publish-service={{ default (printf "%s/%s" (include "ferrule.namespace" .) (include "ferrule.controller.fullname" .)) .Values.controller.publishService.pathOverride }}
{{- end }}
{{- if .Values.controller.scope.enabled }}
- --watch-namespace={{ include "ferrule.scopeNamespace" . }}
{{- end }}
{{- if .Values.controller.watchIngressWithoutClass }}
- --watch-ingress-without-class
{{- end }}
{{- if .Values.controller.allowSnippetAnnotations }}
- --allow-snippet-annotations
{{- end }}
- --http-port={{ .Values.controller.containerPort.http }}
- --https-port={{ .Values.controller.containerPort.https }}
- --status-port={{ .Values.controller.metrics.port }}
- --nginx-prefix=/var/lib/ferrule/nginx
- --nginx-log-stdio
- --nginx-supervisor={{ include "ferrule.supervisorSocket" . }}
{{- /* Every tenant's state, on the controller's own /tmp: not in the emptyDir NGINX shares. */}}
- --status-socket=/tmp/status.sock
- --shutdown-grace-period={{ .Values.controller.shutdownGracePeriod }}
{{- if .Values.controller.admissionWebhooks.enabled }}
- --admission-port={{ .Values.controller.admissionWebhooks.port }}
{{- if eq (include "ferrule.admission.issuer" .) "controller" }}
- --admission-secret={{ include "ferrule.namespace" . }}/{{ include "ferrule.admission.secretName" . }}
- --admission-webhook-configuration={{ include "ferrule.admission.configurationName" . }}
- --admission-certificate-lifetime={{ .Values.controller.admissionWebhooks.certificate.lifetime }}
- --admission-certificate-dir=/tmp/admission
{{- else }}
- --admission-cert=/etc/ferrule/admission/tls.crt
- --admission-key=/etc/ferrule/admission/tls.key
{{- end }}
{{- if .Values.controller.admissionWebhooks.strictTls }}
- --admission-strict-tls
{{- end }}
{{- end }}
{{- range $value, $flag := dict "ingressBytes" "max-ingress-bytes" "annotationValueBytes" "max-annotation-value-bytes" "pathsPerIngress" "max-paths-per-ingress" "regexPathsPerIngress" "max-regex-paths-per-ingress" "regexPathsPerHost" "max-regex-paths-per-host" "hostsPerIngress" "max-hosts-per-ingress" }}
{{- with index $.Values.controller.limits $value }}
- --{{ $flag }}={{ . }}
{{- end }}
{{- end }}
{{- if .Values.tcp }}
- --tcp-services-configmap={{ include "ferrule.namespace" . }}/{{ include "ferrule.controller.fullname" . }}-tcp
{{- end }}
{{- if .Values.udp }}
- --udp-services-configmap={{ include "ferrule.namespace" . }}/{{ include "ferrule.controller.fullname" . }}-udp
{{- end }}
{{- range $key, $value := .Values.controller.extraArgs }}
{{- if or (kindIs "invalid" $value) (eq (toString $value) "") }}
- --{{ $key }}
{{- else }}
- --{{ $key }}={{ $value }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The unix socket on which the NGINX container's supervisor takes the controller's
requests, in the emptyDir both containers mount at /var/lib/ferrule.
*/}}
{{- define "ferrule.supervisorSocket" -}}
/var/lib/ferrule/supervisor.sock
{{- end -}}

{{/* The security context of both containers. */}}
{{- define "ferrule.containerSecurityContext" -}}
{{- if .Values.controller.containerSecurityContext -}}
{{- toYaml .Values.controller.containerSecurityContext -}}
{{- else -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
{{- end -}}
{{- end -}}

{{- define "ferrule.controller.podTemplate" -}}
{{- if and .Values.controller.hostNetwork (or (lt (int .Values.controller.containerPort.http) 1024) (lt (int .Values.controller.containerPort.https) 1024)) }}
{{- fail "controller.hostNetwork needs controller.containerPort.http and .https above 1023: the pod cannot lower the node's unprivileged port start, and the image grants no capability. For the node's ports 80 and 443 use controller.hostPort.enabled instead" }}
{{- end }}
metadata:
  labels:
    {{- include "ferrule.labels" . | nindent 4 }}
    app.kubernetes.io/component: controller
    {{- with .Values.controller.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    # `kubectl logs` without -c: the controller's log (NGINX's is -c nginx).
    kubectl.kubernetes.io/default-container: controller
    # Ferrule reads its ConfigMap live, but a new one rolls the pods too: a pod that
    # starts with a ConfigMap it rejects stays not Ready, so a broken one stalls the
    # rollout while the old pods keep serving the last good one.
    checksum/config: {{ toJson .Values.controller.config | sha256sum }}
    {{- with .Values.controller.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "ferrule.serviceAccountName" . }}
  # The token reads every Secret: it is mounted into the controller's container
  # alone (the kube-api-access volume below), never into NGINX's.
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ .Values.controller.terminationGracePeriodSeconds }}
  dnsPolicy: {{ .Values.controller.dnsPolicy }}
  {{- if .Values.controller.hostNetwork }}
  hostNetwork: true
  {{- end }}
  {{- with .Values.controller.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- if .Values.controller.podSecurityContext }}
    {{- toYaml .Values.controller.podSecurityContext | nindent 4 }}
    {{- else }}
    runAsNonRoot: true
    runAsUser: {{ .Values.controller.image.runAsUser }}
    runAsGroup: {{ .Values.controller.image.runAsGroup }}
    fsGroup: {{ .Values.controller.image.runAsGroup }}
    seccompProfile:
      type: RuntimeDefault
    {{- if not .Values.controller.hostNetwork }}
    sysctls:
      # Ports below 1024 without a capability, in the pod's own network namespace.
      - name: net.ipv4.ip_unprivileged_port_start
        value: "0"
    {{- end }}
    {{- end }}
  containers:
    # The controller: the Kubernetes API (with the service-account token), the model,
    # the rendered files, the status port and the webhook. It runs no NGINX: it asks
    # the supervisor in the nginx container, over the shared emptyDir.
    - name: controller
      image: {{ include "ferrule.image" . }}
      imagePullPolicy: {{ .Values.controller.image.pullPolicy }}
      args:
        {{- include "ferrule.controller.args" . | nindent 8 }}
      env:
        - name: POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        - name: POD_NAMESPACE
          valueFrom:
            fieldRef:
              fieldPath: metadata.namespace
        {{- with .Values.controller.extraEnvs }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        - name: {{ .Values.controller.metrics.portName }}
          containerPort: {{ .Values.controller.metrics.port }}
          protocol: TCP
        {{- if .Values.controller.admissionWebhooks.enabled }}
        - name: webhook
          containerPort: {{ .Values.controller.admissionWebhooks.port }}
          protocol: TCP
        {{- end }}
      livenessProbe:
        {{- toYaml .Values.controller.livenessProbe | nindent 8 }}
      readinessProbe:
        {{- toYaml .Values.controller.readinessProbe | nindent 8 }}
      resources:
        {{- toYaml .Values.controller.resources | nindent 8 }}
      securityContext:
        {{- include "ferrule.containerSecurityContext" . | nindent 8 }}
      volumeMounts:
        # NGINX's prefix (configuration, certificates, sockets, temporary files) and
        # the supervisor's socket, shared with the nginx container.
        - name: nginx
          mountPath: /var/lib/ferrule
        # Its own temporary files and the webhook's certificate: not shared.
        - name: tmp
          mountPath: /tmp
        # The service-account token, its CA and namespace, where the in-cluster
        # configuration looks for them: in this container only.
        - name: kube-api-access
          mountPath: /var/run/secrets/kubernetes.io/serviceaccount
          readOnly: true
        {{- if and .Values.controller.admissionWebhooks.enabled (ne (include "ferrule.admission.issuer" .) "controller") }}
        - name: admission
          mountPath: /etc/ferrule/admission
          readOnly: true
        {{- end }}
        {{- with .Values.controller.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    # NGINX and its workers, under `ferrule nginx-supervisor` (which starts, tests,
    # reloads and stops them as the controller asks): the traffic's ports, no
    # credentials.
    - name: nginx
      image: {{ include "ferrule.image" . }}
      imagePullPolicy: {{ .Values.controller.image.pullPolicy }}
      args:
        {{- with index .Values.controller.extraArgs "log-format" }}
        - --log-format={{ . }}
        {{- end }}
        - nginx-supervisor
        - --socket={{ include "ferrule.supervisorSocket" . }}
      ports:
        - name: http
          containerPort: {{ .Values.controller.containerPort.http }}
          protocol: TCP
          {{- if .Values.controller.hostPort.enabled }}
          hostPort: {{ .Values.controller.hostPort.ports.http }}
          {{- end }}
        - name: https
          containerPort: {{ .Values.controller.containerPort.https }}
          protocol: TCP
          {{- if .Values.controller.hostPort.enabled }}
          hostPort: {{ .Values.controller.hostPort.ports.https }}
          {{- end }}
        {{- range $port, $_ := .Values.tcp }}
        - name: {{ include "ferrule.streamPortName" (list $ $port "tcp") }}
          containerPort: {{ $port }}
          protocol: TCP
        {{- end }}
        {{- range $port, $_ := .Values.udp }}
        - name: {{ include "ferrule.streamPortName" (list $ $port "udp") }}
          containerPort: {{ $port }}
          protocol: UDP
        {{- end }}
      resources:
        {{- toYaml .Values.controller.nginx.resources | nindent 8 }}
      securityContext:
        {{- include "ferrule.containerSecurityContext" . | nindent 8 }}
      volumeMounts:
        - name: nginx
          mountPath: /var/lib/ferrule
  volumes:
    - name: nginx
      emptyDir: {}
    - name: tmp
      emptyDir: {}
    # What automountServiceAccountToken would mount, for the controller alone.
    - name: kube-api-access
      projected:
        sources:
          - serviceAccountToken:
              path: token
              expirationSeconds: 3607
          - configMap:
              name: kube-root-ca.crt
              items:
                - key: ca.crt
                  path: ca.crt
          - downwardAPI:
              items:
                - path: namespace
                  fieldRef:
                    apiVersion: v1
                    fieldPath: metadata.namespace
    {{- if and .Values.controller.admissionWebhooks.enabled (ne (include "ferrule.admission.issuer" .) "controller") }}
    - name: admission
      secret:
        secretName: {{ include "ferrule.admission.secretName" . }}
    {{- end }}
    {{- with .Values.controller.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.controller.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.controller.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.controller.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.controller.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
