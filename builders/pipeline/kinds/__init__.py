"""The generator by kind of description: each shape of ``pipeline.toml`` is one kind, with its
checks and its files behind one interface (:class:`~builders.pipeline.kinds.base.Kind`), and
:func:`~builders.pipeline.kinds.selection.kind_of` is the one place that says which kind a
description is.

* single core (:mod:`~builders.pipeline.kinds.single_core`): ``[preprocess]``, ``[model]``,
  ``[postprocess]``; an ensemble of three models, and the one-step models of each config set
  (:mod:`builders.pipeline.serving_forms`);
* several models (:mod:`~builders.pipeline.kinds.graph`): ``[models.<key>]``, ``[[step]]``; an
  ensemble of its steps;
* session (:mod:`~builders.pipeline.kinds.session`): ``[sequence]``, ``[session] step`` and/or
  ``[[sequence.state]]`` (state the core returns); the session model (the step's state, the
  core's fed back per event) and the core, proven event by event
  (:mod:`~builders.pipeline.kinds.session_proof`);
* session step class (:mod:`~builders.pipeline.kinds.core_state`): ``[sequence]`` with
  ``[[sequence.state]]`` and ``[session] step_class``; one model, the graph with Triton's
  implicit state (the hand-written session step class in the CPU sets).

What the kinds share: :mod:`~builders.pipeline.kinds.base` (the interface, clashes, imports of
the user's functions, tensors compared), :mod:`~builders.pipeline.kinds.sample_checks` (the
probe from the samples, the core's outputs against its declared shapes, sample sessions),
:mod:`~builders.pipeline.kinds.core_model` (a core's graph, tensors and files) and
:mod:`~builders.pipeline.kinds.declared` (``[probe]``, ``ragged_inputs``). Every config is
written by :mod:`builders.pipeline.config_writer` from typed data.
"""
