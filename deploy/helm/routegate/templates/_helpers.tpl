{{/* Names and labels. */}}
{{- define "routegate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "routegate.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "routegate.labels" -}}
{{ include "routegate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "routegate.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* True when the replicas share an external Redis. */}}
{{- define "routegate.externalRedis" -}}
{{- if or .Values.redisUrl .Values.redisUrlSecret.name -}}true{{- end -}}
{{- end -}}

{{/* Refuse what would render but not work. */}}
{{- define "routegate.checks" -}}
{{- $most := .Values.replicaCount | int -}}
{{- if .Values.autoscaling.enabled -}}{{- $most = .Values.autoscaling.maxReplicas | int -}}{{- end -}}
{{- if and (gt $most 1) (not (include "routegate.externalRedis" .)) -}}
{{- fail "routegate: more than one replica needs an external Redis (redisUrl or redisUrlSecret): each embedded Redis would keep its own budgets" -}}
{{- end -}}
{{- if le (int .Values.terminationGracePeriodSeconds) (add (int .Values.drain.preStopSeconds) 10 | int) -}}
{{- fail "routegate: terminationGracePeriodSeconds must exceed drain.preStopSeconds + 10 (routegate's own 10 s of graceful shutdown)" -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) -}}
{{- fail "routegate: autoscaling.minReplicas is above maxReplicas" -}}
{{- end -}}
{{- if and .Values.teamsSecret.name .Values.config.teams -}}
{{- fail "routegate: teamsSecret replaces config.teams; set config.teams: null (or remove it)" -}}
{{- end -}}
{{- end -}}

{{/* routegate.yaml as the ConfigMap holds it: data_dir is the volume, Redis comes from env. */}}
{{- define "routegate.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $_ := set $config "data_dir" "/data" -}}
{{- $_ := set $config "redis_url" nil -}}
{{- if .Values.teamsSecret.name -}}{{- $_ := unset $config "teams" -}}{{- end -}}
{{- toYaml $config -}}
{{- end -}}
