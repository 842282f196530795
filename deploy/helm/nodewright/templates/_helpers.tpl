{{/* Labels on every object. */}}
{{- define "nodewright.labels" -}}
app.kubernetes.io/name: nodewright
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* Labels selecting the pods of this release. */}}
{{- define "nodewright.selectorLabels" -}}
app.kubernetes.io/name: nodewright
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The Secret holding the credentials files. */}}
{{- define "nodewright.credentialsSecret" -}}
{{- .Values.credentials.existingSecret | default (printf "%s-credentials" .Release.Name) -}}
{{- end }}
