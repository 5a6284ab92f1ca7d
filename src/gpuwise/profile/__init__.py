"""Step-phase timing: hooks into an unmodified script, or an explicit API."""
