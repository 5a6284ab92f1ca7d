"""Hardware samplers and recorded-log readers."""
