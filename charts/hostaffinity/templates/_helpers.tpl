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

{{/*
Every vCenter the node-labeller and the drs-translator work with, in the order of their
`vcenters:` lists: item 0 from `vcenter`, then each of `additionalVcenters`. Printed as a JSON
list of {name, secret, env (the prefix of its HOSTAFFINITY_VCENTERS__<i>__ variables), volume,
dir (where its Secret's ca.crt is mounted)}; read it back with fromJsonArray. Two vCenters of one
name would share placements, host records and DRS ownership records: that fails the render.
*/}}
{{- define "hostaffinity.vcenters" -}}
{{- $items := list (dict "name" .Values.vcenter.name "secret" .Values.vcenter.secret.name "env" "HOSTAFFINITY_VCENTERS__0__" "volume" "vcenter-ca" "dir" "/var/run/hostaffinity/vcenter") -}}
{{- $names := list .Values.vcenter.name -}}
{{- range $i, $vcenter := .Values.additionalVcenters -}}
{{- if has $vcenter.name $names -}}
{{- fail (printf "additionalVcenters[%d]: the vCenter name %q is already taken (by vcenter.name or an earlier item); give each vCenter its own name" $i $vcenter.name) -}}
{{- end -}}
{{- $names = append $names $vcenter.name -}}
{{- $index := add1 $i -}}
{{- $items = append $items (dict "name" $vcenter.name "secret" $vcenter.secret "env" (printf "HOSTAFFINITY_VCENTERS__%d__" $index) "volume" (printf "vcenter-%d-ca" $index) "dir" (printf "/var/run/hostaffinity/vcenter-%d" $index)) -}}
{{- end -}}
{{ toJson $items }}
{{- end }}

{{/* Each vCenter's Secret keys as the services' environment (item i: HOSTAFFINITY_VCENTERS__<i>__*). */}}
{{- define "hostaffinity.vcenterEnv" -}}
{{- range include "hostaffinity.vcenters" . | fromJsonArray }}
- name: {{ .env }}HOST
  valueFrom:
    secretKeyRef: {name: {{ .secret }}, key: host}
- name: {{ .env }}USERNAME
  valueFrom:
    secretKeyRef: {name: {{ .secret }}, key: username}
- name: {{ .env }}PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ .secret }}, key: password}
# What makes vCenter's certificate trusted: the Secret's ca.crt (mounted) or its thumbprint.
- name: {{ .env }}CA_FILE
  value: {{ .dir }}/ca.crt
- name: {{ .env }}THUMBPRINT
  valueFrom:
    secretKeyRef: {name: {{ .secret }}, key: thumbprint, optional: true}
{{- end }}
{{- end }}

{{/* Each vCenter's CA, mounted read-only at its own directory. */}}
{{- define "hostaffinity.vcenterMounts" -}}
{{- range include "hostaffinity.vcenters" . | fromJsonArray }}
- name: {{ .volume }}
  mountPath: {{ .dir }}
  readOnly: true
{{- end }}
{{- end }}

{{/* Each vCenter's CA volume. */}}
{{- define "hostaffinity.vcenterVolumes" -}}
# Only the CA key of the vCenter Secret (optional: a thumbprint may pin it instead).
{{- range include "hostaffinity.vcenters" . | fromJsonArray }}
- name: {{ .volume }}
  secret:
    secretName: {{ .secret }}
    optional: true
    items: [{key: ca.crt, path: ca.crt}]
{{- end }}
{{- end }}

{{/*
A service: ServiceAccount, Deployment and PodDisruptionBudget, the shape all five share.
Call with a dict:
  root      $
  name      the service (its Deployment, ServiceAccount and container name)
  values    its values section (replicas, resources)
  ports     extra named container ports beside http 8080, as a list of {name, port}
  vcenter   true: each vCenter Secret's keys as environment, its ca.crt as a volume
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
            {{- include "hostaffinity.vcenterEnv" $root | trim | nindent 12 }}
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
            {{- include "hostaffinity.vcenterMounts" $root | trim | nindent 12 }}
            {{- end }}
            {{- with .mounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        - name: config
          {{- toYaml .config | nindent 10 }}
        {{- if .vcenter }}
        {{- include "hostaffinity.vcenterVolumes" $root | nindent 8 }}
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
  # Which cluster this is (config.shared.cluster.name unset): the multi-cluster API's cluster id,
  # else the kube-system Namespace's UID. It names every DRS rule this install creates.
  - apiGroups: ["about.k8s.io"]
    resources: ["clusterproperties"]
    resourceNames: ["id.k8s.io", "cluster.clusterset.k8s.io"]
    verbs: ["get"]
  - apiGroups: [""]
    resources: ["namespaces"]
    resourceNames: ["kube-system"]
    verbs: ["get"]
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
