"""Rendering results: terminal text, JSON, HTML, Perfetto traces."""
