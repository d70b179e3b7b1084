import torch


class Recurrent(torch.nn.Module):
    """The TorchScript trace pitfall: a Python loop over a dynamic size."""

    def forward(self, x):
        out = []
        for t in range(x.shape[1]):  # LOOP
            out.append(x[:, t] * 2)
        return torch.stack(out, 1)


model = Recurrent()
example_inputs = (torch.randn(2, 10),)
dynamic_axes = {"x": {1: "seq"}}
dynamic_ranges = {"seq": (1, 64)}
