"""A whole job: the ranks' small per-rank tables combined into one view (collectives matched across ranks, clocks
aligned, stragglers and why). Pure functions on Arrow tables; per-rank work runs elsewhere (``opscope.scale``)."""
