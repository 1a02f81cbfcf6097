"""Example training functions for Sweepstack (`trainable:` in a spec).

- ``digits_cnn``: a small PyTorch convolutional network on the 8 x 8 digits images;
- ``digits_sgd``: scikit-learn's `SGDClassifier`, one pass over the data an epoch, to show
  that a training function need not use PyTorch.

Each is ``train(params, ctx)``: `params` the trial's ``params`` section, `ctx` Sweepstack's
trial context (``report``, ``should_stop``, ``device``, ``seed``, ``epochs``, ``dataset()``).
"""
