{{/* The chart's name. */}}
{{- define "lakestream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name. */}}
{{- define "lakestream.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "lakestream.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "lakestream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one role: pass (dict "root" $ "role" "writer"). */}}
{{- define "lakestream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lakestream.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role }}
{{- end }}

{{- define "lakestream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lakestream.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* One S3 root: pass (dict "s3" .Values.s3 "prefix" "wal"). */}}
{{- define "lakestream.s3Root" -}}
backend = "s3"
bucket = {{ .s3.bucket | quote }}
prefix = {{ .prefix | quote }}
region = {{ .s3.region | quote }}
{{- if .s3.endpoint }}
endpoint = {{ .s3.endpoint | quote }}
{{- end }}
force_path_style = {{ .s3.forcePathStyle }}
conditional_put = {{ .s3.conditionalPut | quote }}
{{- end }}

{{/* The TOML file of one role: pass (dict "root" $ "role" "writer" "spec" .Values.roles.writer). */}}
{{- define "lakestream.config" -}}
{{- $v := .root.Values -}}
# {{ .role }} of release {{ .root.Release.Name }}, rendered by the lakestream Helm chart.

[http]
addr = "0.0.0.0:{{ $v.service.httpPort }}"
{{- if .spec.grpc }}

[grpc]
addr = "0.0.0.0:{{ $v.service.grpcPort }}"
{{- end }}

[roles]
writer = {{ eq .role "writer" }}
reader = {{ eq .role "reader" }}
catalog = {{ .spec.catalog }}
compactor = {{ eq .role "compactor" }}

[metadata]
backend = "oxia"
addresses = [{{ range $i, $a := $v.oxia.addresses }}{{ if $i }}, {{ end }}{{ $a | quote }}{{ end }}]
namespace = {{ $v.oxia.namespace | quote }}
session_timeout = {{ $v.oxia.sessionTimeout | quote }}
request_timeout = {{ $v.oxia.requestTimeout | quote }}
tls = {{ $v.oxia.tls }}

[storage.wal]
{{ include "lakestream.s3Root" (dict "s3" $v.s3 "prefix" $v.s3.walPrefix) }}

[storage.compacted]
{{ include "lakestream.s3Root" (dict "s3" $v.s3 "prefix" $v.s3.compactedPrefix) }}

[listener]
max_connections = {{ int $v.listener.maxConnections }}
header_read_timeout = {{ $v.listener.headerReadTimeout | quote }}
idle_timeout = {{ $v.listener.idleTimeout | quote }}
tls_handshake_timeout = {{ $v.listener.tlsHandshakeTimeout | quote }}
http2_max_concurrent_streams = {{ int $v.listener.http2MaxConcurrentStreams }}
drain_delay = {{ $v.listener.drainDelay | quote }}
{{- with .spec.config }}

{{ . }}
{{- end }}
{{- with $v.extraConfig }}

{{ . }}
{{- end }}
{{- end }}
