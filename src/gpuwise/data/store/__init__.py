"""The gpuwise store: one JSON header and raw binary shards in a directory.

``read`` holds the layout and opens a store (``Store``, ``open_store``); ``check`` checks a
header's values before anything is opened, ``verify`` a store's shards, ``write`` writes a
store record by record, and ``owner`` decides what a writer may replace.
"""
