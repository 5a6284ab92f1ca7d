"""A pipeline's CPU workers: the pre and post loops, pre in processes, and the thread plan."""
