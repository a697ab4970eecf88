"""Reproduce: the hot ops of a trace as standalone benchmarks with their exact inputs (``opscope repro``).

- :mod:`~opscope.repro.cases` picks the cases (an op the model's code called, with distinct inputs) from a trace;
- :mod:`~opscope.repro.registry` asks torch which ops exist and their schemas;
- :mod:`~opscope.repro.rebuild` turns recorded inputs into a call of one overload with typed values
  (:mod:`~opscope.repro.values`); :mod:`~opscope.repro.crossframework` maps TensorFlow ops to PyTorch ones
  (:mod:`~opscope.repro.tensorflow`);
- :mod:`~opscope.repro.variants` says which alternatives apply; :mod:`~opscope.repro.script` writes a script
  (the case as literals plus :mod:`~opscope.repro.harness`, which needs only torch); :mod:`~opscope.repro.writer`
  writes the directory and cases.json; :mod:`~opscope.repro.run` runs the scripts; :mod:`~opscope.repro.report`
  shows the result; :mod:`~opscope.repro.measure` measures the advise rule's alternatives (advise --measure).
"""
