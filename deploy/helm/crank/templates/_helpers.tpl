{{/* Names and labels. Every object is named after the release: two releases can share a namespace. */}}
{{- define "crank.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "crank.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: call with (dict "root" $ "component" "gateway"). */}}
{{- define "crank.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "crank.componentLabels" -}}
{{ include "crank.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "crank.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/*
The gateway answers /mcp/v1/... as well as /v1/... (mcp_gateway/app.py MCP_PATH), so the
Ingress publishes it under /mcp without a rewrite, and CRANK_PUBLIC_PATH_PREFIX says the same
to the approval URLs and the console (docs/settings.md).
*/}}
{{- define "crank.mcpPathPrefix" -}}/mcp{{- end -}}

{{/* LISTEN needs a session connection: off behind a transaction-pooling PgBouncer. */}}
{{- define "crank.gatewayListens" -}}
{{- if and .Values.pgbouncer.enabled (ne .Values.pgbouncer.poolMode "session") -}}
false
{{- else -}}
{{ .Values.gateway.listen }}
{{- end -}}
{{- end -}}

{{/* Pod and container hardening shared by every Crank pod (the image's uid 10001). */}}
{{- define "crank.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "crank.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/*
The environment of every Crank container. Secrets come only from the Secret, by key.
Call with (dict "root" $ "pooled" true): pooled containers reach PostgreSQL through
PgBouncer when it is enabled; the migration never is.
*/}}
{{- define "crank.env" -}}
{{- $v := .root.Values -}}
- name: CRANK_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $v.secret.name }}
      key: {{ $v.secret.secretKeyKey }}
- name: CRANK_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $v.secret.name }}
      key: {{ if and .pooled $v.pgbouncer.enabled }}{{ $v.pgbouncer.databaseUrlKey }}{{ else }}{{ $v.secret.databaseUrlKey }}{{ end }}
- name: CRANK_HOST
  value: "0.0.0.0"
- name: CRANK_LOG_LEVEL
  value: {{ $v.logLevel | quote }}
- name: CRANK_PUBLIC_PATH_PREFIX
  value: {{ include "crank.mcpPathPrefix" .root | quote }}
{{- with $v.publicUrl }}
- name: CRANK_PUBLIC_URL
  value: {{ . | quote }}
{{- end }}
{{- with $v.allowedOrigins }}
- name: CRANK_ALLOWED_ORIGINS
  value: {{ . | quote }}
{{- end }}
{{- with $v.trustedProxies }}
- name: CRANK_TRUSTED_PROXIES
  value: {{ . | quote }}
{{- end }}
- name: CRANK_CONSOLE_COOKIE_SECURE
  value: {{ $v.consoleCookieSecure | quote }}
{{- with $v.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* /tmp is the only writable path (the root filesystem is read-only). */}}
{{- define "crank.tmpVolumeMount" -}}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{- define "crank.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end -}}
