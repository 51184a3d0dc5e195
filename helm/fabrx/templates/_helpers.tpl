{{/* The chart's name and the labels every object carries. */}}
{{- define "fabrx.labels" -}}
app.kubernetes.io/name: fabrx
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fabrx
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
fabrx.io/party: {{ .Values.party | quote }}
{{- end }}

{{/* The labels that select one node's pods: root, component, and optionally shard/index. */}}
{{- define "fabrx.selector" -}}
app.kubernetes.io/name: fabrx
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- if hasKey . "shard" }}
fabrx.io/shard: {{ .shard | quote }}
{{- end }}
{{- if hasKey . "index" }}
fabrx.io/endorser: {{ .index | quote }}
{{- end }}
{{- end }}

{{/* The image reference; a digest wins over the tag. */}}
{{- define "fabrx.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end }}

{{/* Party p's namespace: (dict "root" $ "party" p). */}}
{{- define "fabrx.namespaceOf" -}}
{{ .root.Values.network.namespacePattern | replace "{party}" (toString .party) }}
{{- end }}

{{/* Every party's namespace, as a YAML list. */}}
{{- define "fabrx.namespaces" -}}
{{- $root := . }}
{{- range $p := untilStep 1 (int (add1 .Values.network.parties)) 1 }}
- {{ include "fabrx.namespaceOf" (dict "root" $root "party" $p) }}
{{- end }}
{{- end }}

{{/* This party's Service host `<svc>.<ns>.svc.<domain>:<port>`: (dict "root" $ "svc" name "port" n). */}}
{{- define "fabrx.serviceAddr" -}}
{{ .svc }}.{{ .root.Release.Namespace }}.svc.{{ .root.Values.network.clusterDomain }}:{{ .port }}
{{- end }}

{{/* The config map holding network-config.json. */}}
{{- define "fabrx.configMap" -}}
{{- if .Values.network.config -}}
fabrx-network
{{- else -}}
{{ required "network.config (--set-file network.config=<dir>/k8s/shared/network-config.json) or network.existingConfigMap is required" .Values.network.existingConfigMap }}
{{- end -}}
{{- end }}

{{/* A role's placement value `key`, falling back to placement.<key>: (dict "root" $ "role" r "key" k). */}}
{{- define "fabrx.place" -}}
{{- $own := (index .root.Values.roles .role).placement | default dict -}}
{{- if hasKey $own .key -}}{{ index $own .key | toYaml }}{{- else -}}{{ index .root.Values.placement .key | toYaml }}{{- end -}}
{{- end }}

{{/* Scheduling of a role's pods: node affinity on region/zone, node selector, tolerations,
     and, for scalable roles, topology spread. (dict "root" $ "role" r "spread" bool "selector" dict) */}}
{{- define "fabrx.scheduling" -}}
{{- $region := include "fabrx.place" (dict "root" .root "role" .role "key" "region") | trim | trimAll "\"'" -}}
{{- $zone := include "fabrx.place" (dict "root" .root "role" .role "key" "zone") | trim | trimAll "\"'" -}}
{{- $nodeSelector := include "fabrx.place" (dict "root" .root "role" .role "key" "nodeSelector") | fromYaml -}}
{{- $tolerations := include "fabrx.place" (dict "root" .root "role" .role "key" "tolerations") | fromYamlArray -}}
{{- if or $region $zone }}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            {{- if $region }}
            - key: topology.kubernetes.io/region
              operator: In
              values: [{{ $region | quote }}]
            {{- end }}
            {{- if $zone }}
            - key: topology.kubernetes.io/zone
              operator: In
              values: [{{ $zone | quote }}]
            {{- end }}
{{- end }}
{{- if $nodeSelector }}
nodeSelector:
  {{- toYaml $nodeSelector | nindent 2 }}
{{- end }}
{{- if $tolerations }}
tolerations:
  {{- toYaml $tolerations | nindent 2 }}
{{- end }}
{{- if .spread }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: {{ .root.Values.placement.spreadTopologyKey }}
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- toYaml .selector | nindent 8 }}
{{- end }}
{{- end }}

{{/* The Secret files a node needs, as `key path` lines: (dict "root" $ "role" r "shard" s "index" i). */}}
{{- define "fabrx.secretFiles" -}}
{{- $p := .root.Values.party -}}
{{- $tls := .root.Values.network.tls -}}
{{- $cert := "" -}}
{{- if eq .role "batcher" -}}
batcher-{{ .shard }}.key keys/party-{{ $p }}/batcher-{{ .shard }}.key
{{ $cert = printf "batcher-%v-%v" $p .shard -}}
{{- else if eq .role "consenter" -}}
consenter.key keys/party-{{ $p }}/consenter.key
{{ $cert = printf "consenter-%v" $p -}}
{{- else if eq .role "endorser" -}}
endorser-{{ .index }}.key keys/endorsers/endorser-{{ .index }}.key
{{ $cert = printf "endorser-%v-%v" $p .index -}}
{{- else if eq .role "loadgen" -}}
meta.key keys/admin/meta.key
{{ $cert = "client" -}}
{{- else -}}
{{- $cert = printf "%s-%v" .role $p -}}
{{- end -}}
{{- if $tls }}
tls-{{ $cert }}.pem tls/{{ $cert }}.pem
tls-{{ $cert }}.key tls/{{ $cert }}.key
{{- end -}}
{{- end }}

{{/* The pod-level pieces every fabrx pod shares: (dict "root" $ "role" r "shard" s "index" i
     "vcservice" bool "db" bool "networkJson" bool). Renders `volumes` and `initContainers`. */}}
{{- define "fabrx.podCommon" -}}
{{- $root := .root -}}
{{- $files := include "fabrx.secretFiles" . | splitList "\n" | compact -}}
automountServiceAccountToken: false
enableServiceLinks: false
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  - name: network-config
    configMap:
      name: {{ include "fabrx.configMap" $root }}
      items:
        - key: network-config.json
          path: network-config.json
  - name: node-secret
    secret:
      secretName: {{ $root.Values.secrets.keys }}
      defaultMode: 0440
      items:
        {{- range $files }}
        {{- $kv := splitList " " (trim .) }}
        - key: {{ index $kv 0 }}
          path: {{ index $kv 1 }}
        {{- end }}
  {{- if .db }}
  - name: db-secret
    secret:
      secretName: {{ $root.Values.secrets.db }}
      defaultMode: 0440
      items:
        - key: {{ $root.Values.secrets.dbKey }}
          path: url
  {{- end }}
  - name: fabrx-home
    emptyDir:
      medium: Memory
      sizeLimit: 4Mi
  - name: tmp
    emptyDir:
      sizeLimit: 64Mi
initContainers:
  - name: identity
    image: {{ include "fabrx.image" $root }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    command: ["/bin/sh", "-c"]
    args:
      - |
        set -eu
        umask 077
        mkdir -p /etc/fabrx/config
        cp /run/fabrx/shared/network-config.json /etc/fabrx/config/network-config.json
        chmod 0644 /etc/fabrx/config/network-config.json
        for f in {{ range $files }}{{ index (splitList " " (trim .)) 1 }} {{ end }}; do
          mkdir -p "$(dirname "/etc/fabrx/$f")"
          cp -L "/run/fabrx/secret/$f" "/etc/fabrx/$f"
          chmod 0600 "/etc/fabrx/$f"
        done
        {{- if .vcservice }}
        {{- if .db }}
        db="$(cat /run/fabrx/db/url)"
        {{- else }}
        db="embedded:/var/lib/fabrx/db"
        {{- end }}
        printf 'listen = "0.0.0.0:%s"\ndb = "%s"\n' "{{ $root.Values.ports.vcservice }}" "$db" > /etc/fabrx/vcservice.toml
        {{- if $root.Values.metrics.enabled }}
        printf 'metrics_listen = "0.0.0.0:%s"\n' "{{ $root.Values.ports.metrics }}" >> /etc/fabrx/vcservice.toml
        {{- end }}
        chmod 0600 /etc/fabrx/vcservice.toml
        {{- end }}
        {{- if .networkJson }}
        printf '{"parties":%s,"shards":%s,"nodes":[{"role":"sidecar","party":%s,"listen":"%s"}]}\n' \
          "{{ $root.Values.network.parties }}" "{{ $root.Values.shards }}" "{{ $root.Values.party }}" \
          "{{ include "fabrx.serviceAddr" (dict "root" $root "svc" "sidecar" "port" $root.Values.ports.sidecar) }}" > /etc/fabrx/network.json
        {{- end }}
    securityContext:
      {{- toYaml $root.Values.securityContext | nindent 6 }}
    resources:
      {{- toYaml $root.Values.init.resources | nindent 6 }}
    volumeMounts:
      - {name: network-config, mountPath: /run/fabrx/shared, readOnly: true}
      - {name: node-secret, mountPath: /run/fabrx/secret, readOnly: true}
      {{- if .db }}
      - {name: db-secret, mountPath: /run/fabrx/db, readOnly: true}
      {{- end }}
      - {name: fabrx-home, mountPath: /etc/fabrx}
{{- end }}

{{/* The node container: (dict "root" $ "role" r "args" list "port" n "metrics" bool "stateful" bool). */}}
{{- define "fabrx.container" -}}
{{- $root := .root -}}
- name: {{ .role }}
  image: {{ include "fabrx.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  args:
    {{- toYaml .args | nindent 4 }}
  ports:
    - {name: grpc, containerPort: {{ .port }}, protocol: TCP}
    {{- if .metrics }}
    - {name: metrics, containerPort: {{ $root.Values.ports.metrics }}, protocol: TCP}
    {{- end }}
  readinessProbe:
    tcpSocket: {port: grpc}
    {{- toYaml $root.Values.probes.readiness | nindent 4 }}
  livenessProbe:
    tcpSocket: {port: grpc}
    {{- toYaml $root.Values.probes.liveness | nindent 4 }}
  securityContext:
    {{- toYaml $root.Values.securityContext | nindent 4 }}
  resources:
    {{- toYaml (index $root.Values.roles .role).resources | nindent 4 }}
  volumeMounts:
    - {name: fabrx-home, mountPath: /etc/fabrx, readOnly: true}
    - {name: tmp, mountPath: /tmp}
    {{- if .stateful }}
    - {name: data, mountPath: /var/lib/fabrx}
    {{- end }}
{{- end }}

{{/* A node: Deployment or StatefulSet with its pod. (dict "root" $ "name" n "role" r "args" list
     "port" n "stateful" bool "spread" bool "shard" s "index" i "vcservice" bool "db" bool "metrics" bool) */}}
{{- define "fabrx.node" -}}
{{- $root := .root -}}
{{- $sel := dict "root" $root "component" .name -}}
{{- if hasKey . "shard" }}{{ $_ := set $sel "shard" .shard }}{{ end -}}
{{- if hasKey . "index" }}{{ $_ := set $sel "index" .index }}{{ end -}}
{{- $selector := include "fabrx.selector" $sel | fromYaml -}}
{{- $role := index $root.Values.roles .role -}}
apiVersion: apps/v1
kind: {{ if .stateful }}StatefulSet{{ else }}Deployment{{ end }}
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "fabrx.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .name }}
    fabrx.io/role: {{ .role }}
spec:
  {{- if .stateful }}
  serviceName: {{ .name }}
  replicas: 1
  podManagementPolicy: Parallel
  {{- else }}
  replicas: {{ $role.replicas | default 1 }}
  {{- end }}
  selector:
    matchLabels:
      {{- toYaml $selector | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "fabrx.labels" $root | nindent 8 }}
        {{- toYaml $selector | nindent 8 }}
        fabrx.io/role: {{ .role }}
      annotations:
        checksum/network-config: {{ $root.Values.network.config | sha256sum | trunc 16 }}
    spec:
      {{- include "fabrx.podCommon" . | nindent 6 }}
      {{- include "fabrx.scheduling" (dict "root" $root "role" .role "spread" .spread "selector" $selector) | nindent 6 }}
      containers:
        {{- include "fabrx.container" . | nindent 8 }}
  {{- if .stateful }}
  volumeClaimTemplates:
    - metadata:
        name: data
        labels:
          {{- include "fabrx.labels" $root | nindent 10 }}
      spec:
        accessModes: [{{ $root.Values.persistence.accessMode }}]
        {{- with $root.Values.persistence.storageClass }}
        storageClassName: {{ . }}
        {{- end }}
        resources:
          requests:
            storage: {{ $role.storage }}
  {{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "fabrx.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .name }}
    {{- if .metrics }}
    fabrx.io/metrics: "true"
    {{- end }}
spec:
  {{- if .stateful }}
  clusterIP: None
  publishNotReadyAddresses: true
  {{- end }}
  selector:
    {{- toYaml $selector | nindent 4 }}
  ports:
    - {name: grpc, port: {{ .port }}, targetPort: grpc, protocol: TCP}
    {{- if .metrics }}
    - {name: metrics, port: {{ $root.Values.ports.metrics }}, targetPort: metrics, protocol: TCP}
    {{- end }}
{{- if and (not .stateful) $root.Values.pdb.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "fabrx.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .name }}
spec:
  maxUnavailable: {{ $root.Values.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- toYaml $selector | nindent 6 }}
{{- end }}
{{- end }}

{{- define "fabrx.peer" -}}
{{- /* A NetworkPolicy peer list: (dict "all" $all "component" c "shard" s): pods of component c in every party's namespace (all) or this one. */ -}}
{{- $sel := dict "app.kubernetes.io/name" "fabrx" "app.kubernetes.io/component" .component -}}
{{- if .all }}
- namespaceSelector: {{ toJson .all.namespaceSelector }}
  podSelector: {matchLabels: {{ toJson $sel }}}
{{- else }}
- podSelector: {matchLabels: {{ toJson $sel }}}
{{- end }}
{{- end }}
