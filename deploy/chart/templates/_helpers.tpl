{{- define "styrmin.labels" -}}
app.kubernetes.io/name: styrmin
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "styrmin.selector" -}}
app.kubernetes.io/name: styrmin
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "styrmin.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "styrmin.full" -}}
{{- if eq .Values.mode "full" }}true{{ end -}}
{{- end -}}

{{/* The pod's security: non-root, read-only root filesystem, no privileges. */}}
{{- define "styrmin.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile:
    type: RuntimeDefault
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "styrmin.containerSecurity" -}}
securityContext:
  readOnlyRootFilesystem: true
  allowPrivilegeEscalation: false
  capabilities:
    drop: ["ALL"]
{{- end -}}

{{/* The only writable places: /tmp and /data (see the Dockerfile). */}}
{{- define "styrmin.scratchMounts" -}}
volumeMounts:
  - name: tmp
    mountPath: /tmp
  - name: data
    mountPath: /data
{{- end -}}

{{- define "styrmin.scratchVolumes" -}}
volumes:
  - name: tmp
    emptyDir: {}
  - name: data
    emptyDir: {}
{{- end -}}

{{- define "styrmin.databaseUrl" -}}
- name: STYRMIN_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.existingSecret }}
      key: {{ .Values.database.urlKey }}
{{- end -}}

{{- define "styrmin.secretKey" -}}
- name: STYRMIN_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secretKey.existingSecret }}
      key: {{ .Values.secretKey.key }}
{{- end -}}

{{- define "styrmin.serverUrl" -}}
{{- if .Values.server.publicUrl -}}
{{ .Values.server.publicUrl }}
{{- else -}}
http://{{ .Release.Name }}-server.{{ .Release.Namespace }}.svc:{{ .Values.server.service.port }}
{{- end -}}
{{- end -}}

{{/* What the agent needs in a deployment's namespace: StyrminDeployments, Helm's release Secrets,
what the drivers' charts usually make, Jobs and pod logs for execute_commands, scaling for
stop/start_components. agent.rbac.extraRules adds more. */}}
{{- define "styrmin.agentNamespacedRules" -}}
- apiGroups: ["styrmin.io"]
  resources: ["styrmindeployments"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["secrets", "configmaps", "services", "serviceaccounts", "persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods", "pods/log", "events", "endpoints"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["delete"]
- apiGroups: ["apps"]
  resources: ["deployments", "statefulsets", "daemonsets", "deployments/scale", "statefulsets/scale"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["apps"]
  resources: ["replicasets", "controllerrevisions"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["batch"]
  resources: ["jobs", "cronjobs"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["ingresses", "networkpolicies"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
{{- with .Values.agent.rbac.extraRules }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Where a pod may run and what it is annotated with: the component's own nodeSelector,
tolerations, affinity and podAnnotations, else the chart-wide ones. Call with
(dict "root" $ "component" .Values.server "metricsPort" PORT-or-empty). */}}
{{- define "styrmin.podAnnotations" -}}
{{- $annotations := merge (dict) (.component.podAnnotations | default dict) (.root.Values.podAnnotations | default dict) }}
{{- if and .metricsPort .root.Values.metrics.scrapeAnnotations }}
{{- $_ := set $annotations "prometheus.io/scrape" "true" }}
{{- $_ := set $annotations "prometheus.io/port" (toString .metricsPort) }}
{{- $_ := set $annotations "prometheus.io/path" "/metrics" }}
{{- end }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "styrmin.scheduling" -}}
{{- with (.component.nodeSelector | default .root.Values.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.component.tolerations | default .root.Values.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.component.affinity | default .root.Values.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
