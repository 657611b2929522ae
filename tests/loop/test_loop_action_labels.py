"""The (type, reason) an action is counted under in `gputide_actions_total`: a training resize by the cause its
planner gave it, a hotspot shrink by its record; every label the table can give is listed, and documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from balancer.action_labels import action_classes, action_label_pairs, reason_label
from balancer.actions import Migrate, ScaleInference, ScaleTraining, SetPowerLimit, TaintNode

ROOT = Path(__file__).resolve().parents[2]


def resize(workers: int, previous: int, **kw) -> ScaleTraining:
    return ScaleTraining(reason="why", job="j", workers=workers, previous_workers=previous, **kw)


CASES = {
    "a hotspot migration": (Migrate(reason="hot", workload="w", source_gpus=(0,), target_gpus=(1,),
                                    target_node="n1"), "hotspot"),
    "a power cap": (SetPowerLimit(reason="hot", gpu=0, uuid="G", node="n0", watts=500, previous_watts=700),
                    "throttle"),
    "a power cap given back": (SetPowerLimit(reason="cool", gpu=0, uuid="G", node="n0", watts=700,
                                             previous_watts=500, give_back=True), "unthrottle"),
    "a hot taint": (TaintNode(reason="hot", node="n0"), "hot_node"),
    "a renewed hot taint": (TaintNode(reason="hot", node="n0", renew=True), "renew"),
    "a removed hot taint": (TaintNode(reason="cool", node="n0", remove=True), "cooled"),
    # the label is the action's field, not its free text (was: a reason starting "kept open" counted as kept_open)
    "a removed hot taint whose reason reads like the kept-open one": (
        TaintNode(reason="kept open: an operator's words", node="n0", remove=True), "cooled"),
    "the removal keeping the last node open": (TaintNode(reason="why", node="n0", remove=True, kept_open=True),
                                                "kept_open"),
    "a hotspot shrink": (resize(3, 4, shrunk_from=4), "hotspot"),
    "a hotspot give-back": (resize(4, 3, shrunk_from=0), "give_back"),
    "the tide's loan, a grow": (resize(6, 4, cause="loan"), "loan"),
    "the tide's reclaim, a shrink": (resize(2, 4, reclaim=True, cause="reclaim"), "reclaim"),
    "co-location's shrink for an SLO": (resize(3, 4, cause="colocation_slo"), "colocation_slo"),
    "co-location's give-back on slack, a grow": (resize(4, 3, cause="colocation_slack"), "colocation_slack"),
    "a grow with no cause is no hotspot give-back": (resize(4, 3), "resize"),
    "a shrink with no cause is no hotspot shrink": (resize(3, 4), "resize"),
    "an inference scale-up reclaims": (ScaleInference(reason="forecast", service="s", replicas=3, previous_replicas=2),
                                       "reclaim"),
    "an inference scale-down lends": (ScaleInference(reason="forecast", service="s", replicas=2, previous_replicas=3),
                                      "loan"),
}


@pytest.mark.parametrize("case", CASES)
def test_each_action_is_counted_under_its_reason_and_that_pair_is_listed(case):
    action, reason = CASES[case]
    assert reason_label(action) == reason
    assert (action.kind, reason) in action_label_pairs()


def test_only_a_removal_is_kept_open():
    with pytest.raises(ValueError, match="n0: kept_open is a removal's"):
        TaintNode(reason="hot", node="n0", kept_open=True)


def test_the_pairs_cover_every_action_class_once_each():
    pairs = action_label_pairs()
    assert len(pairs) == len(set(pairs))
    assert {kind for kind, _ in pairs} == {cls.kind for cls in action_classes()}
    assert {ScaleTraining, ScaleInference, Migrate, SetPowerLimit, TaintNode} <= set(action_classes())


def test_docs_name_every_reason_of_every_action_type():
    row = next(line for line in (ROOT / "docs" / "metrics.md").read_text().splitlines()
               if line.startswith("| `gputide_actions_total`"))
    for kind, reason in action_label_pairs():
        assert re.search(rf"{kind} [^;]*`{reason}`", row), f"docs/metrics.md: {kind} {reason} not documented"
