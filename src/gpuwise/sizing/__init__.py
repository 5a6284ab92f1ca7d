"""Memory and FLOP estimation, batch-size tuning, hardware advice."""
