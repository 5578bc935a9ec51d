"""The ground floor: the stored format, imported by every side and importing none of them.

``metadata`` (plugin name, version, tags, the tables of states and metrics),
``summary`` (data -> protos), ``decode`` (stored tensors -> arrays),
``sessions`` (a run's writers: what a resume hides, whether it was closed),
``contract`` (the report JSON).
"""
