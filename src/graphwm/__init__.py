"""graphwm: integration layer."""
