"""A small convolutional network on the 8 x 8 digits images, as a Sweepstack trainable.

The spec names ``dataset: {name: digits}``; `ctx.dataset()` gives its 64 standardised pixels
per image, which this function lays out again as one 8 x 8 channel. Parameters (all
optional, under ``params``): ``channels`` (first convolution's filters; the second has
twice as many), ``kernel_size`` (odd), ``conv_layers`` (1 or 2), ``hidden`` (units of the
dense layer), ``dropout``, ``lr`` (Adam's learning rate) and ``batch_size``.

Every epoch reports ``train_loss``, ``val_loss`` and ``val_accuracy``, and the function asks
`ctx.should_stop()` after each one, so a pruner or a cancel ends it between epochs. It saves
its model, optimiser and data order with `ctx.save_checkpoint` every ``checkpoint_every``
epochs (default 5) and starts with `ctx.load_checkpoint()`, so a trial whose worker was
killed goes on where its last checkpoint left it.

`cost` declares what a trial costs, so that the server's ceilings hold for this function
too (docs/trainables.md): the API reads it without torch, which is why torch is imported
inside the functions that train.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

SIDE = 8
#: The digits' classes, and its images: an evaluation passes the validation split at once.
CLASSES = 10
ROWS = 1797


def cost(params: dict[str, Any]) -> dict[str, int]:
    """The parameters of the network `params` describe, and the elements the larger of a
    training batch and the validation pass holds at once (every layer's output)."""
    channels = int(params.get("channels", 16))
    kernel = int(params.get("kernel_size", 3))
    hidden = int(params.get("hidden", 64))
    widths = [channels * 2**i for i in range(int(params.get("conv_layers", 1)))]
    weights, inputs = 0, 1
    for width in widths:
        weights += width * inputs * kernel * kernel + width
        inputs = width
    flat = inputs * (SIDE // 2) ** 2
    weights += flat * hidden + hidden + hidden * CLASSES + CLASSES
    per_sample = 2 * sum(widths) * SIDE * SIDE + flat + 2 * hidden + CLASSES
    rows = max(int(params.get("batch_size", 64)), ROWS)
    return {"parameters": weights, "activations": rows * per_sample}


def build(params: dict[str, Any], classes: int) -> nn.Module:
    """The network `params` describe: one or two same-size convolutions, then two dense layers."""
    from torch import nn

    channels = int(params.get("channels", 16))
    kernel = int(params.get("kernel_size", 3))
    if kernel % 2 == 0:
        raise ValueError(f"params.kernel_size must be odd (same-size convolutions), got {kernel}")
    layers: list[nn.Module] = [nn.Conv2d(1, channels, kernel, padding=kernel // 2), nn.ReLU()]
    width = channels
    for _ in range(int(params.get("conv_layers", 1)) - 1):
        layers += [nn.Conv2d(width, width * 2, kernel, padding=kernel // 2), nn.ReLU()]
        width *= 2
    hidden = int(params.get("hidden", 64))
    layers += [
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(width * (SIDE // 2) ** 2, hidden),
        nn.ReLU(),
        nn.Dropout(float(params.get("dropout", 0.0))),
        nn.Linear(hidden, classes),
    ]
    return nn.Sequential(*layers)


def _evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    import torch
    import torch.nn.functional as F

    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = F.cross_entropy(logits, y).item()
        accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    model.train()
    return loss, accuracy


def train(params: dict[str, Any], ctx: Any) -> None:
    """Train the CNN for `ctx.epochs` epochs, reporting each."""
    import torch
    import torch.nn.functional as F

    data = ctx.dataset()
    device = torch.device(ctx.device)
    x_train = torch.tensor(data.x_train, dtype=torch.float32, device=device)
    y_train = torch.tensor(data.y_train, dtype=torch.long, device=device)
    x_val = torch.tensor(data.x_val, dtype=torch.float32, device=device)
    y_val = torch.tensor(data.y_val, dtype=torch.long, device=device)
    x_train = x_train.view(-1, 1, SIDE, SIDE)
    x_val = x_val.view(-1, 1, SIDE, SIDE)
    model = build(params, data.n_classes).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(params.get("lr", 1e-3)))
    batch = int(params.get("batch_size", 64))
    order = torch.Generator(device="cpu").manual_seed(ctx.seed)
    every = int(params.get("checkpoint_every", 5))
    first = 1
    state = ctx.load_checkpoint()
    if state is not None:  # an earlier attempt's: go on from it
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        order.set_state(state["order"])
        first = int(state["epoch"]) + 1
    for epoch in range(first, ctx.epochs + 1):
        total, seen = 0.0, 0
        for index in torch.randperm(len(x_train), generator=order).split(batch):
            index = index.to(device)
            loss = F.cross_entropy(model(x_train[index]), y_train[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(index)
            seen += len(index)
        val_loss, val_accuracy = _evaluate(model, x_val, y_val)
        ctx.report(epoch, train_loss=total / seen, val_loss=val_loss, val_accuracy=val_accuracy)
        if epoch % every == 0:
            ctx.save_checkpoint({"epoch": epoch, "model": model.state_dict(),
                                 "optimizer": optimizer.state_dict(), "order": order.get_state()})
        if ctx.should_stop():
            return
