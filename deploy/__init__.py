"""Kubernetes deployment for gputide (kustomize base, components and overlays) and its generator."""
