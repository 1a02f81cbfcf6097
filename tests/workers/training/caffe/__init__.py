"""Tests of Caffe nets built into PyTorch modules."""
