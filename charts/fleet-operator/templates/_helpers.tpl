{{- /*
The chart's name in object names: nameOverride, or the chart's own. It never
changes the Pod selector labels (app.kubernetes.io/name stays the chart's
name: fleet NetworkPolicies admit the operator by it, and a Deployment's
selector cannot change after install).
*/ -}}
{{- define "fleet-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /*
The prefix of every object's name: fullnameOverride, or RELEASE-NAME (just
RELEASE when it already contains NAME, so the default release
"fleet-operator" names everything "fleet-operator", as the docs and the e2e harness expect).
*/ -}}
{{- define "fleet-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "fleet-operator.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "fleet-operator.selectorLabels" -}}
app.kubernetes.io/name: fleet-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fleet-operator.labels" -}}
{{ include "fleet-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "fleet-operator.serviceAccountName" -}}
{{- default (include "fleet-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- /*
Labels or annotations with every key and value quoted: `--set podLabels.x=true`
gives a boolean, which the API rejects as a label value.
*/ -}}
{{- define "fleet-operator.quotedMap" -}}
{{- $lines := list -}}
{{- range $k, $v := . -}}
{{- $lines = append $lines (printf "%s: %s" ($k | quote) ($v | toString | quote)) -}}
{{- end -}}
{{- join "\n" $lines -}}
{{- end -}}

{{- /*
Documentation links in NOTES point at the repository at this chart's release
tag (fleet-operator/vVERSION), so what a user reads matches what is installed.
*/ -}}
{{- define "fleet-operator.docs" -}}
https://github.com/ericdev/fleetmesh/blob/fleet-operator/v{{ .Chart.Version }}
{{- end -}}

{{- define "fleet-operator.raw" -}}
https://raw.githubusercontent.com/ericdev/fleetmesh/fleet-operator/v{{ .Chart.Version }}
{{- end -}}
