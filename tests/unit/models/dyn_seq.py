import torch


class Scale(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):
        return torch.softmax(x * self.w, dim=1)


torch.manual_seed(0)
model = Scale()
example_inputs = (torch.randn(2, 5, 8),)
dynamic_axes = {"x": {1: "seq"}}
dynamic_ranges = {"seq": (1, 64)}
