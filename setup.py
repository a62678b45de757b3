"""Builds the `kolo` Python package: the pure-Python modules of python/kolo
and the extensions kolo._native and kolo._predict (the scale model behind
kolo.predict), compiled by CMake (python/CMakeLists.txt) together with
libkolo, which is shipped next to them (the extensions find it through
$ORIGIN). Use pip, without build isolation (no network needed):

    /usr/bin/python3 -m pip install --no-build-isolation .
    /usr/bin/python3 -m pip install --no-build-isolation --target DIR .

Environment: KOLO_CMAKE_ARGS adds CMake arguments; KOLO_BUILD_JOBS sets the
parallel jobs (default: the number of CPUs).
"""

import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
# setuptools' scratch (build/lib*, build/temp*, bdist, egg-info) goes to
# build-pip/, away from the CMake build tree `build/` and from python/.
BUILD_BASE = os.path.join(ROOT, "build-pip")
os.makedirs(BUILD_BASE, exist_ok=True)


class CMakeBuild(build_ext):
    """Builds the extensions with one CMake run: the target kolo_native
    builds kolo._predict too (python/CMakeLists.txt)."""

    def build_extension(self, ext):
        built = self._cmake_build()
        stem = ext.name.split(".")[-1]
        found = glob.glob(os.path.join(built, stem + "*.so"))
        if len(found) != 1:
            raise RuntimeError(f"kolo: expected one {stem}*.so in {built}, found {found}")
        target = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        os.makedirs(target, exist_ok=True)
        shutil.copyfile(found[0], self.get_ext_fullpath(ext.name))
        # libkolo (the real file, under its soname), next to the extensions.
        for lib in glob.glob(os.path.join(built, "libkolo.so*")):
            shutil.copyfile(os.path.realpath(lib), os.path.join(target, os.path.basename(lib)))

    def _cmake_build(self):
        """Configures and builds once; returns the folder of the built package."""
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        built = os.path.join(build_dir, "python", "kolo")
        if getattr(self, "_kolo_built", False):
            return built
        os.makedirs(build_dir, exist_ok=True)
        args = [
            "cmake", "-S", ROOT, "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DKOLO_BUILD_PYTHON=ON",
            "-DKOLO_PYTHON_ORIGIN_RPATH_ONLY=ON",
            "-DKOLO_BUILD_TESTS=OFF",
            "-DKOLO_BUILD_TOOLS=OFF",
            "-DKOLO_BUILD_EXAMPLES=OFF",
            "-DKOLO_WITH_TORCH=OFF",
            # kolo.tensorflow's op library is built by CMake for one
            # TensorFlow (docs/tensorflow.md), not by pip.
            "-DKOLO_WITH_TENSORFLOW=OFF",
        ]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        args += shlex.split(os.environ.get("KOLO_CMAKE_ARGS", ""))
        subprocess.check_call(args)
        jobs = os.environ.get("KOLO_BUILD_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "kolo_native",
                               "-j", jobs])
        self._kolo_built = True
        return built


setup(
    packages=find_packages("python", exclude=["*.tests"]),
    package_dir={"": "python"},
    ext_modules=[Extension("kolo._native", sources=[]), Extension("kolo._predict", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
    options={
        "build": {"build_base": BUILD_BASE},
        "egg_info": {"egg_base": BUILD_BASE},
        "bdist_wheel": {"bdist_dir": os.path.join(BUILD_BASE, "bdist")},
    },
)
