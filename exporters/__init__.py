"""gputide's GPU exporter: dcgm-exporter-compatible series from NVML or a simulated fleet."""
