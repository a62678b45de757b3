"""Builds the `kolo` Python package: the pure-Python modules of python/kolo
and the extension kolo._native, compiled by CMake (python/CMakeLists.txt)
together with libkolo, which is shipped next to it (the extension finds it
through $ORIGIN). Use pip, without build isolation (no network needed):

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
    """Builds every extension (there is one) with CMake."""

    def build_extension(self, ext):
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
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

        # The extension and libkolo (the real file, under its soname).
        built = os.path.join(build_dir, "python", "kolo")
        target = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        os.makedirs(target, exist_ok=True)
        native = glob.glob(os.path.join(built, "_native*.so"))
        if len(native) != 1:
            raise RuntimeError(f"kolo: expected one _native*.so in {built}, found {native}")
        shutil.copyfile(native[0], self.get_ext_fullpath(ext.name))
        for lib in glob.glob(os.path.join(built, "libkolo.so*")):
            shutil.copyfile(os.path.realpath(lib), os.path.join(target, os.path.basename(lib)))


setup(
    packages=find_packages("python", exclude=["*.tests"]),
    package_dir={"": "python"},
    ext_modules=[Extension("kolo._native", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
    options={
        "build": {"build_base": BUILD_BASE},
        "egg_info": {"egg_base": BUILD_BASE},
        "bdist_wheel": {"bdist_dir": os.path.join(BUILD_BASE, "bdist")},
    },
)
