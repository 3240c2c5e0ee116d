{{/*
Labels of every object: the two k8s/ sets on everything (app.kubernetes.io/name where the object
belongs to one component, app.kubernetes.io/part-of), plus Helm's own. Selectors and pod
templates carry only the first two, so an upgrade never changes an immutable selector.
Call with (dict "root" $ "name" "<component>"); "name" may be empty.
*/}}
{{- define "hostaffinity.labels" -}}
{{- with .name -}}
app.kubernetes.io/name: {{ . }}
{{ end -}}
app.kubernetes.io/part-of: hostaffinity
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end }}

{{/* The labels pods and selectors carry. Call with the component name. */}}
{{- define "hostaffinity.podLabels" -}}
app.kubernetes.io/name: {{ . }}
app.kubernetes.io/part-of: hostaffinity
{{- end }}

{{/* A service's image. Call with (dict "root" $ "name" "<service>"). */}}
{{- define "hostaffinity.image" -}}
{{ printf "%s/%s:%s" .root.Values.image.registry .name (.root.Values.image.tag | default .root.Chart.AppVersion) }}
{{- end }}

{{/* The pod security context of every hostaffinity pod (restricted Pod Security Standard). */}}
{{- define "hostaffinity.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The container security context of every container. */}}
{{- define "hostaffinity.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* A client's NATS credentials: its own nkey seed and the servers' CA, never their key. */}}
{{- define "hostaffinity.natsCredentials" -}}
name: nats-credentials
projected:
  sources:
    - secret:
        name: hostaffinity-nats-identities
        items: [{key: {{ . }}.nk, path: seed.nk}]
    - secret:
        name: hostaffinity-nats-tls
        items: [{key: ca.crt, path: ca.crt}]
{{- end }}

{{/* The vCenter Secret's three keys as the services' environment. */}}
{{- define "hostaffinity.vcenterEnv" -}}
- name: HOSTAFFINITY_VCENTERS__0__HOST
  valueFrom:
    secretKeyRef: {name: {{ .Values.vcenter.secret.name }}, key: host}
- name: HOSTAFFINITY_VCENTERS__0__USERNAME
  valueFrom:
    secretKeyRef: {name: {{ .Values.vcenter.secret.name }}, key: username}
- name: HOSTAFFINITY_VCENTERS__0__PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ .Values.vcenter.secret.name }}, key: password}
# What makes vCenter's certificate trusted: the Secret's ca.crt (mounted) or its thumbprint.
- name: HOSTAFFINITY_VCENTERS__0__CA_FILE
  value: /var/run/hostaffinity/vcenter/ca.crt
- name: HOSTAFFINITY_VCENTERS__0__THUMBPRINT
  valueFrom:
    secretKeyRef: {name: {{ .Values.vcenter.secret.name }}, key: thumbprint, optional: true}
{{- end }}

{{/*
A service: ServiceAccount, Deployment and PodDisruptionBudget, the shape all five share.
Call with a dict:
  root      $
  name      the service (its Deployment, ServiceAccount and container name)
  values    its values section (replicas, resources)
  ports     extra named container ports beside http 8080, as a list of {name, port}
  vcenter   true: the vCenter Secret's keys as environment
  lease     true: the Lease namespace from the downward API
  config    the `config` volume (without its name), as a dict
*/}}
{{- define "hostaffinity.service" -}}
{{- $root := .root -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "hostaffinity.labels" (dict "root" $root "name" .name) | nindent 4 }}
---
# Replicas on different ESXi hosts, else on different nodes: preferred, never required on the
# host label, which only the node-labeller writes (a fresh cluster has none yet).
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "hostaffinity.labels" (dict "root" $root "name" .name) | nindent 4 }}
spec:
  replicas: {{ .values.replicas }}
  selector:
    matchLabels:
      app.kubernetes.io/name: {{ .name }}
  template:
    metadata:
      labels:
        {{- include "hostaffinity.podLabels" .name | nindent 8 }}
      {{- with .checksum }}
      annotations:
        checksum/config: {{ . }}
      {{- end }}
    spec:
      serviceAccountName: {{ .name }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- include "hostaffinity.podSecurityContext" . | nindent 8 }}
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: hostaffinity.io/esxi-host
                labelSelector:
                  matchLabels:
                    app.kubernetes.io/name: {{ .name }}
            - weight: 50
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels:
                    app.kubernetes.io/name: {{ .name }}
      containers:
        - name: {{ .name }}
          image: {{ include "hostaffinity.image" (dict "root" $root "name" .name) }}
          {{- with $root.Values.image.pullPolicy }}
          imagePullPolicy: {{ . }}
          {{- end }}
          args:
            - --config
            - /etc/hostaffinity/shared.yaml
            - --config
            - /etc/hostaffinity/{{ .name }}.yaml
          env:
            - name: HOSTAFFINITY_NATS__IDENTITY
              value: {{ .name }}
            {{- if .vcenter }}
            {{- include "hostaffinity.vcenterEnv" $root | nindent 12 }}
            {{- end }}
            {{- if .lease }}
            - name: HOSTAFFINITY_LEASE__NAMESPACE
              valueFrom:
                fieldRef: {fieldPath: metadata.namespace}
            {{- end }}
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            {{- range .ports }}
            - name: {{ .name }}
              containerPort: {{ .port }}
            {{- end }}
            - name: http
              containerPort: 8080
          livenessProbe:
            httpGet: {path: /healthz, port: http}
            periodSeconds: 10
          readinessProbe:
            httpGet: {path: /readyz, port: http}
            periodSeconds: 5
          resources:
            {{- toYaml .values.resources | nindent 12 }}
          securityContext:
            {{- include "hostaffinity.containerSecurityContext" . | nindent 12 }}
          volumeMounts:
            - name: config
              mountPath: /etc/hostaffinity
              readOnly: true
            - name: nats-credentials
              mountPath: /var/run/hostaffinity/nats
              readOnly: true
            {{- if .vcenter }}
            - name: vcenter-ca
              mountPath: /var/run/hostaffinity/vcenter
              readOnly: true
            {{- end }}
            {{- with .mounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        - name: config
          {{- toYaml .config | nindent 10 }}
        {{- if .vcenter }}
        # Only the CA key of the vCenter Secret (optional: a thumbprint may pin it instead).
        - name: vcenter-ca
          secret:
            secretName: {{ $root.Values.vcenter.secret.name }}
            optional: true
            items: [{key: ca.crt, path: ca.crt}]
        {{- end }}
        - {{- include "hostaffinity.natsCredentials" .name | nindent 10 }}
        {{- with .volumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
---
# A drain takes one replica at a time.
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "hostaffinity.labels" (dict "root" $root "name" .name) | nindent 4 }}
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: {{ .name }}
{{- end }}

{{/*
A ClusterRole and its binding to a service's ServiceAccount. Call with (dict "root" $ "name"
"<service>" "rules" <list>).
*/}}
{{- define "hostaffinity.clusterRole" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: hostaffinity-{{ .name }}
  labels:
    {{- include "hostaffinity.labels" (dict "root" .root "name" .name) | nindent 4 }}
rules:
  {{- toYaml .rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: hostaffinity-{{ .name }}
  labels:
    {{- include "hostaffinity.labels" (dict "root" .root "name" .name) | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: hostaffinity-{{ .name }}
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ .root.Release.Namespace }}
{{- end }}

{{/*
A namespaced Role and its binding. Call with (dict "root" $ "name" "<role name>" "component"
"<component>" "serviceAccount" "<account>" "rules" <list>).
*/}}
{{- define "hostaffinity.role" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "hostaffinity.labels" (dict "root" .root "name" .component) | nindent 4 }}
rules:
  {{- toYaml .rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "hostaffinity.labels" (dict "root" .root "name" .component) | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .name }}
subjects:
  - kind: ServiceAccount
    name: {{ .serviceAccount }}
    namespace: {{ .root.Release.Namespace }}
{{- end }}

{{/* The Lease Role a leader-elected service holds in its own namespace. Call with (dict "root" $ "name" "<service>"). */}}
{{- define "hostaffinity.leaseRole" -}}
{{- include "hostaffinity.role" (dict "root" .root "name" (printf "hostaffinity-%s-lease" .name) "component" .name "serviceAccount" .name "rules" (list (dict "apiGroups" (list "coordination.k8s.io") "resources" (list "leases") "verbs" (list "get" "create" "update")))) }}
{{- end }}

{{/* The client URL of the bus. */}}
{{- define "hostaffinity.natsServers" -}}
{{- if .Values.nats.bundled -}}
{{ list (printf "tls://nats.%s.svc:4222" .Release.Namespace) | toJson }}
{{- else -}}
{{ .Values.nats.servers | toJson }}
{{- end -}}
{{- end }}
