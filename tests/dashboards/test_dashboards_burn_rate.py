"""The SLO burn-rate panel reads as the burn-rate alerts do: per service, both of an alert's windows at once, against
the alerts' 99 % objective (a 1 % budget: latencySloSeconds is a p99 target).

InferenceSloBurnRateFast fires for a service whose 5m and 1h error ratios are both above 14.4 x the 1 % budget, the
slow one for 30m and 6h above 6 x, the tickets for 2h and 1d above 3 x and for 6h and 3d above 1 x
(rules/gputide-alerts.yaml). Service a burns fast over 5 minutes only (20 x on 5m, 1 x on 1h), service b burnt an
hour ago (0 on 5m, 20 x on 1h): neither page fires. The panel once drew the worst service per window, 20 on 5m (a)
and 20 on 1h (b), both above 14.4, and had no 30m line at all for the slow alert. Service c sits at its p99 target
(1 % slow everywhere): a burn of 1, which the panel's old 99.9 % objective drew as 10, above the slow page's 6.
"""

from __future__ import annotations

import pytest
from panel_eval import ROOT, panel_query, run

BOARD = "tidal-capacity.json"
# the recording rules name each line (service:inference_slo_name:info, from the ratios given here)
RULES = ROOT / "rules" / "gputide-recording.yaml"
# service -> error ratio per window
RATIOS = {"a": {"5m": 0.2, "1h": 0.01, "30m": 0.04, "2h": 0.05, "6h": 0.008, "1d": 0.02, "3d": 0.005},
          "b": {"5m": 0.0, "1h": 0.2, "30m": 0.07, "2h": 0.02, "6h": 0.07, "1d": 0.04, "3d": 0.012},
          "c": {w: 0.01 for w in ("5m", "1h", "30m", "2h", "6h", "1d", "3d")}}
LEGENDS = ("{{qualified_service}} fast (5m and 1h)", "{{qualified_service}} slow (30m and 6h)",
           "{{qualified_service}} 1d ticket (2h and 1d)", "{{qualified_service}} 3d ticket (6h and 3d)")
# service -> one line per legend: the lower of each alert's two windows, in budgets
LINES = {"a": (1, 0.8, 2, 0.5), "b": (0, 7, 2, 1.2), "c": (1, 1, 1, 1)}


@pytest.mark.integration
def test_each_line_is_above_an_alerts_factor_only_where_the_alert_fires(promtool, tmp_path):
    series = [{"series": f'service:inference_slo_violations:ratio_rate{w}{{cluster="c", service="{svc}"}}',
               "values": f"{r}x20"} for svc, windows in RATIOS.items() for w, r in windows.items()]
    tests = []
    for i, legend in enumerate(LEGENDS):
        tests.append({"expr": f"round({panel_query(BOARD, 'SLO burn rate', legend)}, 0.01)", "eval_time": "4m",
                      "exp_samples": [{"labels": f'{{cluster="c", service="{svc}", qualified_service="c: {svc}"}}',
                                       "value": lines[i]}
                                      for svc, lines in LINES.items()]})
    run(promtool, tmp_path, series, tests, rules=RULES, interval="15s")
