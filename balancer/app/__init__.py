"""Applications built from the loop: simulation scenarios, the demo, the soak run."""
