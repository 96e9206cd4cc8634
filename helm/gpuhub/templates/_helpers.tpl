{{/* Labels every GPU Hub resource carries. */}}
{{- define "gpuhub.labels" -}}
app.kubernetes.io/name: gpuhub
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "gpuhub.selectorLabels" -}}
app.kubernetes.io/name: gpuhub
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scheduler
{{- end }}

{{- define "gpuhub.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name }}
{{- else -}}
{{ .Values.serviceAccount.name | default "default" }}
{{- end -}}
{{- end }}

{{/* The namespaces the kubernetes backend creates workloads in, one a line. */}}
{{- define "gpuhub.backendNamespaces" -}}
{{- $namespaces := .Values.backend.namespaces | default (list .Release.Namespace) -}}
{{- range $namespaces | uniq }}
{{ . }}
{{- end }}
{{- end }}

{{/* The service's traitlets config: the values' scheduler.config with what the
chart decides (data_dir, backend). */}}
{{- define "gpuhub.serviceSettings" -}}
{{- $config := deepCopy (.Values.scheduler.config | default dict) -}}
{{- $service := get $config "GpuHubService" | default dict -}}
{{- $_ := set $service "data_dir" "/var/lib/gpuhub" -}}
{{- $_ := set $service "backend" .Values.backend.type -}}
{{- $_ := set $config "GpuHubService" $service -}}
{{- toPrettyJson $config -}}
{{- end }}
