"""Caffe nets, solvers and image data in PyTorch (issue #17)."""
