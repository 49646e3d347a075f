"""Builds tensorbroker's extension through the project's CMake, for pyproject.toml.

The extension (_core) and the two libraries it loads, libtensorbroker_client.so.0 and
libtensorbroker_proto.so.0, go side by side into the wheel's package directory, each finding the
next there through an $ORIGIN run path (TENSORBROKER_PYTHON_WHEEL=ON): the wheel needs no
LD_LIBRARY_PATH and no installed tensorbroker, only the system libraries they link (gRPC,
protobuf, Abseil from Debian). The version is the one in ../CMakeLists.txt.

Environment: TENSORBROKER_CMAKE_ARGS (extra -D settings, split on spaces),
TENSORBROKER_WHEEL_BUILD_DIR (CMake's build tree, kept; default: under setuptools' build_temp),
CMAKE_BUILD_PARALLEL_LEVEL.
"""

import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(\s*tensorbroker\s+VERSION\s+([0-9][0-9.]*)", text)
    if not match:
        raise RuntimeError(f"no project(tensorbroker VERSION ...) in {ROOT / 'CMakeLists.txt'}")
    return match.group(1)


class CMakeBuild(build_ext):
    """Configures the whole project for this interpreter and builds only the extension."""

    # What the wheel carries beside _core, from the build tree (the files their sonames name).
    LIBRARIES = ["client/libtensorbroker_client.so.0", "proto/libtensorbroker_proto.so.0"]

    def build_extension(self, ext):
        # $TENSORBROKER_WHEEL_BUILD_DIR keeps CMake's tree between builds (the tests use it).
        build = pathlib.Path(os.environ.get("TENSORBROKER_WHEEL_BUILD_DIR") or
                             pathlib.Path(self.build_temp) / "cmake").resolve()
        build.mkdir(parents=True, exist_ok=True)
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DTENSORBROKER_PYTHON={sys.executable}",
            "-DTENSORBROKER_PYTHON_WHEEL=ON",
            "-DTENSORBROKER_BUILD_TESTS=OFF",
            "-DTENSORBROKER_BUILD_BENCH=OFF",
        ]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        configure += shlex.split(os.environ.get("TENSORBROKER_CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "tensorbroker_python"],
                       check=True)
        package = pathlib.Path(self.get_ext_fullpath(ext.name)).parent
        package.mkdir(parents=True, exist_ok=True)
        built = build / "python" / "tensorbroker"
        cores = list(built.glob("_core*.so"))
        if len(cores) != 1:
            raise RuntimeError(f"expected one _core*.so in {built}, found {cores}")
        shutil.copyfile(cores[0], self.get_ext_fullpath(ext.name))
        shutil.copyfile(built / "_version.py", package / "_version.py")
        for library in self.LIBRARIES:
            # copyfile follows the soname's link to the real file and names it by the soname.
            shutil.copyfile(build / library, package / pathlib.Path(library).name)


setup(
    version=project_version(),
    ext_modules=[Extension("tensorbroker._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
)
