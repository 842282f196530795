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

{{/* Whether the chart creates the credentials Secret: no existingSecret, and at least one
     provider's credentials given (an empty Secret would only hide the missing one). */}}
{{- define "nodewright.createsSecret" -}}
{{- if and (not .Values.credentials.existingSecret) (or .Values.credentials.openstack .Values.credentials.proxmox .Values.credentials.kamatera) -}}
true
{{- end -}}
{{- end -}}
