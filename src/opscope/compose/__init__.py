"""The documents renderers lay out, composed from what the analyses, advise and diff compute: the HTML report's
pages (:mod:`.page`), the plan of an export (:mod:`.export`) and the graphs of ``opscope graph`` (:mod:`.graph`).

Nothing here formats or writes a file: a page holds Report sections, chart specs, fields and prose; an export
plan the kept rows, links, tracks and marks; a graph its boxes and edges. ``opscope.render`` lays each out, and
imports nothing from this layer or the ones it calls.
"""
