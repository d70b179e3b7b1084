import torch


class Cat(torch.nn.Module):
    def forward(self, x, y):
        return torch.cat([x, y], 0)


model = Cat()
example_inputs = (torch.randn(2, 5), torch.randn(2, 6))
dynamic_axes = {"x": {1: "seq"}, "y": {1: "seq"}}
dynamic_ranges = {"seq": (1, 64)}
