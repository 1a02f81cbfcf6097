"""Tests of the Caffe nets, solvers and image data in PyTorch."""
