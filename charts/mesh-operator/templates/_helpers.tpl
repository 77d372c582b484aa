{{- /*
The chart's name in object names: nameOverride, or the chart's own. It never
changes the Pod selector labels (app.kubernetes.io/name stays the chart's
name: fleet NetworkPolicies admit the operator by it, and a Deployment's
selector cannot change after install).
*/ -}}
{{- define "mesh-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /*
The prefix of every object's name: fullnameOverride, or RELEASE-NAME (just
RELEASE when it already contains NAME, so the default release
"mesh-operator" names everything "mesh-operator", as the docs and the e2e harness expect).
*/ -}}
{{- define "mesh-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "mesh-operator.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "mesh-operator.selectorLabels" -}}
app.kubernetes.io/name: mesh-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "mesh-operator.labels" -}}
{{ include "mesh-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "mesh-operator.serviceAccountName" -}}
{{- default (include "mesh-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- /*
Labels or annotations with every key and value quoted: `--set podLabels.x=true`
gives a boolean, which the API rejects as a label value.
*/ -}}
{{- define "mesh-operator.quotedMap" -}}
{{- $lines := list -}}
{{- range $k, $v := . -}}
{{- $lines = append $lines (printf "%s: %s" ($k | quote) ($v | toString | quote)) -}}
{{- end -}}
{{- join "\n" $lines -}}
{{- end -}}

{{- /*
Documentation links in NOTES point at the repository at this chart's release
tag (mesh-operator/vVERSION), so what a user reads matches what is installed.
*/ -}}
{{- define "mesh-operator.docs" -}}
https://github.com/ericdev/fleetmesh/blob/mesh-operator/v{{ .Chart.Version }}
{{- end -}}

{{- define "mesh-operator.raw" -}}
https://raw.githubusercontent.com/ericdev/fleetmesh/mesh-operator/v{{ .Chart.Version }}
{{- end -}}
