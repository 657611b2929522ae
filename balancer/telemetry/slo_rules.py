"""SLO burn-rate rules from vLLM's metrics: the rule file `gputide slo-rules` writes.

A service's `latencySloSeconds` is a p99 target: the controller sizes capacity so that 99% of requests finish
within it. The objective the alerts hold a service to is therefore 99% of requests good (`--objective`, 0.99 by
default), an error budget of 1%: a service sitting exactly at its p99 target spends its budget at 1x and no alert
fires. (Against a 99.9% objective, that healthy service read as burning 10x and the 6x page fired.)

Per profiled service, from vLLM's end-to-end latency histogram and its finished-request counter:

    service:vllm_requests:rate<W>        rate of the histogram's +Inf bucket (every finished request)
    service:vllm_slo_violations:rate<W>  requests over the SLO's bucket, plus those vLLM finished with an error

for W in 5m, 30m, 1h, 2h, 6h, 1d, 3d, labelled `service` (the Deployment's name, as the profile's `name`) and
`namespace`; `service:vllm_slo_violations:ratio_rate<W>` is their ratio. The alerts are the Google SRE workbook's
multi-window, multi-burn-rate ones (`BURN_ALERTS`): page on 14.4x over 1h and 5m or 6x over 6h and 30m, ticket
(severity warning: act today) on 3x over 1d and 2h or 1x over 3d and 6h. None has a `for:`: the short window is
what keeps an alert from firing on a burn that has stopped (it resets within minutes), and a `for:` would only
delay the page by that much more budget (the slow page's 15 minutes were 1.25% of a 30-day budget at 6x).

A service is `SERVICE_IDENTITY`, (cluster, namespace, service): what these rules label each series with, and what
rules/gputide-recording.yaml and rules/gputide-alerts.yaml join them on (tests/rules hold them to it). Its rates
are also what the `gputide-slo` group of rules/gputide-recording.yaml falls back to (`or on (cluster, namespace,
service)`) where the simulated fleet's gputide_inference_*_total counters are absent, and the static burn-rate
alerts there skip the (cluster, namespace, service) these rules cover, so a counter-only service still alerts
there while one of the same name in another namespace is on vLLM. They are named apart from that group's own
`service:inference_*` series on purpose: two rules recording one series fight over its samples wherever both have
data, so each name has one writer.

What counts as a violation:

- a request that finished over the SLO's bucket (below), whatever its finish reason;
- a request vLLM finished with an error: `vllm:request_success_total{finished_reason="error"}` (vLLM's v1 engine
  counts every finished request there by reason: stop, length, abort, error, repetition; `error` is a
  request-level internal error, always answered 500). Such a request is also in the latency histogram, often
  fast, where it counted as good. The histogram does not say how fast the errors were, so every error is taken
  from the good requests (good = within the bucket - errors, at least 0): an error that was also slow counts
  twice, the ratio errs high (towards firing early), never over 100%. A vLLM without the `error` reason (older
  releases: stop, length, abort) has no such series, and its pods count latency alone.

Not counted as violations: `abort` (the client went away; a client that gave up on a slow request counts by its
latency, which is over the SLO if it waited that long), `length` and `repetition` (answers). Not counted at all:
requests that never reached the engine (refused by the API server, a 4xx, a gateway's timeout or 5xx): vLLM's
engine metrics never see them; count them at the gateway.

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
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from balancer.errors import InputError

HISTOGRAM = "vllm:e2e_request_latency_seconds_bucket"
FINISHED = "vllm:request_success_total"  # every finished request, by finished_reason
ERROR_REASON = "error"  # vLLM's FinishReason.ERROR: a request-level internal error (HTTP 500)
POD_DEPLOYMENT = "gputide:pod_deployment:info"  # rules/serving/vllm.yaml
VLLM_E2E_BUCKETS: tuple[float, ...] = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                                       60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")  # the gputide-slo group reads the 5m, 30m, 1h and 6h ones
# What names a service in every SLO series, generated or static: `service` is the rule's own label, the rest are
# the vLLM series' own (each pod's scrape labels), kept through the sums
SERVICE_IDENTITY = ("cluster", "namespace", "service")
_SUM_BY = ", ".join(label for label in SERVICE_IDENTITY if label != "service")
GROUP = "gputide-slo-vllm"
ALERT_GROUP = "gputide-slo-vllm-alerts"
REQUESTS = "service:vllm_requests:rate{window}"
VIOLATIONS = "service:vllm_slo_violations:rate{window}"
RATIO = "service:vllm_slo_violations:ratio_rate{window}"
DEFAULT_OBJECTIVE = 0.99  # latencySloSeconds is a p99 target
BUDGET_PERIOD_H = 30 * 24  # the burn factors are the workbook's for a 30-day budget
RUNBOOK = "https://github.com/gputide/gputide/blob/main/docs/runbooks.md#{anchor}"
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAME = re.compile(rf"(?:(?P<namespace>{_DNS_LABEL})/)?(?P<deployment>{_DNS_LABEL}(\.{_DNS_LABEL})*)")
_NAME_ALLOWED = ("a Deployment's name (lower-case letters, digits, '-' and '.'), optionally after its namespace "
                 "and '/', e.g. llm-chat or team-a/llm-chat")
_EPS = 1e-9  # an SLO written as 0.3 is the 0.3 bucket, whatever the binary rounding
_HOURS = {"5m": 5 / 60, "30m": 0.5, "1h": 1, "2h": 2, "6h": 6, "1d": 24, "3d": 72}
_SPOKEN = {"5m": "5 minutes", "30m": "30 minutes", "1h": "hour", "2h": "2 hours", "6h": "6 hours", "1d": "day",
           "3d": "3 days"}  # "over the last ..."
_SPAN = {"1h": "1 hour", "6h": "6 hours", "1d": "1 day", "3d": "3 days"}  # "... of a 30-day budget in ..."


@dataclass(frozen=True, slots=True)
class BurnAlert:
    """One alert of the multi-window, multi-burn-rate recipe: the budget burns `factor` times too fast over both
    windows. `summary` ends "Inference service X is ..."."""

    name: str
    factor: float
    long: str
    short: str
    severity: str
    summary: str

    def spent(self) -> float:
        """The share of a 30-day budget this burn spends over the long window (14.4x over 1h: 2%)."""
        return self.factor * _HOURS[self.long] / BUDGET_PERIOD_H


# Page (critical: act now) and ticket (warning: act today; the project has no `ticket` severity) alerts.
BURN_ALERTS = (
    BurnAlert("InferenceSloBurnRateFast", 14.4, "1h", "5m", "critical", "burning its SLO budget fast"),
    BurnAlert("InferenceSloBurnRateSlow", 6, "6h", "30m", "critical", "burning its SLO budget"),
    BurnAlert("InferenceSloBurnRate1d", 3, "1d", "2h", "warning", "spending its SLO budget too fast"),
    BurnAlert("InferenceSloBurnRate3d", 1, "3d", "6h", "warning", "spending its whole SLO budget"),
)


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


def parse_objective(text: str, field: str = "--objective") -> float:
    """`0.99` as a float strictly between 0.5 and 1; anything else is an InputError naming `field`."""
    allowed = "a number between 0.5 and 1, both excluded: the share of requests that must be good, e.g. 0.99 " \
              "for a p99 latency target"
    try:
        value = float(text)
    except ValueError as exc:
        raise InputError(None, field, text, allowed) from exc
    if not 0.5 < value < 1:  # NaN fails too
        raise InputError(None, field, text, allowed)
    return value


def _percent(share: float) -> str:
    """0.99 -> `99%`, 0.144 -> `14.4%`, 0.0005 -> `0.05%` (no binary-rounding tails)."""
    return f"{100 * share:.10g}%"


def _budget(objective: float) -> str:
    """The error budget as PromQL writes it: 0.99 -> `0.01`."""
    return f"{round(1 - objective, 12):g}"


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
        errors = f'rate({FINISHED}{{finished_reason="{ERROR_REASON}"}}[{w}])'
        # good: within the bucket less every error (the histogram cannot tell how fast they were); a pod whose
        # vLLM has no error reason counts its latency alone
        good = (f"(clamp_min(sum without (le) ({within})\n"
                f"              - ignoring (finished_reason) {errors}, 0)\n"
                f"    or sum without (le) ({within}))")
        pods = f"and on (cluster, namespace, pod) {_pods(slo, qualified, w)}"
        rules.append({"record": REQUESTS.format(window=w), "labels": dict(labels), "expr": (
            f"sum by ({_SUM_BY}) (\n  ({every}\n   and ignoring (le) {within})\n  {pods})\n")})
        rules.append({"record": VIOLATIONS.format(window=w), "labels": dict(labels), "expr": (
            f"sum by ({_SUM_BY}) (\n  clamp_min({every}\n    - ignoring (le) {good}, 0)\n  {pods})\n")})
    return rules


def _alert(alert: BurnAlert, objective: float) -> dict[str, Any]:
    budget = _budget(objective)
    threshold = f"({alert.factor:g} * {budget})"
    over = _percent(alert.factor * (1 - objective))
    return {
        "alert": alert.name,
        "expr": (f"{RATIO.format(window=alert.short)} > {threshold}\nand\n"
                 f"{RATIO.format(window=alert.long)} > {threshold}\n"),
        "labels": {"severity": alert.severity},
        "annotations": {
            "summary": f"Inference service {{{{ $labels.service }}}} is {alert.summary}",
            "description": (
                "{{ with $labels.cluster }}Cluster {{ . }}: {{ end }}{{ $value | humanizePercentage }} of requests to "
                "{{ $labels.service }}{{ with $labels.namespace }} in {{ . }}{{ end }} missed their latency SLO or "
                f"failed over the last {_SPOKEN[alert.short]} and more than {over} over the last "
                f"{_SPOKEN[alert.long]}: {alert.factor:g}x the {_percent(1 - objective)} error budget of a "
                f"{_percent(objective)} objective (the SLO is a p{100 * objective:.10g} latency target), "
                f"{_percent(alert.spent())} of a 30-day budget in {_SPAN[alert.long]}."),
            "runbook_url": RUNBOOK.format(anchor=alert.name.lower()),
        },
    }


def rule_groups(slos: Sequence[ServiceSlo], objective: float = DEFAULT_OBJECTIVE) -> list[dict[str, Any]]:
    """The `groups:` list: the recording group (requests and violations of each service over each window, and
    their ratios) and the alerts' group, which holds every service to `objective`."""
    qualified = {(s.namespace, s.deployment) for s in slos if s.namespace}
    ratios = [{"record": RATIO.format(window=w), "expr": f"{VIOLATIONS.format(window=w)} / {REQUESTS.format(window=w)}"}
              for w in WINDOWS]
    return [{"name": GROUP, "rules": [r for s in slos for r in _rules(s, qualified)] + ratios},
            {"name": ALERT_GROUP, "rules": [_alert(a, objective) for a in BURN_ALERTS]}]


def describe(slo: ServiceSlo) -> str:
    """One line on the bucket a service's violations are counted above."""
    if slo.exact:
        return f"{slo.service}: SLO {slo.slo_s:g} s, counted at the le={slo.le:g} bucket"
    return (f"{slo.service}: SLO {slo.slo_s:g} s is not a bucket boundary; requests over {slo.le:g} s (the largest "
            f"boundary under it) count as violations")


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the PromQL) as `|` blocks, as a person writes rule files."""


_Dumper.add_representer(
    str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def render(slos: Sequence[ServiceSlo], buckets: Sequence[float], source: str,
           manifest_namespace: str | None = None, objective: float = DEFAULT_OBJECTIVE) -> str:
    """The rule file's text: a `groups:` document, or with `manifest_namespace` a PrometheusRule in that
    namespace; a header comment says what it is, how it was made, the objective and each service's bucket."""
    header = [f"# Generated by `gputide slo-rules --services {source}`: regenerate when a latencySloSeconds changes.",
              *textwrap.wrap(
                  f"Objective: {_percent(objective)} of requests good (--objective {objective}: latencySloSeconds "
                  f"is a p{100 * objective:.10g} target), an error budget of {_percent(1 - objective)}. Page "
                  "(critical) on 14.4x over 1h and 5m or 6x over 6h and 30m; ticket (warning) on 3x over 1d and 2h or "
                  "1x over 3d and 6h. A violation is a request over its SLO's bucket or one vLLM finished with an "
                  f'error ({FINISHED}{{finished_reason="{ERROR_REASON}"}}); an aborted request counts by its '
                  "latency, and requests that never reached the engine (refused by the API server, a gateway's "
                  "errors) are not seen at all.", width=112, initial_indent="# ", subsequent_indent="# ",
                  break_on_hyphens=False),
              "# The gputide-slo group (rules/gputide-recording.yaml) reads these where gputide_inference_*_total are",
              "# absent; needs gputide:pod_deployment:info from rules/serving/vllm.yaml.",
              "# vLLM e2e latency buckets assumed (s): " + ", ".join(f"{b:g}" for b in buckets),
              *(f"#   {describe(s)}" for s in slos)]
    doc: dict[str, Any] = {"groups": rule_groups(slos, objective)}
    if manifest_namespace is not None:
        doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
               "metadata": {"name": "gputide-slo-rules", "namespace": manifest_namespace,
                            "labels": {"app.kubernetes.io/name": "gputide", "app.kubernetes.io/component": "rules"}},
               "spec": doc}
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)
    return "\n".join(header) + "\n" + body
