{{/* The chart's name (nameOverride) and the release's object prefix (fullnameOverride):
     they name the objects that are not nodes (ConfigMaps, Jobs, monitors). Nodes' Services
     keep the names the network config gives them. */}}
{{- define "fabrx.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{- define "fabrx.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "fabrx.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The labels every object carries. */}}
{{- define "fabrx.labels" -}}
app.kubernetes.io/name: {{ include "fabrx.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fabrx
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
fabrx.io/party: {{ .Values.party | quote }}
{{- end }}

{{/* The labels that select one node's pods: root, component, and optionally shard/index. */}}
{{- define "fabrx.selector" -}}
app.kubernetes.io/name: {{ include "fabrx.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- if hasKey . "shard" }}
fabrx.io/shard: {{ .shard | quote }}
{{- end }}
{{- if hasKey . "index" }}
fabrx.io/endorser: {{ .index | quote }}
{{- end }}
{{- end }}

{{/* The image reference: global.imageRegistry in front of the repository when set; a
     digest wins over the tag. */}}
{{- define "fabrx.image" -}}
{{- $registry := (.Values.global | default dict).imageRegistry | default "" -}}
{{- $repo := .Values.image.repository -}}
{{- if $registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" $registry) $repo }}{{ end -}}
{{- if .Values.image.digest -}}
{{ $repo }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repo }}:{{ .Values.image.tag }}
{{- end -}}
{{- end }}

{{/* A role's setting `key` merged over the chart-wide one: maps merged (the role's keys
     win), lists concatenated (chart-wide first), strings: the role's when set.
     (dict "root" $ "role" r "key" k) */}}
{{- define "fabrx.roleSetting" -}}
{{- $global := index .root.Values .key -}}
{{- $role := dict -}}
{{- if hasKey .root.Values.roles .role }}{{ $role = index .root.Values.roles .role }}{{ end -}}
{{- $own := index $role .key -}}
{{- if kindIs "map" $global -}}
{{- toYaml (merge (deepCopy ($own | default dict)) $global) -}}
{{- else if kindIs "slice" $global -}}
{{- toYaml (concat $global ($own | default list)) -}}
{{- else -}}
{{- $own | default $global -}}
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
{{ include "fabrx.fullname" . }}-network
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

{{/* The name of a node's TLS certificate in the network (docs/tls.md "Files"):
     (dict "root" $ "role" r "shard" s "index" i). */}}
{{- define "fabrx.certName" -}}
{{- $p := .root.Values.party -}}
{{- if eq .role "batcher" -}}batcher-{{ $p }}-{{ .shard }}
{{- else if eq .role "endorser" -}}endorser-{{ $p }}-{{ .index }}
{{- else if eq .role "loadgen" -}}client
{{- else -}}{{ .role }}-{{ $p }}
{{- end -}}
{{- end }}

{{/* Whether the nodes' TLS key pairs come from cert-manager (tls.source certManager). */}}
{{- define "fabrx.certManager" -}}
{{- if and .Values.network.tls (eq .Values.tls.source "certManager") }}true{{ end -}}
{{- end }}

{{/* The Secret cert-manager writes a node's key pair into: (dict "root" $ "cert" name). */}}
{{- define "fabrx.tlsSecret" -}}
{{ include "fabrx.fullname" .root }}-tls-{{ .cert }}
{{- end }}

{{/* The files a node reads from the party's Secret, as `key path` lines, the path
     relative to the network directory: its signing key and, unless cert-manager provides
     them, its TLS certificate and key. (dict "root" $ "role" r "shard" s "index" i) */}}
{{- define "fabrx.secretFiles" -}}
{{- $p := .root.Values.party -}}
{{- if eq .role "batcher" -}}
batcher-{{ .shard }}.key keys/party-{{ $p }}/batcher-{{ .shard }}.key
{{ else if eq .role "consenter" -}}
consenter.key keys/party-{{ $p }}/consenter.key
{{ else if eq .role "endorser" -}}
endorser-{{ .index }}.key keys/endorsers/endorser-{{ .index }}.key
{{ else if eq .role "loadgen" -}}
meta.key keys/admin/meta.key
{{ end -}}
{{- $cert := include "fabrx.certName" . -}}
{{- if and .root.Values.network.tls (or (eq .role "loadgen") (not (include "fabrx.certManager" .root))) -}}
tls-{{ $cert }}.pem tls/{{ $cert }}.pem
tls-{{ $cert }}.key tls/{{ $cert }}.key
{{- end -}}
{{- end }}

{{/* The files a node reads from the network ConfigMap (`key path`): the network config,
     for the consenter the consenters' peer-keys file, and for an ordering node of a
     joining party (network.join) the joining config. (dict "root" $ "role" r) */}}
{{- define "fabrx.configFiles" -}}
network-config.json config/network-config.json
{{- if eq .role "consenter" }}
consenter-peer-keys.txt config/consenter-peer-keys.txt
{{- end }}
{{- if include "fabrx.joins" . }}
join.json config/join.json
{{- end }}
{{- end }}

{{/* "true" when this node starts with `--join`: an ordering node (router, consenter,
     assembler, batcher) of a release with network.join. (dict "root" $ "role" r) */}}
{{- define "fabrx.joins" -}}
{{- if and .root.Values.network.join (has .role (list "router" "consenter" "assembler" "batcher")) }}true{{ end -}}
{{- end }}

{{/* The pod-level pieces every fabrx pod shares: (dict "root" $ "role" r "shard" s "index" i
     "vcservice" bool "db" bool "networkJson" bool "stateful" bool). Renders the pod's
     security context, `volumes` and `initContainers`. */}}
{{- define "fabrx.podCommon" -}}
{{- $root := .root -}}
{{- $files := include "fabrx.secretFiles" . | splitList "\n" | compact -}}
{{- $config := include "fabrx.configFiles" . | splitList "\n" | compact -}}
{{- $cert := include "fabrx.certName" . -}}
{{- $certManager := and (include "fabrx.certManager" $root) (ne .role "loadgen") -}}
{{- $priority := include "fabrx.roleSetting" (dict "root" $root "role" .role "key" "priorityClassName") -}}
automountServiceAccountToken: false
enableServiceLinks: false
{{- with $priority }}
priorityClassName: {{ . }}
{{- end }}
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
        {{- range $config }}
        {{- $kv := splitList " " (trim .) }}
        - key: {{ index $kv 0 }}
          path: {{ index $kv 0 }}
        {{- end }}
  {{- if $files }}
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
  {{- end }}
  {{- if $certManager }}
  - name: node-tls
    secret:
      secretName: {{ include "fabrx.tlsSecret" (dict "root" $root "cert" $cert) }}
      defaultMode: 0440
      items:
        - {key: tls.crt, path: tls/{{ $cert }}.pem}
        - {key: tls.key, path: tls/{{ $cert }}.key}
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
  {{- with include "fabrx.roleSetting" (dict "root" $root "role" .role "key" "extraVolumes") | fromYamlArray }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
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
        for f in {{ range $config }}{{ index (splitList " " (trim .)) 0 }} {{ end }}; do
          cp "/run/fabrx/shared/$f" "/etc/fabrx/config/$f"
          chmod 0644 "/etc/fabrx/config/$f"
        done
        copy() { # copy DIR FILE…: each FILE of DIR into /etc/fabrx, mode 0600
          from=$1; shift
          for f in "$@"; do
            mkdir -p "$(dirname "/etc/fabrx/$f")"
            cp -L "$from/$f" "/etc/fabrx/$f"
            chmod 0600 "/etc/fabrx/$f"
          done
        }
        {{- if $files }}
        copy /run/fabrx/secret {{ range $files }}{{ index (splitList " " (trim .)) 1 }} {{ end }}
        {{- end }}
        {{- if $certManager }}
        copy /run/fabrx/tls tls/{{ $cert }}.pem tls/{{ $cert }}.key
        {{- end }}
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
        {{- /* What `fabrx loadgen --target network` reads from a network directory besides
             the config: the committing sidecar of this party, as a `network.json` node
             entry (devnet::file::NodeEntry; the fields of a process it did not start are
             placeholders). */}}
        {{- $sidecar := dict "name" (printf "sidecar-%v" $root.Values.party) "role" "sidecar" "party" (int $root.Values.party)
              "shard" nil "pid" 0 "argv" list "cwd" "/var/lib/fabrx" "metrics" nil "data_dir" "/var/lib/fabrx" "log" "/dev/null"
              "listen" (include "fabrx.serviceAddr" (dict "root" $root "svc" "sidecar" "port" $root.Values.ports.sidecar)) }}
        printf '%s\n' '{{ dict "parties" (int $root.Values.network.parties) "shards" (int $root.Values.shards) "nodes" (list $sidecar) | toJson }}' > /etc/fabrx/network.json
        {{- end }}
    securityContext:
      {{- toYaml $root.Values.securityContext | nindent 6 }}
    resources:
      {{- toYaml $root.Values.init.resources | nindent 6 }}
    volumeMounts:
      - {name: network-config, mountPath: /run/fabrx/shared, readOnly: true}
      {{- if $files }}
      - {name: node-secret, mountPath: /run/fabrx/secret, readOnly: true}
      {{- end }}
      {{- if $certManager }}
      - {name: node-tls, mountPath: /run/fabrx/tls, readOnly: true}
      {{- end }}
      {{- if .db }}
      - {name: db-secret, mountPath: /run/fabrx/db, readOnly: true}
      {{- end }}
      - {name: fabrx-home, mountPath: /etc/fabrx}
{{- end }}

{{/* The pod template's metadata: labels and annotations (chart-wide podLabels and
     podAnnotations, then the role's). (dict "root" $ "role" r "selector" dict "extra" dict) */}}
{{- define "fabrx.podMetadata" -}}
{{- $labels := include "fabrx.roleSetting" (dict "root" .root "role" .role "key" "podLabels") | fromYaml -}}
{{- $annotations := include "fabrx.roleSetting" (dict "root" .root "role" .role "key" "podAnnotations") | fromYaml -}}
{{- $annotations = merge $annotations (.extra | default dict) -}}
labels:
  {{- include "fabrx.labels" .root | nindent 2 }}
  {{- toYaml .selector | nindent 2 }}
  {{- with $labels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The node container: (dict "root" $ "role" r "args" list "port" n "metrics" bool "stateful" bool). */}}
{{- define "fabrx.container" -}}
{{- $root := .root -}}
{{- $env := include "fabrx.roleSetting" (dict "root" $root "role" .role "key" "extraEnv") | fromYamlArray -}}
{{- $mounts := include "fabrx.roleSetting" (dict "root" $root "role" .role "key" "extraVolumeMounts") | fromYamlArray -}}
- name: {{ .role }}
  image: {{ include "fabrx.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  args:
    {{- toYaml .args | nindent 4 }}
  {{- with $env }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    - {name: grpc, containerPort: {{ .port }}, protocol: TCP}
    {{- if .metrics }}
    - {name: metrics, containerPort: {{ $root.Values.ports.metrics }}, protocol: TCP}
    {{- end }}
  {{- /* The startup probe holds liveness and readiness back until the node first listens
       (a node waits for peers it needs at start); then liveness takes over. */}}
  startupProbe:
    tcpSocket: {port: grpc}
    {{- toYaml $root.Values.probes.startup | nindent 4 }}
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
    {{- with $mounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/* A role's replica count: its `replicas` value, 0 included (absent: 1). A StatefulSet
     node is one pod or none. (dict "root" $ "role" r "stateful" bool) */}}
{{- define "fabrx.replicas" -}}
{{- $role := index .root.Values.roles .role -}}
{{- $n := 1 -}}
{{- if and (hasKey $role "replicas") (not (kindIs "invalid" $role.replicas)) }}{{ $n = int $role.replicas }}{{ end -}}
{{- if and .stateful (gt $n 1) -}}
{{- fail (printf "roles.%s.replicas is %d: a %s is one pod (0 stops it)" .role $n .role) -}}
{{- end -}}
{{- $n -}}
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
{{- /* Only what the pod reads: a change restarts it. network.parties is not among them. */ -}}
{{- $checksum := dict "checksum/network-config" ($root.Values.network.config | sha256sum | trunc 16) -}}
{{- if include "fabrx.joins" . }}{{ $_ := set $checksum "checksum/network-join" ($root.Values.network.join | sha256sum | trunc 16) }}{{ end -}}
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
  replicas: {{ include "fabrx.replicas" (dict "root" $root "role" .role "stateful" .stateful) }}
  {{- if .stateful }}
  serviceName: {{ .name }}
  podManagementPolicy: Parallel
  persistentVolumeClaimRetentionPolicy:
    {{- toYaml $root.Values.persistence.retentionPolicy | nindent 4 }}
  {{- end }}
  selector:
    matchLabels:
      {{- toYaml $selector | nindent 6 }}
  template:
    metadata:
      {{- include "fabrx.podMetadata" (dict "root" $root "role" .role "selector" (merge (dict "fabrx.io/role" .role) $selector) "extra" $checksum) | nindent 6 }}
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
{{- if include "fabrx.certManager" $root }}
{{- $cert := include "fabrx.certName" . }}
{{- $cm := $root.Values.tls.certManager }}
---
{{- /* This node's key pair, issued by cert-manager from the network's CA (docs/deploy.md
     "TLS from cert-manager"): the network config must list this certificate's SHA-256. */}}
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: {{ include "fabrx.tlsSecret" (dict "root" $root "cert" $cert) }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "fabrx.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .name }}
spec:
  secretName: {{ include "fabrx.tlsSecret" (dict "root" $root "cert" $cert) }}
  commonName: fabrx-node
  dnsNames:
    - fabrx-node
    - {{ .name }}.{{ $root.Release.Namespace }}.svc.{{ $root.Values.network.clusterDomain }}
  duration: {{ $cm.duration }}
  renewBefore: {{ $cm.renewBefore }}
  privateKey:
    algorithm: ECDSA
    size: 256
    encoding: PKCS8
    rotationPolicy: Never
  usages: [digital signature, key encipherment, server auth, client auth]
  issuerRef:
    {{- toYaml $cm.issuerRef | nindent 4 }}
{{- end }}
{{- end }}

{{- define "fabrx.peer" -}}
{{- /* A NetworkPolicy peer list: (dict "all" $all "component" c "shard" s): pods of component c in every party's namespace (all) or this one. */ -}}
{{- $sel := dict "app.kubernetes.io/part-of" "fabrx" "app.kubernetes.io/component" .component -}}
{{- if .all }}
- namespaceSelector: {{ toJson .all.namespaceSelector }}
  podSelector: {matchLabels: {{ toJson $sel }}}
{{- else }}
- podSelector: {matchLabels: {{ toJson $sel }}}
{{- end }}
{{- end }}
