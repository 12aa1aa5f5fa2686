"""Debian 13's Python 3.13, the Python Colab's TPU runtime runs, for `make test-compat`: a debootstrapped tree used through chroot.

    python scripts/debian13.py tree               # build .debian13/ once (debootstrap, as root; about 90 s)
    python scripts/debian13.py run -- ARGV...     # run ARGV inside it, in this directory

This machine's Python is 3.11 and Debian's registry has no 3.12, but it has
Debian 13, whose python3.13 installs into a directory tree with debootstrap
and nothing else. `run` enters it through chroot in a private mount
namespace (`unshare -m`): /proc, /sys, /dev (with /dev/shm), /tmp and the
directory above this checkout (the checkout itself, and ../shared) and uv's
cache are bind-mounted at their own paths, so every path means the same inside and
out, and the mounts vanish with the command. A venv made inside
(`.venv-colab`, by `compat_env.py`) is this checkout's like any other.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TREE = REPO / ".debian13"
SUITE = "trixie"
PACKAGES = ("python3.13", "python3.13-venv", "libpython3.13", "ca-certificates", "util-linux", "mount", "procps")
"""libpython3.13: torch_xla's extension links against Python's shared library."""
UV_CACHE = Path(os.environ.get("UV_CACHE_DIR", Path.home() / ".cache" / "uv"))
"""uv's package cache, shared with the tree: compat_env.py's installs there reuse what it holds."""
SHARED = ("/proc", "/sys", "/dev", "/tmp", str(REPO.parent), str(UV_CACHE))
_READY = TREE / ".tpu_nb-tree-ready"


def mirror() -> str:
    """The Debian URI apt already uses here (Debian's registry), for debootstrap."""
    for sources in Path("/etc/apt").rglob("*"):
        if not sources.is_file() or not sources.name.endswith((".sources", ".list")):
            continue
        for line in sources.read_text().splitlines():
            words = line.split()
            if line.startswith("URIs:") and "debian" in line and "security" not in line:
                return words[1]
            if words[:1] == ["deb"] and "debian" in line and "security" not in line:
                return next(word for word in words[1:] if "://" in word)
    return "http://deb.debian.org/debian"


def build_tree() -> None:
    """Debootstrap Debian 13 with python3.13 into .debian13/ (kept: later runs reuse it, until PACKAGES change)."""
    if _READY.exists() and _READY.read_text() == _identity():
        return
    if os.geteuid() != 0:
        sys.exit("debian13.py tree: debootstrap and chroot need root (CI runs as root)")
    if shutil.which("debootstrap") is None:
        sys.exit("debian13.py tree: install debootstrap first (apt-get install debootstrap)")
    if TREE.exists():
        shutil.rmtree(TREE)  # a build cut short
    include = ",".join(PACKAGES)
    subprocess.run(["debootstrap", "--variant=minbase", f"--include={include}", SUITE, str(TREE), mirror()], check=True)
    for name in ("/etc/resolv.conf", "/etc/ssl/certs/ca-certificates.crt"):
        if Path(name).exists():
            target = TREE / name.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(name, target)
    _READY.write_text(_identity())


def _identity() -> str:
    return f"{SUITE} {' '.join(PACKAGES)}\n"


def run_inside(argv: list[str]) -> int:
    """ARGV run in the tree, in this directory, with the shared paths mounted; its exit code."""
    if not _READY.exists():
        sys.exit("debian13.py run: no tree yet; build it with: python scripts/debian13.py tree")
    tree = shlex.quote(str(TREE))
    UV_CACHE.mkdir(parents=True, exist_ok=True)
    mounts = [f"mount --bind {tree} {tree}"]  # its root a mount point: `unshare -m` inside can then make it private
    for path in SHARED:
        inside = shlex.quote(str(TREE) + path)
        mounts.append(f"mkdir -p {inside} && mount --rbind {shlex.quote(path)} {inside}")
    enter = f'cd {shlex.quote(os.getcwd())} && exec "$@"'
    script = " && ".join(mounts) + f" && exec chroot {tree} sh -c {shlex.quote(enter)} sh " + shlex.join(argv)
    environment = dict(os.environ)
    links = environment.get("PIP_FIND_LINKS")
    if links and not (TREE / links.lstrip("/")).exists():
        del environment["PIP_FIND_LINKS"]  # a wheel directory of this machine's, which the tree does not have
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], env=environment).returncode


def main(argv: list[str]) -> int:
    if argv[:1] == ["tree"]:
        build_tree()
        return 0
    if argv[:2] == ["run", "--"] and len(argv) > 2:
        return run_inside(argv[2:])
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
