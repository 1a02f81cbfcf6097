"""scikit-learn's `SGDClassifier` on a bundled data set, as a Sweepstack trainable.

Not PyTorch: any Python code can be a training function. One epoch is one pass of
`partial_fit` over the training rows in a seeded order, so the sweep sees a learning curve
and a pruner can stop a poor setting early. Parameters (all optional, under ``params``):
``loss`` (``hinge``, ``log_loss``, ``modified_huber`` ...), ``penalty`` (``l2``, ``l1``,
``elasticnet``), ``alpha`` (the regularisation strength) and ``eta0`` with
``learning_rate`` (``optimal`` ignores ``eta0``; ``constant``, ``invscaling`` and
``adaptive`` need it). Each epoch reports ``train_accuracy`` and ``val_accuracy``.

`cost` declares what a trial costs (docs/trainables.md); the API reads it without
scikit-learn, which is imported inside `train`.
"""

from __future__ import annotations

from typing import Any

#: The largest bundled data set's features and classes (digits), and its rows.
FEATURES, CLASSES, ROWS = 64, 10, 1797


def cost(params: dict[str, Any]) -> dict[str, int]:
    """One linear model per class (one for two classes) of the features, and a pass over the
    rows' features and scores."""
    return {"parameters": (FEATURES + 1) * CLASSES, "activations": ROWS * (FEATURES + CLASSES)}


def train(params: dict[str, Any], ctx: Any) -> None:
    """Fit the classifier for `ctx.epochs` passes, reporting the accuracy after each."""
    import numpy as np
    from sklearn.linear_model import SGDClassifier

    data = ctx.dataset()
    if data.task != "classification":
        raise ValueError(f"digits_sgd needs a classification data set, got {data.task}")
    model = SGDClassifier(
        loss=params.get("loss", "hinge"),
        penalty=params.get("penalty", "l2"),
        alpha=float(params.get("alpha", 1e-4)),
        learning_rate=params.get("learning_rate", "optimal"),
        eta0=float(params.get("eta0", 0.01)),
        random_state=ctx.seed,
    )
    classes = np.arange(data.n_classes)
    rng = np.random.default_rng(ctx.seed)
    for epoch in range(1, ctx.epochs + 1):
        order = rng.permutation(data.n_train)
        model.partial_fit(data.x_train[order], data.y_train[order], classes=classes)
        ctx.report(
            epoch,
            train_accuracy=model.score(data.x_train, data.y_train),
            val_accuracy=model.score(data.x_val, data.y_val),
        )
        if ctx.should_stop():
            return
