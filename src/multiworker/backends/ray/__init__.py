"""The Ray backend (placeholder until the controller lands)."""
