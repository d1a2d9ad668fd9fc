{{/* The labels every kq serve object carries (the same as manifests/webhook/deployment.yaml). */}}
{{- define "kube-queue.serverLabels" -}}
app.kubernetes.io/name: kube-queue
app.kubernetes.io/component: server
{{- end -}}

{{/* The image reference of kq serve and kq extender. */}}
{{- define "kube-queue.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{/* "-v" when logLevel is debug; fails on a level kq does not have. */}}
{{- define "kube-queue.verboseArg" -}}
{{- $level := lower (toString .Values.logLevel) -}}
{{- if eq $level "debug" -}}
- -v
{{- else if ne $level "info" -}}
{{- fail (printf "logLevel must be info or debug, not %q" (toString .Values.logLevel)) -}}
{{- end -}}
{{- end -}}
