"""Framework callbacks, importable as ``sysmetrics.integrations.<framework>``.

Each module imports its framework, so import the one you use; installing the
matching extra (``sysmetrics-train[lightning]``, ``[transformers]``, ``[keras]``)
brings the framework in.
"""
