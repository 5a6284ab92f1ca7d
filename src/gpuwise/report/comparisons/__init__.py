"""Runs judged against runs, rendered.

``gpuwise compare`` in ``compare_text`` and ``compare_html``; ``gpuwise try`` in
``try_text`` and ``try_html``.
"""
