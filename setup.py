"""Packaging for tb_neuraldbg.

Two things here are not plain setuptools:

* The TensorBoard tab is TypeScript in frontend/, bundled by esbuild into
  tb_neuraldbg/static/index.js. The bundle is not committed: every build from
  source (``pip install .``, ``pip install -e .``, ``pip wheel .``) runs
  ``npm ci`` (only when node_modules is missing or older than the lock file)
  and ``npm run build`` (only when a frontend source is newer than the
  bundle), so a stale bundle never ships (scripts/build_frontend.py). A
  wheel carries the built bundle, so installing a wheel needs no node.
* The demo scenarios live in demo/ (readable, runnable as scripts) and are
  installed as the package ``tb_neuraldbg._demo`` so ``neuraldbg demo`` works
  from a wheel.
"""

import importlib.util
import os

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.develop import develop

HERE = os.path.dirname(os.path.abspath(__file__))


def build_frontend():
    """scripts/build_frontend.py's build, with a clear message on failure."""
    path = os.path.join(HERE, "scripts", "build_frontend.py")
    spec = importlib.util.spec_from_file_location("_tb_neuraldbg_build_frontend", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        module.build_frontend()
    except module.FrontendBuildError as e:
        raise SystemExit(f"tb_neuraldbg: {e}") from None


def _readme():
    path = os.path.join(HERE, "README.md")
    if not os.path.isfile(path):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read()


class BuildPy(build_py):
    """build_py (wheels, plain and editable installs) builds the bundle first."""

    def run(self):
        build_frontend()
        super().run()


class Develop(develop):
    """Legacy `setup.py develop` builds the bundle too."""

    def run(self):
        build_frontend()
        super().run()


setup(
    name="tb_neuraldbg",
    version="0.1.0",
    description="Training-failure debugger for PyTorch: per-layer statistics, "
    "transition events and a TensorBoard heatmap of the first failing layer",
    long_description=_readme(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["tb_neuraldbg", "tb_neuraldbg.*"]) + ["tb_neuraldbg._demo"],
    package_dir={"tb_neuraldbg._demo": "demo"},
    package_data={"tb_neuraldbg": ["static/*"]},
    python_requires=">=3.9",
    install_requires=[
        "torch>=2.1",
        "tensorboard>=2.14",
        "numpy",
        "protobuf",
        "werkzeug",
        # TFRecord checksums in C: TensorBoard's own are pure Python (27 ms
        # for one step of a 1,000-module model, against 0.05 ms).
        "google-crc32c>=1.5",
    ],
    extras_require={
        # Pinned so that a test run means the same thing on every machine.
        "test": [
            "pytest==9.2.0",
            "jsonschema==4.26.0",  # the report's JSON against docs/report.schema.json
            "google-crc32c==1.9.0",  # pinned here; a dependency of the package
            # The integrations' tests (tiny models on CPU), installed with
            # torch kept at its pin (scripts/setup_env.sh names it on the
            # same pip line).
            "lightning==2.6.6",  # also installs the pytorch_lightning namespace
            "transformers==5.24.0",
            "accelerate==1.15.0",
            "moto[server]==5.2.5",  # a local S3 server for the s3:// round trip
            "hypothesis==6.170.17",  # fuzzing the reader and the routes (bounded budget)
        ],
    },
    entry_points={
        "tensorboard_plugins": ["neuraldbg = tb_neuraldbg.server.plugin:NeuralDbgLoader"],
        "console_scripts": ["neuraldbg = tb_neuraldbg.cli:main"],
    },
    cmdclass={"build_py": BuildPy, "develop": Develop},
)
