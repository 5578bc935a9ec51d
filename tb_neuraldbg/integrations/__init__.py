"""Callbacks for training frameworks: ``integrations.lightning`` (Lightning,
both the ``lightning`` and ``pytorch_lightning`` namespaces) and
``integrations.transformers`` (the Hugging Face Trainer). Each is imported on
its own, so that neither framework is needed by the other or by the package.
"""
