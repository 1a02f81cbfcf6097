"""Caffe nets trained with PyTorch (issue #17)."""
