"""The book's companion: one module per chapter (``chNN``) with the chapter's GPU experiment
(``record(out_dir, ...)``) and the readers that turn its records into tables and figures.

Library modules never import from here; chapters and :mod:`fusedrms.record` do.
"""
