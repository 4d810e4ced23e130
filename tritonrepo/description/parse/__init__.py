"""Reading a description's TOML into the types of :mod:`tritonrepo.description.schema`, every
problem collected and reported at once (:class:`~tritonrepo.description.DescriptionError`):

* :mod:`~tritonrepo.description.parse.reader`: :class:`~.reader.Reader` (typed fields) and the
  tables every shape shares (tensors, config sets, ``[probe]``, ``[samples]``);
* :mod:`~tritonrepo.description.parse.model_tables`: a step table and a core table;
* :mod:`~tritonrepo.description.parse.single_core`: a description of one core model;
* :mod:`~tritonrepo.description.parse.stateful`: ``[sequence]`` and ``[session]``;
* :mod:`~tritonrepo.description.parse.core_state`: ``[[sequence.state]]`` and session step classes;
* :mod:`~tritonrepo.description.parse.graph`: several core models (``[models.<key>]``,
  ``[[step]]``);
* :mod:`~tritonrepo.description.parse.options`: ``[openai_embeddings]``, ``[canary]``,
  ``[drift]``.
"""
