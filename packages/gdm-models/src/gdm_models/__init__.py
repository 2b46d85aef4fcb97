"""gdm-models package."""
