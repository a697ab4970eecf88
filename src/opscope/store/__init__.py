"""The cache of parsed traces (one entry per source file version) and of analysis results.

:mod:`.keys` names an entry (what the key trusts); :mod:`.files` is the format of its files (Arrow IPC tables,
checksums); :mod:`.entry` writes an entry under a temporary name and publishes it by rename, loads one into a
:class:`~opscope.model.trace.Trace` and discards a damaged one; :mod:`.results` keeps what analyses computed on a
cached trace, one file each, published by rename, pruning the results of other code. A published entry is never
modified in place.
"""
