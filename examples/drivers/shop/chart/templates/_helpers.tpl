{{- define "shop.labels" -}}
app.kubernetes.io/name: shop
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "shop.database" -}}
{{ .Values.database | default (printf "%s-%s.sqlite3" .Release.Namespace .Release.Name) }}
{{- end }}

{{- define "shop.env" -}}
- name: SHOP_DATABASE
  value: {{ include "shop.database" . | quote }}
- name: SHOP_VERSION
  value: {{ .Chart.AppVersion | quote }}
{{- end }}
