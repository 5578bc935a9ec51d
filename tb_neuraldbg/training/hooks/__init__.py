"""The hooks on the user's model, optimizer, criterion and scaler: what a training step measures.

``instrument`` (:class:`~.instrument.Instrument`: installs every hook and
follows each step from the model's input to its commit) with its
collaborators: ``forward`` (the per-module hooks and the step state they
share), ``module_stats`` (what a module's hook measures), ``module_hooks``
(the module hooks off on cheap steps), ``backward`` (where a backward starts
and ends), ``params`` (rows, parameters, gradient and weight norms),
``pseudo_rows`` (batch, loss, learning rate), ``step_check`` and ``replay``
(finding where a non-finite value is born), ``replay_state`` (what a replay
puts back: Python's and numpy's generators, the modules' own state), ``step_facts`` (leftover
gradients, param groups, modules run without autograd), ``guard`` (hook
bodies that never break training), ``gcpause``.
"""
