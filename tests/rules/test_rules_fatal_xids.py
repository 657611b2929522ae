"""The fatal XIDs are one list: the controller's (`balancer.model.FATAL_XIDS`, which keeps a GPU from new work and
from capacity), the recording rule gpu:xid_fatal:bool that dashboards and alerts read, and the metrics contract
(docs/metrics.md). A code added to one and not the others would have the controller and the pager disagree."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from balancer.model import FATAL_XIDS

ROOT = Path(__file__).resolve().parents[2]


def _rule_expr(record: str) -> str:
    doc = yaml.safe_load((ROOT / "rules" / "gputide-recording.yaml").read_text())
    exprs = [r["expr"] for g in doc["groups"] for r in g["rules"] if r.get("record") == record]
    assert len(exprs) == 1, f"{record}: {len(exprs)} rules"
    return exprs[0]


def test_recording_rule_names_the_controllers_fatal_xids():
    codes = {int(c) for c in re.findall(r"gpu:xid_last:code == bool (\d+)", _rule_expr("gpu:xid_fatal:bool"))}
    assert codes == set(FATAL_XIDS)


def test_metrics_contract_names_the_controllers_fatal_xids():
    text = (ROOT / "docs" / "metrics.md").read_text()
    para = text[text.index("Fatal XIDs (`gpu:xid_fatal:bool`"):]
    para = para[:para.index("All page")]
    codes = set()
    for lo, hi in re.findall(r"\b(\d{2,3})(?:-(\d{2,3}))?\b", para):   # "144-150" names the codes between too
        codes.update(range(int(lo), int(hi or lo) + 1))
    assert codes == set(FATAL_XIDS)


def test_the_list_has_no_repeats():
    assert len(set(FATAL_XIDS)) == len(FATAL_XIDS)
