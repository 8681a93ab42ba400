"""Builds torch_pjrt's extension with CMake (Ninja, ccache when present) against the installed torch.

Install with build isolation off, so that the build sees the torch you run with:
    pip install --no-build-isolation .

The extension is named for the torch minor it is built for (torch_pjrt/_C_torch2_13.*.so); the package
loads the one matching the torch it runs with. TORCH_PJRT_PREBUILT=folder adds the extensions found there
(_C_torch*.so, built against other torch minors) to the wheel: scripts/build-wheel.sh makes one wheel for
several torch versions that way. The wheel requires a torch of the minors it holds.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    import torch
except ImportError as e:  # an isolated build environment (pip without --no-build-isolation, python -m build)
    raise SystemExit(
        "torch_pjrt builds its extension against the torch it will run with, and this environment has none. "
        "Install torch first, then build without isolation: pip install --no-build-isolation . "
        "(or python -m build --wheel --no-isolation), or use scripts/build-wheel.sh."
    ) from e

ROOT = Path(__file__).resolve().parent
TAG = re.compile(r"_C_torch(\d+)_(\d+)\.")


def torch_minor_tag(version):
    major, minor = version.split("+")[0].split(".")[:2]
    return f"{major}_{minor}"


class CMakeBuild(build_ext):
    def run(self):
        # setuptools' staging folder (build/lib.*) outlives a build: an extension staged by an earlier build for
        # another set of torch minors would go into this wheel too, so only this build's extensions stay.
        keep = {Path(self.get_ext_fullpath(ext.name)).name for ext in self.extensions}
        for stale in Path(self.build_lib, "torch_pjrt").glob("_C_torch*"):
            if stale.name not in keep:
                stale.unlink()
        super().run()

    def build_extension(self, ext):
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        prebuilt = getattr(ext, "prebuilt", None)
        if prebuilt is None:
            prebuilt = self.cmake_build(ext.name.rsplit(".", 1)[1])
        shutil.copy2(prebuilt, target)

    def cmake_build(self, name):
        build_dir = Path(os.environ.get("TORCH_PJRT_BUILD_DIR", ROOT / "build"))
        build_dir.mkdir(parents=True, exist_ok=True)
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.check_call(
            ["cmake", str(ROOT), *generator, f"-DPython3_EXECUTABLE={sys.executable}",
             f"-DCMAKE_BUILD_TYPE={os.environ.get('TORCH_PJRT_BUILD_TYPE', 'RelWithDebInfo')}"],
            cwd=build_dir,
        )
        jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", ".", "-j", jobs], cwd=build_dir)
        return next(build_dir.glob(f"{name}.*so"))


def extensions():
    """This torch's extension, built here, and the prebuilt ones for other torch minors."""
    own = torch_minor_tag(torch.__version__)
    exts = {own: Extension(f"torch_pjrt._C_torch{own}", sources=[])}
    folder = os.environ.get("TORCH_PJRT_PREBUILT")
    if folder:
        for path in sorted(Path(folder).glob("_C_torch*.so")):
            tag = "_".join(TAG.match(path.name).groups())
            ext = Extension(f"torch_pjrt._C_torch{tag}", sources=[])
            ext.prebuilt = path
            exts[tag] = ext
    return exts


def torch_requirement(tags):
    minors = sorted(tuple(map(int, t.split("_"))) for t in tags)
    (lo_major, lo_minor), (hi_major, hi_minor) = minors[0], minors[-1]
    return f"torch>={lo_major}.{lo_minor},<{hi_major}.{hi_minor + 1}"


exts = extensions()
setup(
    ext_modules=list(exts.values()),
    cmdclass={"build_ext": CMakeBuild},
    install_requires=[torch_requirement(exts)],
)
