"""``python -m gpuwise``."""

from gpuwise.cli.main import main

raise SystemExit(main())
