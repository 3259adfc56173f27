{{/* Chart name, truncated to fit a label value. */}}
{{- define "sigx.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified name of the operator's objects. */}}
{{- define "sigx.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s-operator" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Prefix of the release's objects that concern the sidecars, not the operator (PodMonitor,
FlowSchema): fullnameOverride, else the full name without "-operator". */}}
{{- define "sigx.prefix" -}}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Labels on every object of the release, but the component. */}}
{{- define "sigx.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "sigx.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sigx
{{- end }}

{{/* Labels on the operator's objects. */}}
{{- define "sigx.labels" -}}
{{ include "sigx.commonLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels on the objects that concern the sidecars the operator renders (PodMonitor, their
NetworkPolicies, the FlowSchema of their Leases). */}}
{{- define "sigx.sidecarLabels" -}}
{{ include "sigx.commonLabels" . }}
app.kubernetes.io/component: sidecar
{{- end }}

{{/* Labels that select the operator's pods. */}}
{{- define "sigx.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sigx.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The operator's ServiceAccount name. */}}
{{- define "sigx.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sigx.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}
