"""The catalogue's figures that were checked against what the boards report (`nvidia-smi -q`, dcgm-exporter) or
NVIDIA's product briefs and MIG user guide. Each row pins one model; a change here needs a source."""

from __future__ import annotations

import pytest

from balancer import catalog, mig

# key: (NVML name, TDP W, min power limit W, slowdown C, shutdown C, max SM clock MHz, memory GiB); None: not
# checked against a board (the row keeps its value, this table does not pin it)
VENDOR = {
    # nvidia-smi -q on an HGX board (H800 SXM5, the H100 SXM5's board and thresholds; driver 525.105.17): max
    # operating 87, slowdown 89, shutdown 92 C; power limit 200..700 W; max clocks 1980 MHz
    "H100-SXM": ("NVIDIA H100 80GB HBM3", 700, 200, 89, 92, 1980, 80),
    # read off the H200 of bench/device/h200-2026-12-04 (dcgm-exporter SLOWDOWN 89, SHUTDOWN 95)
    "H200-SXM": ("NVIDIA H200", 700, 200, 89, 95, 1980, 143771 / 1024),
    # product brief PB-11133-001_v02: TDP 350 W
    "H100-PCIE": ("NVIDIA H100 PCIe", 350, None, None, None, None, 80),
    # nvidia-smi -q (thamada/nvidia-smi nvsim/H100NVLx2_smi.py, driver 550.54.14): 95830 MiB, 200..400 W (default
    # 310 there), 1785 MHz; thresholds as T.Limit margins -2 / -8 at 32 + 55 = 87 C (module docstring)
    "H100-NVL": ("NVIDIA H100 NVL", 400, 200, 89, 95, 1785, 95830 / 1024),
    # nvidia-smi -q on an 8-GPU board (XueSongTap.github.io _posts/2024-01-04-nvidia-smi-more.md, driver
    # 535.129.03): 85 / 89 / 92 C, 100..400 W, 1410 MHz, 40960 MiB
    "A100-SXM4-40GB": ("NVIDIA A100-SXM4-40GB", 400, 100, 89, 92, 1410, 40),
    # nvidia-smi on an HGX B200 (NVIDIA/nccl-tests#333, driver 570.158.01): cap 1000 W, 183359 MiB; no -q found,
    # so the minimum limit, thresholds and clock stay assumed
    "B200-SXM": ("NVIDIA B200", 1000, None, None, None, None, 183359 / 1024),
    # nvidia-smi -q (driver 525.60.13): 85 / 89 / 92 C, 100..400 W, 1410 MHz
    "A100-SXM4-80GB": ("NVIDIA A100-SXM4-80GB", 400, 100, 89, 92, 1410, 80),
    "A100-PCIE-40GB": ("NVIDIA A100-PCIE-40GB", 250, None, None, None, None, 40),
    # nvidia-smi -q: 85 / 89 / 92 C, 150..300 W, 1410 MHz
    "A100-PCIE-80GB": ("NVIDIA A100 80GB PCIe", 300, 150, 89, 92, 1410, 80),
    # nvidia-smi -q (driver 550.127.05, leptonai/gpud e2e/mock/nvidia-smi/test_data.go): 91 / 98 / 101 C,
    # 100..150 W, 1695 MHz
    "A10": ("NVIDIA A10", 150, 100, 98, 101, 1695, 24),
    # nvidia-smi -q (driver 530.30.02): 85 / 93 / 96 C, 60..70 W, 1590 MHz
    "T4": ("Tesla T4", 70, 60, 93, 96, 1590, 16),
    # nvidia-smi -q (thresholds as T.Limit margins only): 40..72 W, 2040 MHz
    "L4": ("NVIDIA L4", 72, 40, None, None, 2040, 24),
    # nvidia-smi -q: 83 / 87 / 90 C, 150..300 W
    "V100-SXM2-32GB": ("Tesla V100-SXM2-32GB", 300, 150, 87, 90, None, 32),
    "V100-SXM2-16GB": ("Tesla V100-SXM2-16GB", None, None, None, None, None, 16),
}
FIELDS = ("model_name", "tdp_w", "min_power_limit_w", "slowdown_temp_c", "shutdown_temp_c", "max_sm_clock_mhz",
          "memory_gib")


@pytest.mark.parametrize("key", sorted(VENDOR))
def test_catalogue_row_matches_vendor_figures(key):
    s = catalog.CATALOGUE[key]
    want = {f: v for f, v in zip(FIELDS, VENDOR[key], strict=True) if v is not None}
    assert {f: getattr(s, f) for f in want} == {f: pytest.approx(v) if f == "memory_gib" else v
                                                for f, v in want.items()}


@pytest.mark.parametrize("key", sorted(VENDOR))
def test_nvml_name_and_gfd_label_find_the_row(key):
    name = VENDOR[key][0]
    assert catalog.key_of(name) == key
    assert catalog.key_of(name.replace(" ", "-")) == key   # nvidia.com/gpu.product
    assert catalog.by_model_name(name) is catalog.CATALOGUE[key]


def test_a100_80gb_pcie_is_not_read_as_the_40gb_or_sxm_board():
    # NVML spells the 80GB PCIe board "NVIDIA A100 80GB PCIe", unlike "NVIDIA A100-PCIE-40GB"
    assert catalog.key_of("NVIDIA-A100-80GB-PCIe") == "A100-PCIE-80GB"
    assert catalog.get("NVIDIA A100 80GB PCIe").memory_gib == 80


@pytest.mark.parametrize(("label", "key"), [
    ("NVIDIA-H100-NVL", "H100-NVL"),              # not the H100 PCIe: a different board, 94 GB and NVLink pairs
    ("NVIDIA-A100-SXM4-40GB", "A100-SXM4-40GB"),  # not the 80GB SXM4 nor the 40GB PCIe
    ("NVIDIA-B200", "B200-SXM"),
])
def test_gpu_feature_discovery_labels_of_the_new_boards(label, key):
    """The nvidia.com/gpu.product values GPU feature discovery writes for these boards name their own rows, not a
    board that resembles them."""
    assert catalog.key_of(label) == key


@pytest.mark.parametrize("key", ["H100-NVL", "A100-SXM4-40GB", "B200-SXM"])
def test_new_rows_are_ordered_like_a_board(key):
    s = catalog.CATALOGUE[key]
    assert s.idle_w < s.min_power_limit_w < s.tdp_w
    assert s.slowdown_temp_c < s.shutdown_temp_c
    assert s.nvlink


@pytest.mark.parametrize(("key", "gpus", "domain"), [("H100-NVL", 8, 2), ("A100-SXM4-40GB", 8, 8), ("B200-SXM", 8, 8)])
def test_nvlink_domains_of_the_new_boards(key, gpus, domain):
    """An H100 NVL pairs its GPUs with NVLink bridges; an SXM board (A100 SXM4, HGX B200) is one NVSwitch domain."""
    from balancer.app.scheduling_state import nvlink_domain_size
    assert nvlink_domain_size({"labels": {}}, key, gpus) == domain


def test_new_rows_throughput_follows_the_data_sheet_ratios():
    """Derived from NVIDIA's dense BF16 and memory-bandwidth figures against the nearest row with MLPerf results
    (module docstring): training by the BF16 ratio, inference by the geometric mean of both ratios."""
    h100, a100 = catalog.CATALOGUE["H100-SXM"], catalog.CATALOGUE["A100-SXM4-80GB"]
    cases = {"H100-NVL": (h100, 835 / 989, 3.9 / 3.35), "B200-SXM": (h100, 2250 / 989, 8 / 3.35),
             "A100-SXM4-40GB": (a100, 312 / 312, 1555 / 2039)}
    for key, (base, bf16, bandwidth) in cases.items():
        s = catalog.CATALOGUE[key]
        assert s.training_tput == pytest.approx(base.training_tput * bf16, abs=0.05), key
        assert s.inference_tput == pytest.approx(base.inference_tput * (bf16 * bandwidth) ** 0.5, abs=0.05), key


@pytest.mark.parametrize(("key", "one", "two", "half", "full"), [
    ("A100-SXM4-80GB", 10, 20, 40, 80),
    ("A100-PCIE-40GB", 5, 10, 20, 40),
    ("A100-PCIE-80GB", 10, 20, 40, 80),
    ("H100-SXM", 10, 20, 40, 80),
    ("H100-PCIE", 10, 20, 40, 80),
    ("H200-SXM", 18, 35, 71, 141),
    ("A100-SXM4-40GB", 5, 10, 20, 40),
    ("H100-NVL", 12, 24, 47, 94),
    ("B200-SXM", 23, 45, 90, 180),
])
def test_mig_profiles_match_the_user_guide(key, one, two, half, full):
    """NVIDIA MIG user guide, 'Supported MIG Profiles': 7 compute slices, 8 memory slices on these boards."""
    assert dict(mig.PROFILES[key]) == {
        f"1g.{one}gb": (1, 1), f"1g.{one}gb+me": (1, 1), f"1g.{two}gb": (1, 2), f"2g.{two}gb": (2, 2),
        f"3g.{half}gb": (3, 4), f"4g.{half}gb": (4, 4), f"7g.{full}gb": (7, 8)}
    assert mig.COMPUTE_SLICES == 7
