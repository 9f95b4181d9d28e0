{{/* <release>-operator: the Deployment, ServiceAccount, ClusterRole and the Lease share it. */}}
{{- define "peerload.fullname" -}}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "peerload.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "peerload.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The same selector labels as deploy/base, plus the release (two releases may share a namespace). */}}
{{- define "peerload.selectorLabels" -}}
app.kubernetes.io/name: peerload
app.kubernetes.io/component: operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "peerload.labels" -}}
{{ include "peerload.selectorLabels" . }}
app.kubernetes.io/part-of: peerload
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The operator's permissions, verb by verb (the same rules as deploy/base/rbac.yaml). */}}
{{- define "peerload.rules" -}}
- apiGroups: [peerload.io]
  resources: [modelpreheats]
  verbs: [get, list, watch, create, update, patch]
- apiGroups: [peerload.io]
  resources: [servedmodels]
  verbs: [get, list, watch, patch]
- apiGroups: [peerload.io]
  resources: [modelpreheats/status, servedmodels/status]
  verbs: [patch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
- apiGroups: ['']
  resources: [secrets]
  verbs: [get]
- apiGroups: ['']
  resources: [nodes]
  verbs: [get]
- apiGroups: [peerload.io]
  resources: [clustermanagers]
  verbs: [get]
- apiGroups: ['']
  resources: [namespaces]
  verbs: [get]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}
