# The environment a kubelet gives a pod's first container, as NAME=VALUE lines: envFrom
# first, then env (a later name wins, as in a pod). Input:
#   {"pod": <pod template spec>, "name": <pod name>, "namespace": <namespace>,
#    "configmaps": {<name>: <data>}, "secrets": {<name>: <data, base64>}}
# What the manifests use is resolved (value, configMapKeyRef, secretKeyRef, fieldRef
# metadata.name / metadata.namespace, resourceFieldRef of a limit); anything else, a
# missing ConfigMap, Secret or key, or a value with a newline is an error, not a guess.
def quantity:
  capture("^(?<n>[0-9]+)(?<u>Ki|Mi|Gi|Ti|k|M|G|T)?$")
  // error("resource quantity \(.) not understood")
  | (.n | tonumber) * {"": 1, "Ki": 1024, "Mi": 1048576, "Gi": 1073741824, "Ti": 1099511627776,
                       "k": 1000, "M": 1000000, "G": 1000000000, "T": 1000000000000}[.u // ""];
def need($what): if . == null then error("\($what) is missing") else . end;
. as $in
| $in.pod.containers[0] as $c
| [ ($c.envFrom // [])[]
    | if .configMapRef then
        ($in.configmaps[.configMapRef.name] | need("ConfigMap \(.configMapRef.name)")) | to_entries[]
      elif .secretRef then
        ($in.secrets[.secretRef.name] | need("Secret \(.secretRef.name)")) | to_entries[] | .value |= @base64d
      else error("envFrom \(.) not supported") end ]
  + [ ($c.env // [])[]
      | .name as $name
      | {key: $name, value: (
          if has("value") then .value
          elif .valueFrom.configMapKeyRef then .valueFrom.configMapKeyRef as $r
            | $in.configmaps[$r.name][$r.key] | need("ConfigMap \($r.name) key \($r.key) (env \($name))")
          elif .valueFrom.secretKeyRef then .valueFrom.secretKeyRef as $r
            | $in.secrets[$r.name][$r.key] | need("Secret \($r.name) key \($r.key) (env \($name))") | @base64d
          elif .valueFrom.fieldRef.fieldPath == "metadata.name" then $in.name
          elif .valueFrom.fieldRef.fieldPath == "metadata.namespace" then $in.namespace
          elif (.valueFrom.resourceFieldRef.resource // "" | startswith("limits.")) then
            .valueFrom.resourceFieldRef.resource as $r
            | $c.resources.limits[$r | ltrimstr("limits.")] | need("\($r) (env \($name))") | quantity | tostring
          else error("env \($name): \(.valueFrom) not supported") end)} ]
| .[]
| if (.value | tostring | test("\n")) then error("env \(.key) holds a newline") else . end
| "\(.key)=\(.value)"
