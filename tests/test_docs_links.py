"""Every relative link and anchor in README.md and docs/ resolves."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|\bhref=\"([^\"]+)\"")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors (lower case, punctuation dropped, spaces as dashes, repeats numbered) and explicit ids."""
    text = FENCE.sub("", path.read_text())
    found: set[str] = set(re.findall(r'<a id="([^"]+)"', text))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for document in documents():
        for match in LINK.finditer(FENCE.sub("", document.read_text())):
            target = match.group(1) or match.group(2)
            if re.match(r"^[a-z]+:", target):  # https:, mailto:: not checked here (no network)
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (document.parent / file_part).resolve() if file_part else document
            if not resolved.exists():
                broken.append(f"{document.relative_to(REPO)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{document.relative_to(REPO)}: {target} (no such anchor)")
    assert broken == []


def test_every_link_into_the_repository_from_the_code_names_a_file_that_exists() -> None:
    """The magics' help points at guides by their address on GitHub: each must be a file of this checkout."""
    home = "https://github.com/tpu-nb/tpu_nb/blob/main/"
    named = {
        match for source in (REPO / "tpu_nb").rglob("*.py") for match in re.findall(re.escape(home) + r"([\w./-]+)", source.read_text())
    }
    assert "docs/guides/train-cell.md" in named
    assert [path for path in sorted(named) if not (REPO / path).is_file()] == []
