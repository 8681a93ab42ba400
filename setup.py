"""Builds torch_pjrt._C with CMake (Ninja, ccache when present) against the installed torch.

Install with build isolation off, so that the build sees the torch you run with:
    pip install --no-build-isolation .
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
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
        built = next(build_dir.glob("_C*.so"))
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target)


setup(
    ext_modules=[Extension("torch_pjrt._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
)
