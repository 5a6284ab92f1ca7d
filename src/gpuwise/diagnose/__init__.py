"""Rules over measurements that produce Findings."""
