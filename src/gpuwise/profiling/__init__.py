"""Step-phase timing: hooks into an unmodified script, or an explicit API.

The explicit API is ``gpuwise.profile()`` / ``gpuwise.watch()`` (``gpuwise.session``); this
package is what they and ``gpuwise profile -- CMD`` are built on. It imports nothing
heavy: ``sitecustomize`` imports ``gpuwise.profiling.hooks`` in every process of a
profiled job.
"""
