import torch


class Tokens(torch.nn.Module):
    """HF DPT's reassemble stage: a token grid's side computed as int(sequence_length ** 0.5). torch.export
    fixes it to the example's 4 under a guard, trunc(sqrt(h * w)) == 4, that it does not report against the
    ranges; h, w = 2..6 breaks it at 2 x 2."""

    def forward(self, x):
        b, c, h, w = x.shape
        tokens = x.flatten(2).transpose(1, 2)
        side = int(tokens.shape[1] ** 0.5)
        return tokens.reshape(b, side, side, c) * 2


def model():
    return Tokens()


example_inputs = (torch.randn(2, 3, 4, 4),)
dynamic_axes = {"x": {2: "h", 3: "w"}}
dynamic_ranges = {"h": (2, 6), "w": (2, 6)}
