"""Packaging for tb_neuraldbg (the frontend bundle build is hooked in here)."""

from setuptools import find_packages, setup

setup(
    name="tb_neuraldbg",
    version="0.1.0",
    description="Training-failure debugger for PyTorch: per-layer statistics, "
    "transition events and a TensorBoard heatmap of the first failing layer",
    packages=find_packages(include=["tb_neuraldbg", "tb_neuraldbg.*"]),
    package_data={"tb_neuraldbg": ["static/*"]},
    python_requires=">=3.9",
    install_requires=[
        "torch>=2.1",
        "tensorboard>=2.14",
        "numpy",
        "protobuf",
        "werkzeug",
    ],
    entry_points={
        "tensorboard_plugins": ["neuraldbg = tb_neuraldbg.plugin:NeuralDbgLoader"],
        "console_scripts": ["neuraldbg = tb_neuraldbg.cli:main"],
    },
)
