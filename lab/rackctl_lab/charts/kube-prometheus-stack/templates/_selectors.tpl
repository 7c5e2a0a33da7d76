{{/* A selector of the Prometheus resource: the values' own, or this release's monitors only when the values
leave it nil and say so (the chart's *NilUsesHelmValues). */}}
{{- define "stack.selector" -}}
{{- if and .nilUsesHelm (not .selector) -}}
matchLabels:
  release: {{ .release }}
{{- else -}}
{{ toYaml (.selector | default dict) }}
{{- end -}}
{{- end -}}
