"""Fixtures of the pipeline generator's unit tests: the ``toy`` pipeline's code (its ONNX graph,
numpy steps and samples) and :mod:`.workspace`, a throw-away checkout to generate into."""
