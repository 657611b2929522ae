"""GPU memory health in the simulator: the ECC error counters and the row remapper, as NVML reports them.

What a real board does, and what `MemoryHealth` keeps per GPU (arrays in fleet order):

* a correctable (single-bit) error is fixed in flight and only counted (`sbe_volatile`);
* an uncorrectable (double-bit) error counts in `dbe_volatile` and, on boards with a row remapper (Ampere and
  newer), records a remap of the bad row that stays *pending* until the GPU is reset (`remap_pending`);
* a reset clears the volatile counters and applies the pending remaps (`remapped_uncorrectable` grows by the
  rows that were pending);
* when a bank has no spare row left, remapping *fails* (`remap_failure`): no reset helps, the board is replaced.

`unhealthy` is what the controller must keep work off: an uncorrectable error since the last reset, a pending
remap or a failed one (docs/metrics.md, `gpu:memory_unhealthy:bool`). Boards without a row remapper (Volta,
Pascal, Turing: page retirement instead) report no remapper fields at all; `row_remapping` says which.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# catalogue models from before Ampere: they retire pages instead of remapping rows (NVML: NotSupported)
NO_ROW_REMAPPER = frozenset({"V100-SXM2-32GB", "V100-SXM2-16GB", "P100-PCIE-16GB", "T4"})


class MemoryHealth:
    """Per-GPU ECC counters and row-remapper state of a simulated fleet; faults change them, resets clear them."""

    def __init__(self, models: Sequence[str]) -> None:
        n = len(models)
        self.row_remapping = np.array([m not in NO_ROW_REMAPPER for m in models], dtype=bool)
        self.sbe_volatile = np.zeros(n, dtype=np.int64)
        self.dbe_volatile = np.zeros(n, dtype=np.int64)
        self.remapped_correctable = np.zeros(n, dtype=np.int64)
        self.remapped_uncorrectable = np.zeros(n, dtype=np.int64)
        self.pending_rows = np.zeros(n, dtype=np.int64)
        self.remap_failure = np.zeros(n, dtype=bool)

    @property
    def remap_pending(self) -> np.ndarray:
        return self.pending_rows > 0

    @property
    def unhealthy(self) -> np.ndarray:
        return (self.dbe_volatile > 0) | self.remap_pending | self.remap_failure

    def correctable(self, gpu: int, errors: int = 1) -> None:
        """Single-bit errors: counted, nothing else (the data was corrected)."""
        self.sbe_volatile[gpu] += errors

    def uncorrectable(self, gpu: int) -> None:
        """A double-bit error; with a row remapper, the bad row waits for a reset to be remapped."""
        self.dbe_volatile[gpu] += 1
        if self.row_remapping[gpu]:
            self.pending_rows[gpu] += 1

    def remap_failed(self, gpu: int) -> None:
        """No spare row left: the remap failed, for good."""
        if not self.row_remapping[gpu]:
            raise ValueError(f"GPU {gpu} has no row remapper (a model from before Ampere)")
        self.remap_failure[gpu] = True

    def repair(self, gpu: int) -> None:
        """The operator's fix: a reset (volatile counters cleared, pending remaps applied) or, after a failed remap,
        a new board (every counter at zero)."""
        if self.remap_failure[gpu]:
            self.remapped_correctable[gpu] = self.remapped_uncorrectable[gpu] = 0
            self.remap_failure[gpu] = False
        else:
            self.remapped_uncorrectable[gpu] += self.pending_rows[gpu]
        self.pending_rows[gpu] = 0
        self.sbe_volatile[gpu] = self.dbe_volatile[gpu] = 0
