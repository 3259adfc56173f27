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

{{/* The operator's permissions, rule by rule (see the chart README): the ClusterRole's with
rbac.scope=cluster, the watched namespace's Role with rbac.scope=namespace. */}}
{{- define "sigx.operatorRules" -}}
# Watch the two kinds it reconciles (it never writes their spec or metadata).
- apiGroups: ["actors.sigx.dev"]
  resources: ["actorclusters", "actorroles"]
  verbs: ["get", "list", "watch"]
# Write their status (server-side apply on the status subresource: a PATCH).
- apiGroups: ["actors.sigx.dev"]
  resources: ["actorclusters/status", "actorroles/status"]
  verbs: ["patch"]
# Set blockOwnerDeletion on owner references to them.
- apiGroups: ["actors.sigx.dev"]
  resources: ["actorclusters/finalizers", "actorroles/finalizers"]
  verbs: ["update"]
# The rendered workload of each role, and the sidecars' identity and Lease-only permissions
# per cluster: read (to refuse an object sigx did not make) and server-side apply (a PATCH,
# which needs create too when the object is new). No update, no delete: the garbage
# collector removes them with their owners.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles"]
  verbs: ["get", "list", "watch", "create", "patch"]
# delete: a role's binding of its own ServiceAccount, once its template stops naming one.
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Generated cluster secrets: created once, their data never rewritten; referenced ones are
# only read. patch: only the generated Secret's ownerReferences (its cluster and the roles that
# co-own it, so a re-created cluster adopts it). No delete: the garbage collector removes it
# once its cluster and its last role are gone.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "watch", "create", "patch"]
# Pods: read (list) while a roll is paced behind another role's, to see that role's pods
# crash-loop or cannot pull their image; never written.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
# Leases: read to aggregate cluster status; the sidecars' verbs because Kubernetes lets the
# operator grant (in the per-cluster Role) only what it holds itself; patch for its own
# leader-election Lease.
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
# Events for notable changes.
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/* rbac.scope, checked: "namespace" needs the one namespace it grants in. */}}
{{- define "sigx.rbacScope" -}}
{{- if and (eq .Values.rbac.scope "namespace") (not .Values.watchNamespace) }}
{{- fail "rbac.scope=namespace grants the operator a Role in one namespace: set watchNamespace to the namespace of your ActorClusters (or use rbac.scope=cluster)" }}
{{- end }}
{{- .Values.rbac.scope }}
{{- end }}
