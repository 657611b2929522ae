"""The HPA under an inference service, decided from the API's answers (no calls here; `k8s_actuator` makes them).

An autoscaling/v2 HPA scales anything with a /scale subresource: a Deployment, a StatefulSet, an Argo Rollout (which
exposes /scale as a Deployment does). The service's HPA is the one whose `scaleTargetRef` names it, whatever the
target's kind, one on a Deployment first: gputide's floor is the HPA's `minReplicas` either way, and only a service
no HPA scales has its Deployment's own scale set. Matching Deployments alone sent a StatefulSet's or a Rollout's
floor to `deployments/{name}/scale`: a 404 every cycle, or, for a Rollout that took over a Deployment of its name
(Argo Rollouts' `workloadRef`, which keeps that Deployment at 0), the old Deployment scaled up beside the Rollout.
"""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]


def service_hpa(hpas: Json, name: str) -> Json | None:
    """The HPA (of a namespace's HPA list) that scales `name`: one targeting a Deployment of that name, else one
    targeting any other kind of that name; None when no HPA names it."""
    named = [h for h in hpas.get("items", []) if ((h.get("spec") or {}).get("scaleTargetRef") or {}).get("name") == name]
    return next((h for h in named if h["spec"]["scaleTargetRef"].get("kind") == "Deployment"),
                named[0] if named else None)
