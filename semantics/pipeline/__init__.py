"""Pipelines: chains of stateful operators over one source or a union of sources (SPEC.md
§1.2, docs/semantics.md §13). ``spec`` holds the YAML model, ``columns`` the columns each stage
sees, ``runner`` the reference runner a prediction of a pipeline uses."""

import semantics.spec  # noqa: F401  (first: semantics.spec imports pipeline.spec mid-way)
