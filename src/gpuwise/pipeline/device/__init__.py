"""A pipeline's device side: batcher, staging slots, the model's step, graphs, simulated GPU."""
