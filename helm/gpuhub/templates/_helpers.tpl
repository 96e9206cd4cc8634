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

{{/* The namespace jobs run in (KubernetesJobs.namespace). */}}
{{- define "gpuhub.jobsNamespace" -}}
{{ .Values.backend.namespace | default .Release.Namespace }}
{{- end }}

{{/* The namespaces the kubernetes backend creates workloads in, one a line:
the jobs' namespace, or with team namespaces "<namespace>-<team>" per team
(as gpuspawner.backends.kubernetes.manifests.namespace_for names them). */}}
{{- define "gpuhub.backendNamespaces" -}}
{{- $ns := include "gpuhub.jobsNamespace" . -}}
{{- if .Values.backend.teams }}
{{- range .Values.backend.teams | uniq }}
{{ printf "%s-%s" $ns (lower .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- else }}
{{ $ns }}
{{- end }}
{{- end }}

{{/* The service's traitlets config: the values' scheduler.config with what the
chart decides (data_dir, backend, and for the kubernetes backend where jobs
run, which the RBAC follows). */}}
{{- define "gpuhub.serviceSettings" -}}
{{- $config := deepCopy (.Values.scheduler.config | default dict) -}}
{{- $service := get $config "GpuHubService" | default dict -}}
{{- $_ := set $service "data_dir" "/var/lib/gpuhub" -}}
{{- $_ := set $service "backend" .Values.backend.type -}}
{{- $_ := set $config "GpuHubService" $service -}}
{{- if eq .Values.backend.type "kubernetes" -}}
{{- $b := .Values.backend -}}
{{- $hub := (.Values.jupyterhub.custom | default dict).gpuhub | default dict -}}
{{- $jobs := dict "image" (printf "%s:%s" $b.image.repository $b.image.tag) "pools" ($hub.gpuPools | default dict) "priority_class_names" ($b.priorityClassNames | default dict) "kueue" $b.kueue -}}
{{- $jobs = mergeOverwrite $jobs (get $config "KubernetesJobs" | default dict) -}}
{{- $_ := set $jobs "namespace" (include "gpuhub.jobsNamespace" .) -}}
{{- $_ := set $jobs "team_namespaces" (not (empty $b.teams)) -}}
{{- $_ := set $jobs "hub_namespace" .Release.Namespace -}}
{{- $_ := set $config "KubernetesJobs" $jobs -}}
{{- end -}}
{{- toPrettyJson $config -}}
{{- end }}
