#!/usr/bin/env bash
# Hands the HPA floors and the gputide-replicas record entries one controller wrote over to another (kustomization.yaml
# here: switching between the unsharded controller and the shards). A controller gives back only what names it as its
# writer (the HPA's gputide.io/floor-owner, the entry's "owner": balancer/actuate/k8s_hpa.py owned_by), so what a
# controller that no longer runs wrote is no one's: a floor whose service later leaves gputide's management would
# stay raised for good. Handed over, the new controller gives it back then; the floor itself, and the count it keeps,
# do not change.
#   deploy/overlays/sharded/hand-over-floors.sh FROM TO [NAMESPACE]
# FROM, TO: the controllers' Leases (gputide-controller, gputide-controller-a), in NAMESPACE (default gputide); a
# writer is recorded as NAMESPACE/LEASE. Only what names FROM changes: another controller's and unnamed ones stay.
# Refuses while deployment/FROM exists: running, it would go on writing its own name. Each HPA is annotated at the
# resourceVersion read and the record replaced at its own, so a write in between fails the script rather than being
# lost: run it again. Needs kubectl and jq; get, list and update on HPAs and on the ConfigMap.
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: $0 FROM TO [NAMESPACE]   (Leases: gputide-controller, gputide-controller-a)" >&2
  exit 2
fi
from=$1 to=$2 ns=${3:-gputide}
owner="gputide.io/floor-owner"

if [ -n "$(kubectl -n "$ns" get deployment "$from" --ignore-not-found -o name)" ]; then
  echo "deployment/$from still exists in $ns: delete it first (kustomization.yaml says how)" >&2
  exit 1
fi

hpas=$(kubectl get hpa --all-namespaces -o json | jq -r --arg from "$ns/$from" --arg key "$owner" \
  '.items[] | select(.metadata.annotations[$key]? == $from)
   | "\(.metadata.namespace) \(.metadata.name) \(.metadata.resourceVersion)"')
count=0
while read -r hns name rv; do
  [ -n "$hns" ] || continue
  kubectl -n "$hns" annotate hpa "$name" --overwrite --resource-version="$rv" "$owner=$ns/$to" >/dev/null
  echo "hpa $hns/$name: floor handed from $ns/$from to $ns/$to"
  count=$((count + 1))
done <<<"$hpas"

record=$(kubectl -n "$ns" get configmap gputide-replicas -o json --ignore-not-found)
entries=0
if [ -n "$record" ]; then
  handed=$(jq --arg from "$ns/$from" --arg to "$ns/$to" \
    'if .data then .data |= with_entries((.value | try fromjson catch null) as $e
       | if ($e | type) == "object" and $e.owner == $from then .value = ($e | .owner = $to | tojson) else . end)
     else . end' <<<"$record")
  entries=$(jq -n --argjson a "$record" --argjson b "$handed" \
    '[($b.data // {}) | to_entries[] | select($a.data[.key] != .value)] | length')
  if [ "$entries" -gt 0 ]; then
    kubectl replace -f - <<<"$handed" >/dev/null
  fi
fi
echo "handed from $ns/$from to $ns/$to: $count HPA floor(s), $entries gputide-replicas entr(y/ies)"
