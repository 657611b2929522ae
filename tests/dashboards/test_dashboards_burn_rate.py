"""The SLO burn-rate panel reads as the burn-rate alerts do: per service, both of an alert's windows at once.

InferenceSloBurnRateFast fires for a service whose 5m and 1h error ratios are both above 14.4 x the 0.1 % budget, the
slow one for 30m and 6h above 6 x (rules/gputide-alerts.yaml). Service a burns fast over 5 minutes only (20 x on 5m,
1 x on 1h), service b burnt an hour ago (0 on 5m, 20 x on 1h): neither alert fires. The panel drew the worst service
per window, 20 on 5m (a) and 20 on 1h (b), both above 14.4, and had no 30m line at all for the slow alert.
"""

from __future__ import annotations

import pytest
from panel_eval import panel_query, run

BOARD = "tidal-capacity.json"
# service -> error ratio per window
RATIOS = {"a": {"5m": 0.02, "1h": 0.001, "30m": 0.004, "6h": 0.0008},
          "b": {"5m": 0.0, "1h": 0.02, "30m": 0.007, "6h": 0.007}}
# service -> (fast line, slow line): the lower of each alert's two windows, in budgets
LINES = {"a": (1, 0.8), "b": (0, 7)}


@pytest.mark.integration
def test_each_line_is_above_an_alerts_factor_only_where_the_alert_fires(promtool, tmp_path):
    series = [{"series": f'service:inference_slo_violations:ratio_rate{w}{{cluster="c", service="{svc}"}}',
               "values": f"{r}x20"} for svc, windows in RATIOS.items() for w, r in windows.items()]
    tests = []
    for i, legend in enumerate(("{{service}} fast (5m and 1h)", "{{service}} slow (30m and 6h)")):
        tests.append({"expr": f"round({panel_query(BOARD, 'SLO burn rate', legend)}, 0.01)", "eval_time": "4m",
                      "exp_samples": [{"labels": f'{{cluster="c", service="{svc}"}}', "value": lines[i]}
                                      for svc, lines in LINES.items()]})
    run(promtool, tmp_path, series, tests, interval="15s")
