"""Caffe nets and solvers as trials (issue #17): reading prototxt, the layer graph, the solver.

Only the text format lives here so far (`core.caffe.prototxt`); torch never loads in `core`:
the module a net builds into is `workers`' business.
"""
