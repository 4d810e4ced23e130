"""The ``image_classification`` pipeline: decoding and preprocessing, postprocessing, labels, the
Python-backend steps and the in-process PyTorch reference."""
