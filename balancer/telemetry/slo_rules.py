"""SLO burn-rate inputs from vLLM's latency histogram: the rule file `gputide slo-rules` writes.

The burn-rate alerts (InferenceSloBurnRateFast/Slow) read `service:inference_slo_violations:ratio_rate*`, which
the `gputide-slo` group of rules/gputide-recording.yaml computes from two counters, requests and requests over
their latency SLO. The simulated fleet publishes those counters; vLLM does not, and a latency SLO is the
service's own (its profile's `latencySloSeconds`), so no fixed rule can derive them. This module writes, for each
profiled service, the same rates from vLLM's end-to-end latency histogram:

    service:vllm_requests:rate<W>        rate of the histogram's +Inf bucket (every finished request)
    service:vllm_slo_violations:rate<W>  that minus the rate of the bucket `le` = the service's SLO boundary

for W in 5m, 30m, 1h, 6h, labelled `service` (the Deployment's name, as the profile's `name`) and `namespace`.
They are named apart from the `gputide-slo` group's own `service:inference_*` series on purpose: two rules
recording one series fight over its samples wherever both have data, so each name has one writer, and the
`gputide-slo` group falls back to these (`or on (cluster, service)`) where the counters are absent.

Buckets: a classic histogram only answers "how many requests took at most `le`" at its bucket boundaries, so
the threshold is the largest boundary at or under the SLO. When the SLO falls between two boundaries, requests
between that boundary and the SLO count as violations: the alert errs towards firing early, never late.
`VLLM_E2E_BUCKETS` are vLLM's (`request_latency_buckets` in vllm/v1/metrics/loggers.py); older releases (the
v0 engine's vllm/engine/metrics.py) had 1, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, and a patched one may have others,
hence `--buckets`. A pod whose histogram lacks the chosen bucket counts neither in requests nor in violations:
where no pod has it, the service has no series at all (regenerate with the right `--buckets`), rather than read
100% violations.

Each vLLM pod is attributed to its Deployment through `gputide:pod_deployment:info` (rules/serving/vllm.yaml,
which must be loaded too), taken over the whole window (`max_over_time`): a pod scaled away or replaced by a
rollout an hour ago still counts in the 6h rates. Exposition formats write a bucket boundary as `2` or `2.0`
(Python's prometheus_client, and Prometheus 3 on ingestion, write `2.0`), so the `le` matcher accepts both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from balancer.errors import InputError

HISTOGRAM = "vllm:e2e_request_latency_seconds_bucket"
POD_DEPLOYMENT = "gputide:pod_deployment:info"  # rules/serving/vllm.yaml
VLLM_E2E_BUCKETS: tuple[float, ...] = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                                       60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
WINDOWS = ("5m", "30m", "1h", "6h")  # the gputide-slo group's
GROUP = "gputide-slo-vllm"
REQUESTS = "service:vllm_requests:rate{window}"
VIOLATIONS = "service:vllm_slo_violations:rate{window}"
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAME = re.compile(rf"(?:(?P<namespace>{_DNS_LABEL})/)?(?P<deployment>{_DNS_LABEL}(\.{_DNS_LABEL})*)")
_NAME_ALLOWED = ("a Deployment's name (lower-case letters, digits, '-' and '.'), optionally after its namespace "
                 "and '/', e.g. llm-chat or team-a/llm-chat")
_EPS = 1e-9  # an SLO written as 0.3 is the 0.3 bucket, whatever the binary rounding


@dataclass(frozen=True, slots=True)
class ServiceSlo:
    """One profiled service, its latency SLO and the histogram bucket its violations are counted above."""

    service: str  # the profile's name: `deployment` or `namespace/deployment`
    slo_s: float
    le: float  # the largest bucket boundary at or under slo_s

    @property
    def deployment(self) -> str:
        return self.service.rpartition("/")[2]

    @property
    def namespace(self) -> str:
        return self.service.rpartition("/")[0]

    @property
    def exact(self) -> bool:
        return abs(self.le - self.slo_s) <= _EPS * max(1.0, self.slo_s)


def parse_buckets(text: str, field: str = "--buckets") -> tuple[float, ...]:
    """`0.3,0.5,0.8` as increasing finite boundaries > 0; anything else is an InputError naming `field`."""
    allowed = "comma-separated increasing bucket boundaries in seconds, > 0, e.g. 0.3,0.5,0.8,1,1.5"
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError as exc:
        raise InputError(None, field, text, allowed) from exc
    if not all(math.isfinite(v) and v > 0 for v in values) or any(b <= a for a, b in zip(values, values[1:])):
        raise InputError(None, field, text, allowed)
    return values


def service_name(name: str, file: str | None, field: str) -> str:
    """`name` when a Deployment can have it (`deployment` or `namespace/deployment`); else an InputError naming
    `field`. The name goes into PromQL label matchers (`service="..."`) and Kubernetes calls, so a quote or a space
    in it would break (or rewrite) every query made for the service."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name.rpartition("/")[2]) > 253:
        raise InputError(file, field, name, _NAME_ALLOWED)
    return name


def choose_buckets(services: Sequence[tuple[str, float]], buckets: Sequence[float],
                   file: str | None = None, exact: bool = False) -> list[ServiceSlo]:
    """Each (name, SLO) of a profiles file, in its order, with its bucket. A name no Deployment can have, or an SLO
    under the smallest bucket, is an InputError naming the field (`services[i].name` / `.latencySloSeconds`); with
    `exact`, so is an SLO between two boundaries (a pipeline that must not judge at the boundary under it)."""
    out = []
    for i, (name, slo) in enumerate(services):
        service_name(name, file, f"services[{i}].name")
        under = [b for b in buckets if b <= slo * (1 + _EPS)]
        if not under:
            raise InputError(file, f"services[{i}].latencySloSeconds", slo,
                             f"at least {buckets[0]:g} s, the smallest bucket of vLLM's latency histogram "
                             "(another vLLM's buckets: --buckets)")
        chosen = ServiceSlo(name, slo, under[-1])
        if exact and not chosen.exact:
            over = [b for b in buckets if b > slo]
            around = f"{under[-1]:g} s" + (f" or {over[0]:g} s" if over else "")
            raise InputError(file, f"services[{i}].latencySloSeconds", slo,
                             f"a bucket boundary of vLLM's latency histogram (--exact), here {around}; without "
                             "--exact the boundary under it is used")
        out.append(chosen)
    return out


def le_matcher(boundary: float) -> str:
    """A regex for the `le` label of this boundary in either spelling: `2|2[.]0`, `0[.]5` (`[.]`: a literal dot
    without a backslash to escape twice)."""
    text = repr(float(boundary))
    spellings = [text.removesuffix(".0"), text] if text.endswith(".0") else [text]
    return "|".join(s.replace(".", "[.]") for s in spellings)


def _pods(slo: ServiceSlo, qualified: set[tuple[str, str]], window: str) -> str:
    """The service's pods over the window: its Deployment's, in its namespace, or (a bare name) in any namespace
    but those another profile names it in (that one's series are its own)."""
    matchers = [f'deployment="{slo.deployment}"']
    if slo.namespace:
        matchers.insert(0, f'namespace="{slo.namespace}"')
    else:
        others = sorted(ns for ns, deployment in qualified if deployment == slo.deployment)
        if others:
            matchers.append(f'namespace!~"{"|".join(others)}"')
    return f"max_over_time({POD_DEPLOYMENT}{{{', '.join(matchers)}}}[{window}])"


def _rules(slo: ServiceSlo, qualified: set[tuple[str, str]]) -> list[dict[str, Any]]:
    labels = {"service": slo.deployment, **({"namespace": slo.namespace} if slo.namespace else {})}
    rules = []
    for w in WINDOWS:
        every = f'rate({HISTOGRAM}{{le="+Inf"}}[{w}])'
        within = f'rate({HISTOGRAM}{{le=~"{le_matcher(slo.le)}"}}[{w}])'
        pods = f"and on (cluster, namespace, pod) {_pods(slo, qualified, w)}"
        rules.append({"record": REQUESTS.format(window=w), "labels": dict(labels), "expr": (
            f"sum by (cluster, namespace) (\n  ({every}\n   and ignoring (le) {within})\n  {pods})\n")})
        rules.append({"record": VIOLATIONS.format(window=w), "labels": dict(labels), "expr": (
            f"sum by (cluster, namespace) (\n  clamp_min({every}\n            - ignoring (le) sum without (le) ({within}), 0)\n"
            f"  {pods})\n")})
    return rules


def rule_groups(slos: Sequence[ServiceSlo]) -> list[dict[str, Any]]:
    """The `groups:` list: one group, eight rules per service (requests and violations over each window)."""
    qualified = {(s.namespace, s.deployment) for s in slos if s.namespace}
    return [{"name": GROUP, "rules": [r for s in slos for r in _rules(s, qualified)]}]


def describe(slo: ServiceSlo) -> str:
    """One line on the bucket a service's violations are counted above."""
    if slo.exact:
        return f"{slo.service}: SLO {slo.slo_s:g} s, counted at the le={slo.le:g} bucket"
    return (f"{slo.service}: SLO {slo.slo_s:g} s is not a bucket boundary; requests over {slo.le:g} s (the largest "
            f"boundary under it) count as violations")


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the PromQL) as `|` blocks, as a person writes rule files."""


_Dumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def render(slos: Sequence[ServiceSlo], buckets: Sequence[float], source: str,
           manifest_namespace: str | None = None) -> str:
    """The rule file's text: a `groups:` document, or with `manifest_namespace` a PrometheusRule in that
    namespace; a header comment says what it is, how it was made and each service's bucket."""
    header = [f"# Generated by `gputide slo-rules --services {source}`: regenerate when a latencySloSeconds changes.",
              "# The gputide-slo group (rules/gputide-recording.yaml) reads these where gputide_inference_*_total are",
              "# absent; needs gputide:pod_deployment:info from rules/serving/vllm.yaml.",
              "# vLLM e2e latency buckets assumed (s): " + ", ".join(f"{b:g}" for b in buckets),
              *(f"#   {describe(s)}" for s in slos)]
    doc: dict[str, Any] = {"groups": rule_groups(slos)}
    if manifest_namespace is not None:
        doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
               "metadata": {"name": "gputide-slo-rules", "namespace": manifest_namespace,
                            "labels": {"app.kubernetes.io/name": "gputide", "app.kubernetes.io/component": "rules"}},
               "spec": doc}
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)
    return "\n".join(header) + "\n" + body
