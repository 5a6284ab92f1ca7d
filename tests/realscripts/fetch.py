"""Fetch the real training scripts of ``sources.py`` at their pinned commits.

Usage::

    python -m tests.realscripts.fetch                      # from GitHub (raw files)
    python -m tests.realscripts.fetch --git-dir karpathy/makemore=PATH ...

``--git-dir`` reads a repository's files from a local clone or mirror (``git show
COMMIT:PATH``) instead of the network. Every file is checked against its SHA-256; a
mismatch is an error. The files go to ``tests/realscripts/.cache/`` (ignored by git).
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import urllib.request

from tests.realscripts.anatomy_sources import ANATOMY_SOURCES
from tests.realscripts.sources import CACHE, FRAMEWORK_SOURCES, SOURCES
from tests.realscripts.step_sources import STEP_SOURCES

RAW = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"


def read(repo: str, commit: str, path: str, git_dirs: dict[str, str]) -> bytes:
    """The file's bytes at ``commit``, from a local git directory or GitHub."""
    if repo in git_dirs:
        cmd = ["git", "--git-dir", git_dirs[repo], "show", f"{commit}:{path}"]
        return subprocess.run(cmd, check=True, capture_output=True).stdout
    url = RAW.format(repo=repo, commit=commit, path=urllib.request.quote(path))
    with urllib.request.urlopen(url, timeout=30) as response:
        return bytes(response.read())


def fetch(git_dirs: dict[str, str]) -> list[str]:
    """Fetch every file; return the problems (empty when all arrived intact)."""
    problems = []
    for source in (*SOURCES, *FRAMEWORK_SOURCES, *ANATOMY_SOURCES, *STEP_SOURCES):
        files = ((source.path, source.sha256), *source.companions)
        for path, sha256 in files:
            target = CACHE / source.repo.replace("/", "+") / path
            try:
                data = read(source.repo, source.commit, path, git_dirs)
            except (OSError, subprocess.CalledProcessError) as err:
                problems.append(f"{source.repo}:{path}: {err}")
                continue
            if hashlib.sha256(data).hexdigest() != sha256:
                problems.append(f"{source.repo}:{path}: SHA-256 differs from the pinned one")
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git-dir", action="append", default=[], metavar="OWNER/NAME=DIR")
    args = parser.parse_args(argv)
    git_dirs = dict(item.split("=", 1) for item in args.git_dir)
    problems = fetch(git_dirs)
    for problem in problems:
        print(f"fetch: {problem}", file=sys.stderr)
    every = (*SOURCES, *FRAMEWORK_SOURCES, *ANATOMY_SOURCES, *STEP_SOURCES)
    print(f"fetched {sum(s.local.exists() for s in every)} of {len(every)} scripts")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
