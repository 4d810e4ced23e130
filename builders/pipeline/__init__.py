"""From a pipeline description to served, tested models: the generator (``tritonrepo-new``) and
the builder entry of ``make artifacts`` (``python -m builders.pipeline.build``)."""
