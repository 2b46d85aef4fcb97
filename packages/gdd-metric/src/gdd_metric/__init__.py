"""gdd-metric package."""
