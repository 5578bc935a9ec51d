"""The TensorBoard plugin: loader and routes, data access through the data provider, heatmap binning.

Imports no torch and nothing of ``training/``.
"""
